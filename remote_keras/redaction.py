"""Secrets kept out of what remote_keras shows: URLs, messages, exception chains and logs.

`redact` masks a URL's user info and secret-looking query values, `scrub` the
same inside free text, and `sanitize` an exception's whole chain; a filter on
the `remote_keras` logger scrubs every record. `remote_keras.errors` uses them
for every error it builds (and re-exports them).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit, urlunsplit

_HIDDEN_NAMES = (
    r"[\w.-]*(?:signature|token|credential|secret|password|passwd)[\w.-]*"
    r"|sig|key|apikey|[\w.-]*[_-]key"
)
_SECRET_QUERY_KEYS = re.compile(_HIDDEN_NAMES, re.IGNORECASE)
# In free text (clients' messages): a URL's user info, and secret-looking query values.
_USERINFO_IN_TEXT = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"<>]+@")
_SECRET_PARAM_IN_TEXT = re.compile(
    rf"(?P<key>[?&;](?:{_HIDDEN_NAMES})=)[^&\s'\"<>#]+", re.IGNORECASE
)
# Attributes a stand-in for a redacted client exception keeps: what `retry` classifies by.
_KEPT_ATTRIBUTES = ("status", "status_code", "response", "retry_after_s")


def scrub(text: str) -> str:
    """Returns `text` with every URL's user info and secret-looking query values masked.

    Args:
        text: Any message, e.g. a client exception's text, that may quote URLs.

    Returns:
        The text with `user:password@` and values such as `X-Amz-Signature=...`,
        `sig=...` or `token=...` replaced by `***`.
    """
    text = _USERINFO_IN_TEXT.sub(r"\g<scheme>***@", text)
    return _SECRET_PARAM_IN_TEXT.sub(r"\g<key>***", text)


def sanitize(exc: BaseException) -> BaseException:
    """Masks secrets in `exc`'s chain (causes and contexts), in place where it can.

    Messages held in `args` (and `OSError`'s `strerror` and `filename`) are
    scrubbed in place. A link whose text still shows a secret (a client with
    its own `__str__`) is replaced by a builtin exception of its nearest
    builtin base holding the scrubbed text (and its `status`), or, as a
    context, dropped.

    Args:
        exc: An exception about to reach the user.

    Returns:
        `exc`, or its stand-in if `exc` itself could not be scrubbed in place.
    """
    return _sanitized(exc, set())


def _sanitized(exc: BaseException, seen: set[int]) -> BaseException:
    if id(exc) in seen:
        return exc
    seen.add(id(exc))
    text = str(exc)
    if scrub(text) != text:
        _scrub_in_place(exc)
    if exc.__cause__ is not None:
        exc.__cause__ = _sanitized(exc.__cause__, seen)
    context = exc.__context__
    if context is not None:
        clean = _sanitized(context, seen)
        exc.__context__ = clean if clean is context else None
    text = str(exc)
    if scrub(text) == text:
        return exc
    base = next(c for c in type(exc).__mro__ if c.__module__ == "builtins")
    message = scrub(text) if base is type(exc) else f"{type(exc).__name__}: {scrub(text)}"
    try:
        stand_in = base(message)
    except Exception:  # a builtin whose constructor wants more than a message
        stand_in = Exception(message)
    for name in _KEPT_ATTRIBUTES:
        if hasattr(exc, name):
            setattr(stand_in, name, getattr(exc, name))
    stand_in.__cause__ = exc.__cause__
    stand_in.__suppress_context__ = True
    return stand_in


def _scrub_in_place(exc: BaseException) -> None:
    try:
        exc.args = tuple(scrub(a) if isinstance(a, str) else a for a in exc.args)
        if isinstance(exc, OSError):
            for name in ("strerror", "filename", "filename2"):
                value = getattr(exc, name, None)
                if isinstance(value, str):
                    setattr(exc, name, scrub(value))
    except (AttributeError, TypeError):  # read-only attributes: the stand-in covers them
        pass


class _ScrubbingFilter(logging.Filter):
    """Masks secrets in the records remote_keras logs (see `scrub`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return True


logger = logging.getLogger("remote_keras")
if not any(isinstance(f, _ScrubbingFilter) for f in logger.filters):
    logger.addFilter(_ScrubbingFilter())


def redact(url: str) -> str:
    """Returns `url` without user info or secret-looking query values."""
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        query = "&".join(
            f"{k}=***" if _SECRET_QUERY_KEYS.fullmatch(k) else f"{k}={v}" if sep else k
            for k, sep, v in (item.partition("=") for item in query.split("&"))
        )
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
