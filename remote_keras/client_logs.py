"""Storage clients' logs of the errors they raise to remote_keras: DEBUG, not stderr.

gcsfs logs every request that ran out of its retries, or failed in a way it does not
retry, with `logger.exception` on its `gcsfs` logger (ERROR, with the traceback), then
raises the same exception. Where logging is not configured, Python's last-resort handler
prints each such record to stderr: once a GCS server stops, a traceback per request in
flight and per retry of `RetryPolicy` (hundreds within its deadline), on top of the one
error remote_keras raises, which already names the URL and the cause.

While remote_keras makes the call itself (`own_calls()`: inside `errors.reading`, and
around a loader's batch reads), such a record is a second report of an exception that
remote_keras reports, so it is logged at DEBUG instead, with its traceback: dropped
unless DEBUG is enabled for the client's logger. This is a filter on that logger only,
which decides by the record's origin (the client's retry loop), not its text. The user's
own calls with the same clients are left alone, and remote_keras adds no handler and
changes no level: configured logging shows what it showed, at DEBUG for these records.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Iterator

# (logger, function) of log-and-raise records: each logs an exception that its caller raises.
LOG_AND_RAISE = frozenset({("gcsfs", "retry_request")})

_OWN_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "remote_keras_own_call", default=False
)
_installed: set[str] = set()
_lock = threading.Lock()


class _DemoteReraised(logging.Filter):
    """Logs a client's log-and-raise record at DEBUG while remote_keras makes the call."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info is None or not _OWN_CALL.get():
            return True
        if (record.name, record.funcName) not in LOG_AND_RAISE:
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True


_FILTER = _DemoteReraised()


def install() -> None:
    """Adds the filter to each client logger of `LOG_AND_RAISE` once (it is inert elsewhere)."""
    if len(_installed) == len(LOG_AND_RAISE):
        return
    with _lock:
        for name, _ in LOG_AND_RAISE:
            if name not in _installed:
                logging.getLogger(name).addFilter(_FILTER)
                _installed.add(name)


@contextlib.contextmanager
def own_calls() -> Iterator[None]:
    """Marks the calls made inside (and the client tasks they start) as remote_keras's own.

    The mark is a context variable, which fsspec's event loop inherits with each
    coroutine it runs for the calling thread.
    """
    install()
    token = _OWN_CALL.set(True)
    try:
        yield
    finally:
        try:
            _OWN_CALL.reset(token)
        except ValueError:  # left in another context (a generator resumed elsewhere)
            _OWN_CALL.set(False)
