"""How long a request may take and how many connections a client keeps: the one place.

Reads are bounded by `RetryPolicy.timeout_s` (each loader turns it into its
client's settings here) and retried by `RetryPolicy`, never by the clients
themselves, so every retry is counted and `Retry-After` is honoured. Listings
and lakeFS API calls keep the defaults below.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

# Connections kept per host by s3fs (botocore) and the lakeFS SDK: one per request in flight
# (botocore keeps 10 and the SDK 5 per CPU core by default, which drops and reopens
# connections at remote_keras's concurrency).
POOL_CONNECTIONS = 256

# Seconds to connect and to wait for each read, for listings and lakeFS API calls.
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60

# obstore retries 10 times over up to 3 minutes by default, inside each of remote_keras's own
# attempts: a refused connection cost 11 GETs and 2 s per attempt.
OBSTORE_RETRY: dict[str, Any] = {
    "max_retries": 0,
    "retry_timeout": timedelta(seconds=10),
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=1)},
}
# obstore's own default is a 30 s overall timeout; `RetryPolicy.timeout_s` lowers these: a
# request cannot be cancelled, and a process waits for its thread at exit.
OBSTORE_CLIENT: dict[str, Any] = {
    "connect_timeout": timedelta(seconds=5),
    "timeout": timedelta(seconds=READ_TIMEOUT_S),
}

# Filesystems whose own retry loop (an attribute, not an option) is turned off for reads.
NO_CLIENT_RETRIES = {"s3": "retries", "s3a": "retries"}


def fsspec_reading_options(protocol: str, timeout_s: float | None) -> dict[str, dict[str, Any]]:
    """fsspec options bounding a connection and each socket read by `timeout_s`, no retries.

    Args:
        protocol: The URL's protocol (`"s3"`, `"https"`, ...).
        timeout_s: `RetryPolicy.timeout_s`; `None` (listing): the defaults.

    Returns:
        Options to merge into the filesystem's (user-given options win).
    """
    if timeout_s is None:
        return {}
    if protocol in ("s3", "s3a"):
        bound = {"connect_timeout": timeout_s, "read_timeout": timeout_s}
        return {"config_kwargs": {**bound, "retries": {"total_max_attempts": 1}}}
    if protocol in ("http", "https"):  # aiohttp's session, which fsspec's HTTP filesystem opens
        import aiohttp

        limit = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
        return {"client_kwargs": {"timeout": limit}}
    return {}
