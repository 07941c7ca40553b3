"""Retries of transient storage failures: neither a failed request nor an outage ends training.

A batch is fetched, then every file that failed with a *transient* error
(connection refused or reset, timeout, truncated body, HTTP
408/429/500/502/503/504, S3 `SlowDown`, a temporary DNS failure) is fetched
again after a capped exponential backoff with full jitter, until it succeeds
or `deadline_s` (3 minutes by default) has passed since its first attempt.
So a store that restarts, fails over or is unreachable for up to about three
minutes only pauses training; nothing is counted per batch by default, so a
long outage costs nothing but time. `attempts` and `budget` add hard caps.

Never retried, because trying again cannot help: missing objects, bad
credentials, bytes that are not an image, an unknown host name (DNS says it
does not exist) and a TLS certificate that fails verification. A body that
does not match the store's checksum (`remote_keras.storage.integrity`) is retried, at
most `integrity.MISMATCH_ATTEMPTS` times.

The data a batch holds never depends on retries: only failed files are
fetched again, into the same positions.
"""

from __future__ import annotations

import dataclasses
import email.utils
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from remote_keras import errors
from remote_keras.cause_chain import chain, is_unknown_host
from remote_keras.client_errors import Kind, kind_of
from remote_keras.storage import integrity

logger = logging.getLogger("remote_keras")

# A file still failing this many seconds after its first attempt is logged (once per batch).
WARN_AFTER_S = 5.0
# obstore reports every failure as a GenericError; only its text tells them apart.
_TRANSIENT_TEXT = re.compile(
    r"\b(408|429|500|502|503|504)\b|SlowDown|Service Unavailable|error sending request"
    r"|body error|timed out|connection (reset|closed|refused)",
    re.IGNORECASE,
)
_PERMANENT = (errors.ImageDecodeError, errors.InvalidRowsError)
# Failures that are configuration, whatever wraps them: a host name that does not exist
# (`causes.is_unknown_host`) and a certificate that fails verification.
_PERMANENT_TEXT = re.compile(r"CERTIFICATE_VERIFY_FAILED", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried.

    The defaults ride out an outage of the store (refused connections,
    resets, 5xx) of up to `deadline_s` without tuning.

    Args:
        attempts: Requests per file at most, the first included; `1` turns
            retries off. `None` (the default): as many as fit in `deadline_s`.
        budget: Retries one batch may make in total, whatever their cause;
            `None` (the default): no limit, as an outage of a few minutes
            would spend any fixed number.
        backoff_s: Base delay; retry `n` of a file waits up to
            `min(max_backoff_s, backoff_s * 2**n)` seconds (full jitter).
        max_backoff_s: Cap of one delay, so a file is tried again within
            this many seconds of the store coming back.
        timeout_s: Seconds one request may take before it counts as a
            transient failure (a stalled request never hangs training).
        deadline_s: No retry of a file starts later than this many seconds
            after its first attempt; the last one is made at the deadline.
    """

    attempts: int | None = None
    budget: int | None = None
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    timeout_s: float = 60.0
    deadline_s: float = 180.0

    def __post_init__(self) -> None:
        if (
            (self.attempts is not None and self.attempts < 1)
            or (self.budget is not None and self.budget < 0)
            or self.timeout_s <= 0
            or self.deadline_s < 0
            or self.backoff_s < 0
            or self.max_backoff_s < 0
        ):
            raise ValueError(
                "`retries` needs attempts >= 1 (or None), budget >= 0 (or None), timeout_s > 0 "
                f"and non-negative backoff_s, max_backoff_s and deadline_s. Received: {self!r}"
            )

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait before retry number `attempt` (1 for the first retry).

        Args:
            attempt: Which retry this is.
            rng: Source of the jitter.

        Returns:
            A delay drawn uniformly from `[0, min(max_backoff_s, backoff_s * 2**attempt)]`.
        """
        return rng.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** min(attempt, 64)))


def as_policy(retries: RetryPolicy | int | None) -> RetryPolicy:
    """Accepts a policy, a number of attempts, or `None` for the default policy.

    Args:
        retries: A `RetryPolicy`; an int `n`, the default policy with at most
            `n` attempts per file (`1`: no retries); or `None`.

    Returns:
        The `RetryPolicy`.
    """
    if retries is None:
        return RetryPolicy()
    if isinstance(retries, RetryPolicy):
        return retries
    if isinstance(retries, int) and not isinstance(retries, bool):
        return RetryPolicy(attempts=retries)
    raise TypeError(
        f"`retries` must be a RetryPolicy, an int (attempts) or None. Received: {retries!r}"
    )


def _is_configuration(exc: BaseException) -> bool:
    """An unknown host or a failed certificate check, anywhere in the chain."""
    if is_unknown_host(exc):
        return True
    for current in chain(exc):
        if kind_of(current) is Kind.CERTIFICATE or _PERMANENT_TEXT.search(str(current)):
            return True
    return False


def is_transient(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from, is worth retrying.

    Args:
        exc: What a loader raised or returned, translated or not.

    Returns:
        `True` for connection failures, timeouts, truncated bodies, bodies
        failing their checksum and throttling or server errors; `False` for
        missing objects, bad credentials, undecodable images, unknown hosts,
        failed certificate checks and anything not recognised.
    """
    if _is_configuration(exc):
        return False
    for current in chain(exc):
        if isinstance(current, errors.ChecksumMismatchError):
            return True
        if isinstance(current, _PERMANENT):
            return False
        kind = kind_of(current)
        if kind is not None:
            return kind.transient
        if "Generic" in type(current).__name__ and _TRANSIENT_TEXT.search(str(current)):
            return True  # obstore
    return False


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (`Retry-After`), from anywhere in `exc`'s chain.

    Read from a `retry_after_s` attribute (set by remote_keras's obstore
    errors), botocore's `ClientError.response` headers, or a `headers`
    mapping (aiohttp's `ClientResponseError`).

    Args:
        exc: A failed read.

    Returns:
        The delay in seconds, or `None` if the server gave none.
    """
    for current in chain(exc):
        given = getattr(current, "retry_after_s", None)
        if isinstance(given, (int, float)):
            return max(0.0, float(given))
        headers = getattr(current, "headers", None)
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", headers)
        value = _header(headers, "retry-after")
        if value is not None:
            return parse_retry_after(value)
    return None


def _header(headers: Any, name: str) -> str | None:
    """A header's value from a dict or multidict, whatever the case of its name."""
    if not hasattr(headers, "items"):
        return None
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == name:
            return str(value)
    return None


def parse_retry_after(value: str, now: float | None = None) -> float | None:
    """Seconds from a `Retry-After` value: a number of seconds or an HTTP date.

    Args:
        value: The header's value.
        now: For tests: the current time in seconds since the epoch.

    Returns:
        Non-negative seconds, or `None` if the value is neither.
    """
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


class RetryRounds:
    """Decides, round by round, which failed reads of one batch to try again, and waits.

    The caller reads, then asks `again(results)` which to read again (this
    waits the backoff first, never past the deadline), reads those and
    `update`s them, until `again` returns nothing; `finish` then replaces
    what still failed transiently by the error naming the attempts. The
    caller keeps the reading, so no read is called back from here.

    Args:
        paths: What is being read.
        policy: Deadline, attempts, budget, backoff.
        sleep: For tests.
        clock: For tests: monotonic seconds.
        stop: When set, no more retries are made (a wait for one ends at once).

    Attributes:
        retries: Reads made again so far.
    """

    def __init__(
        self,
        paths: Sequence[str],
        policy: RetryPolicy,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        stop: threading.Event | None = None,
    ) -> None:
        self.paths = list(paths)
        self.policy = policy
        self._sleep, self._clock, self._stop = sleep, clock, stop
        self._start = clock()
        self._attempts = [1] * len(self.paths)
        self._budget = policy.budget
        self._rng = random.Random()  # noqa: S311 - jitter only, never influences which data is read
        self._warned = False
        self.retries = 0

    def again(self, results: list[Any]) -> list[int]:
        """The indices to read again, after waiting for them; `[]` when done."""
        policy, stop = self.policy, self._stop
        if self._budget is not None and self._budget <= 0:
            return []
        again = [
            i
            for i, result in enumerate(results)
            if isinstance(result, BaseException)
            and self._attempts[i] < integrity.attempts_allowed(result, policy.attempts)
            and is_transient(result)
        ]
        if self._budget is not None:
            again = again[: self._budget]
        elapsed = self._clock() - self._start
        remaining = policy.deadline_s - elapsed
        if not again or remaining <= 0 or (stop is not None and stop.is_set()):
            return []
        if not self._warned and elapsed >= WARN_AFTER_S:
            self._warned = True
            _warn_slow(self.paths, again, results, elapsed)
        delay = policy.delay(max(self._attempts[i] for i in again), self._rng)
        asked = [retry_after(results[i]) for i in again]
        delay = max([delay, *(a for a in asked if a is not None)])
        if stop is not None:
            if stop.wait(min(remaining, delay)):
                return []
        else:
            self._sleep(min(remaining, delay))
        return again

    def update(self, results: list[Any], again: list[int], fetched: Sequence[Any]) -> None:
        """Puts the results of reading `again` into `results` and counts the attempts."""
        for i, result in zip(again, fetched):
            results[i] = result
            self._attempts[i] += 1
        if self._budget is not None:
            self._budget -= len(again)
        self.retries += len(again)

    def finish(self, results: list[Any]) -> list[Any]:
        """`results` with transient failures replaced by an error naming the attempts."""
        spent = self._clock() - self._start
        return [
            errors.gave_up(path, attempts, result, seconds=spent)
            if isinstance(result, BaseException) and is_transient(result)
            else result
            for path, attempts, result in zip(self.paths, self._attempts, results)
        ]


def fetch_with_retries(
    fetch: Callable[[list[str]], list[Any]],
    paths: Sequence[str],
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    stop: threading.Event | None = None,
) -> tuple[list[Any], int]:
    """Fetches `paths`, retrying transient failures per `policy` (see `RetryRounds`).

    Args:
        fetch: Reads a list of paths; returns one result per path, an
            exception in place of a failed read.
        paths: What to read.
        policy: Deadline, attempts, budget, backoff.
        sleep: For tests.
        clock: For tests: monotonic seconds.
        stop: When set, no more retries are made (a wait for one ends at once);
            what has failed so far is returned as given up.

    A retry waits the backoff of `policy`, or longer where the server asked
    (`Retry-After`), never past the deadline. Files still failing
    `WARN_AFTER_S` seconds after the first attempt are logged once, at
    WARNING, on the `remote_keras` logger.

    Returns:
        `(results, retries)`: the results in order, transient failures that
        could not be recovered replaced by an `ImageLoadError` (a
        `ChecksumMismatchError` for a mismatch) naming the URL, the attempts,
        the seconds spent and the last cause; and the number of retries made.
    """
    rounds = RetryRounds(paths, policy, sleep, clock, stop)
    results = list(fetch(list(paths)))
    while again := rounds.again(results):
        rounds.update(results, again, fetch([paths[i] for i in again]))
    return rounds.finish(results), rounds.retries


def _warn_slow(
    paths: Sequence[str], failing: list[int], results: list[Any], elapsed: float
) -> None:
    """Logs, once per batch, that reads have stalled or failed for `elapsed` seconds."""
    first = failing[0]
    others = f" (and {len(failing) - 1} more file(s))" if len(failing) > 1 else ""
    cause = results[first]
    logger.warning(
        "Reading %s%s has failed for %.1f s and is being retried: %s: %s",
        errors.redact(paths[first]),
        others,
        elapsed,
        type(cause).__name__,
        errors.scrub(str(cause)),
    )
