"""obstore's failures cut to one line naming the URL, as the builtin families fsspec's loader uses.

The types are those `errors.translate` gives the fsspec loader's failures:
`FileNotFoundError`, `PermissionError`, `ConnectionError`, `TimeoutError`, and
`ImageLoadError` for the rest, so that `except` clauses and `type(error)`
do not depend on the loader. Each carries `status` (the HTTP status, if one
came back), `detail` (the first line of obstore's message, for debugging)
and, when the server asked to wait, `retry_after_s`.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from remote_keras import errors
from remote_keras.client_errors import Kind, kind_of
from remote_keras.storage import retry

_STATUS = re.compile(r"status(?: code)?: (\d{3})\b")
_RETRY_AFTER = re.compile(r"retry-after\W{1,4}(\d{1,6})\b", re.IGNORECASE)
_S3_CODE = re.compile(r"<Code>([^<]{1,80})</Code>")
_S3_MESSAGE = re.compile(r"<Message>([^<]{1,160})</Message>")
_REQUEST_URL = re.compile(r"Error performing \w+ (\S+)")
_CONNECT_ADDRESS = re.compile(r'ConnectError\(\s*"[^"]*",\s*([^\s,()]+),')
_ELAPSED = re.compile(r" in (\d+(?:\.\d+)?)(ns|µs|us|ms|s)\b")
_UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_TLS = re.compile(r"certificate|tls handshake", re.IGNORECASE)
_DNS = re.compile(
    r"dns error|failed to lookup address|name or service not known|nodename nor servname",
    re.IGNORECASE,
)
_RESOLVER_SAYS = re.compile(r"failed to lookup address information: ([^\"\n)]{1,80})")
_REFUSED = re.compile(r"ConnectionRefused|connection refused", re.IGNORECASE)
_TIMED_OUT = re.compile(r"TimedOut|timed out|kind: Timeout\b", re.IGNORECASE)
_CONNECT = re.compile(r"kind: Connect\b|tcp connect error")
_DROPPED = re.compile(
    r"connection (?:reset|closed|aborted)|ConnectionReset|body error|IncompleteMessage"
    r"|unexpected (?:end|eof)|broken pipe|error sending request",
    re.IGNORECASE,
)


def one_line_error(url: str, exc: BaseException) -> OSError:
    """Cuts an obstore exception to one line naming `url`, in the family it belongs to.

    obstore's messages hold a many-line Rust debug dump; only a few facts of it
    are kept: the HTTP status and S3 error code, or the kind of network
    failure and the server's address. The result has a short builtin
    exception as its cause where `errors.gave_up` reports one (transient
    failures), and none otherwise, so that the dump is never printed.

    Args:
        url: The URL being read.
        exc: What obstore raised.

    Returns:
        A `FileNotFoundError`, `PermissionError`, `ConnectionError`,
        `TimeoutError` or `ImageLoadError`, with `status` and `detail` attributes.
    """
    shown = errors.redact(url)
    text = str(exc)
    kind = type(exc).__name__
    found = _STATUS.search(text)
    status = int(found.group(1)) if found else None
    code = _S3_CODE.search(text)
    http = " ".join(filter(None, [f"HTTP {status}" if status else "", code and code.group(1)]))
    where = _address(text)
    cause: BaseException | None = None
    error: OSError | None = None
    meaning = kind_of(exc, status)  # by obstore's type, else the status its message gives
    if meaning is Kind.NOT_FOUND:
        error = FileNotFoundError(f"No such file or object: {shown!r} ({http or 'not found'})")
        status = status or 404
    elif meaning is Kind.DENIED:
        reason = http or "credentials refused"
        error = PermissionError(f"Access denied to {shown!r} ({reason}); check the credentials")
    elif status is not None:
        message = _S3_MESSAGE.search(text)
        permanent = not (meaning and meaning.transient)
        reason = f"{http}: {message.group(1)}" if message and permanent else http
        what = {408: "Request timeout for", 429: "Too many requests for"}.get(
            status, "Server error for" if status >= 500 else "Could not read"
        )
        error = errors.ImageLoadError(shown, f"{what} {shown!r} ({reason})")
        cause = None if permanent else OSError(reason)
    elif _TLS.search(text):
        error = errors.ImageLoadError(shown, f"TLS certificate of {where} rejected for {shown!r}")
    elif _DNS.search(text):  # the resolver's words tell an unknown host from a flaky lookup
        found = _RESOLVER_SAYS.search(text)
        said = f": {found.group(1).strip()}" if found else ""
        host = where.rsplit(":", 1)[0]
        if retry.is_unknown_host(exc):
            cause = ConnectionError(f"host name {host!r} did not resolve{said}")
        else:
            cause = ConnectionError(f"DNS lookup of {host} failed{said}")
    elif _REFUSED.search(text):
        cause = ConnectionRefusedError(f"connection refused: {where}")
    elif _TIMED_OUT.search(text):
        found = _ELAPSED.search(text)
        within = f" within {float(found.group(1)) * _UNITS[found.group(2)]:.1f} s" if found else ""
        cause = TimeoutError(f"no complete answer from {where}{within}")
        error = TimeoutError(f"Timed out reading {shown!r} ({cause})")
    elif _CONNECT.search(text):
        cause = ConnectionError(f"cannot connect to {where}")
    elif _DROPPED.search(text) or retry.is_transient(exc):
        if "body error" in text:  # obstore does not say where from
            phrase = "the response body was cut short"
        else:
            phrase = f"{first_line(exc).rsplit(': ', 1)[-1][:80]} to {where}"
        cause = ConnectionResetError(phrase)
        error = ConnectionError(f"Connection lost reading {shown!r} ({cause})")
    else:
        reason = f"{kind}: {first_line(exc)}"
        error = errors.ImageLoadError(shown, f"Could not read {shown!r} ({reason})")
    if error is None:
        error = ConnectionError(f"Cannot reach the server for {shown!r} ({cause})")
    error.__cause__ = cause
    error.url = shown  # type: ignore[attr-defined]
    error.status = status  # type: ignore[attr-defined]
    error.detail = errors.scrub(first_line(exc))  # type: ignore[attr-defined]
    after = _RETRY_AFTER.search(text)
    if after:
        error.retry_after_s = float(after.group(1))  # type: ignore[attr-defined]
    return error


def _address(text: str) -> str:
    """The `host:port` obstore was talking to, without user info."""
    found = _REQUEST_URL.search(text)
    if found:
        netloc = urlsplit(found.group(1)).netloc.rsplit("@", 1)[-1]
        if netloc:
            return netloc
    found = _CONNECT_ADDRESS.search(text)
    return found.group(1) if found else "the server"


def first_line(exc: BaseException, limit: int = 200) -> str:
    """obstore's message without its debug dump: the first line, at most `limit` characters."""
    text = str(exc).split("\n\nDebug source:", 1)[0].strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
