"""How long a request may take and how many connections a client keeps: the one place.

Reads are bounded by `RetryPolicy.timeout_s` (each loader turns it into its
client's settings here) and retried by `RetryPolicy`, never by the clients
themselves, so every retry is counted and `Retry-After` is honoured. Listings
and lakeFS API calls keep the defaults below.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Seconds a client waits, to connect and for each read (the model: httpx's `Timeout`).

    Attributes:
        connect_s: To open a connection.
        read_s: For each read of a response (a stalled read then fails and
            is retried by `RetryPolicy`, never hangs a batch).
    """

    connect_s: float
    read_s: float

    def pair(self) -> tuple[float, float]:
        """`(connect, read)`, as urllib3 and the lakeFS SDK take them."""
        return (self.connect_s, self.read_s)


@dataclasses.dataclass(frozen=True)
class Limits:
    """How many connections a client keeps (the model: httpx's `Limits`).

    Attributes:
        per_host: Connections kept per host: one per request in flight
            (botocore keeps 10 and the lakeFS SDK 5 per CPU core by default,
            which drops and reopens connections at this package's concurrency).
    """

    per_host: int


# Listings and lakeFS API calls (reads take `RetryPolicy.timeout_s` instead).
API_TIMEOUTS = Timeouts(connect_s=10, read_s=60)
# s3fs (botocore), the lakeFS SDK and presigned reads (urllib3).
LIMITS = Limits(per_host=256)
# obstore's: it cannot cancel a request, and a process waits for its thread at exit, so
# connecting gets less than its own default (a 30 s overall timeout otherwise).
OBSTORE_TIMEOUTS = Timeouts(connect_s=5, read_s=API_TIMEOUTS.read_s)

# obstore retries 10 times over up to 3 minutes by default, inside each of remote_keras's own
# attempts: a refused connection cost 11 GETs and 2 s per attempt.
OBSTORE_RETRY: dict[str, Any] = {
    "max_retries": 0,
    "retry_timeout": timedelta(seconds=10),
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=1)},
}


def obstore_client_options(timeout_s: float | None) -> dict[str, Any]:
    """obstore's `client_options` timeouts: `OBSTORE_TIMEOUTS`, each request bounded by `timeout_s`.

    Args:
        timeout_s: `RetryPolicy.timeout_s`, or `None` for the defaults.

    Returns:
        `connect_timeout` and `timeout` as `timedelta`s.
    """
    connect = timedelta(seconds=OBSTORE_TIMEOUTS.connect_s)
    whole = timedelta(seconds=OBSTORE_TIMEOUTS.read_s if timeout_s is None else timeout_s)
    return {"connect_timeout": min(connect, whole), "timeout": whole}


def botocore_config() -> dict[str, Any]:
    """botocore's `config_kwargs` for the pool and timeouts (s3fs's listings and reads)."""
    return {
        "max_pool_connections": LIMITS.per_host,
        "connect_timeout": API_TIMEOUTS.connect_s,
        "read_timeout": API_TIMEOUTS.read_s,
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
