"""Retries of transient storage failures, so one failed request does not end a training run.

A batch is fetched, then every file that failed with a *transient* error
(connection reset, timeout, truncated body, HTTP 408/429/500/502/503/504,
S3 `SlowDown`) is fetched again after a capped exponential backoff with full
jitter, until it succeeds, reaches `attempts`, or the batch's `budget` of
extra requests is spent. Missing objects, bad credentials and corrupt data
are never retried. The data a batch holds never depends on retries: only
failed files are fetched again, into the same positions.
"""

from __future__ import annotations

import dataclasses
import random
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from remote_keras import errors

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# Exception class names of clients we do not import (aiohttp, urllib3, http.client, botocore).
_TRANSIENT_NAMES = frozenset(
    {
        "ClientPayloadError",
        "ServerDisconnectedError",
        "ClientOSError",
        "ServerTimeoutError",
        "ProtocolError",
        "IncompleteRead",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "ReadTimeout",
        "ConnectTimeout",
        "EndpointConnectionError",
        "ResponseStreamingError",
        "ContentLengthError",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "Throttling",
        "TooManyRequests",
    }
)
# obstore reports every failure as a GenericError; only its text tells them apart.
_TRANSIENT_TEXT = re.compile(
    r"\b(408|429|500|502|503|504)\b|SlowDown|Service Unavailable|error sending request"
    r"|body error|timed out|connection (reset|closed)",
    re.IGNORECASE,
)
_PERMANENT = (FileNotFoundError, PermissionError, errors.ImageDecodeError, errors.InvalidRowsError)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried.

    Args:
        attempts: Requests per file at most, the first included. `1` turns
            retries off.
        budget: Extra requests one batch may spend on retries in total.
        backoff_s: Base delay; attempt `n` waits up to
            `min(max_backoff_s, backoff_s * 2**n)` seconds (full jitter).
        max_backoff_s: Cap of one delay.
        timeout_s: Seconds one request may take before it counts as a
            transient failure (a stalled request never hangs training).
    """

    attempts: int = 5
    budget: int = 64
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.budget < 0 or self.timeout_s <= 0:
            raise ValueError(
                f"`retries` needs attempts >= 1, budget >= 0 and timeout_s > 0. Received: {self!r}"
            )

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait before retry number `attempt` (1 for the first retry)."""
        return rng.uniform(0, min(self.max_backoff_s, self.backoff_s * 2**attempt))


def as_policy(retries: RetryPolicy | int | None) -> RetryPolicy:
    """Accepts a policy, a number of attempts, or `None` for the default policy."""
    if retries is None:
        return RetryPolicy()
    if isinstance(retries, RetryPolicy):
        return retries
    if isinstance(retries, int) and not isinstance(retries, bool):
        return RetryPolicy(attempts=retries)
    raise TypeError(
        f"`retries` must be a RetryPolicy, an int (attempts) or None. Received: {retries!r}"
    )


def is_transient(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from, is worth retrying."""
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _PERMANENT):
            return False
        if isinstance(current, (ConnectionError, TimeoutError)):
            return True
        status = getattr(current, "status", None) or getattr(current, "status_code", None)
        if status in TRANSIENT_STATUS:
            return True
        name = type(current).__name__
        if name in _TRANSIENT_NAMES:
            return True
        response = getattr(current, "response", None)  # botocore's ClientError
        if isinstance(response, dict):
            if response.get("Error", {}).get("Code") in _TRANSIENT_CODES:
                return True
            if response.get("ResponseMetadata", {}).get("HTTPStatusCode") in TRANSIENT_STATUS:
                return True
        if "Generic" in name and _TRANSIENT_TEXT.search(str(current)):  # obstore
            return True
        current = current.__cause__ or current.__context__
    return False


def fetch_with_retries(
    fetch: Callable[[list[str]], list[Any]],
    paths: Sequence[str],
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[Any], int]:
    """Fetches `paths`, retrying transient failures per `policy`.

    Args:
        fetch: Reads a list of paths; returns one result per path, an
            exception in place of a failed read.
        paths: What to read.
        policy: Attempts, budget, backoff.
        sleep: For tests.

    Returns:
        `(results, retries)`: the results in order, transient failures that
        could not be recovered replaced by an `ImageLoadError` naming the
        URL, the attempts and the last cause; and the number of retries made.
    """
    results = list(fetch(list(paths)))
    attempts = [1] * len(paths)
    budget = policy.budget
    rng = random.Random()  # noqa: S311 - jitter only, never influences which data is read
    retries = 0
    while budget > 0:
        again = [
            i
            for i, result in enumerate(results)
            if isinstance(result, BaseException)
            and attempts[i] < policy.attempts
            and is_transient(result)
        ][:budget]
        if not again:
            break
        sleep(policy.delay(max(attempts[i] for i in again), rng))
        for i, result in zip(again, fetch([paths[i] for i in again])):
            results[i] = result
            attempts[i] += 1
        budget -= len(again)
        retries += len(again)
    for i, result in enumerate(results):
        if isinstance(result, BaseException) and is_transient(result):
            results[i] = errors.gave_up(paths[i], attempts[i], result)
    return results, retries
