"""Every exception remote_keras raises, and the one place storage errors are translated.

Every error names the URL (or dataframe row) at fault and never a secret, and
every one pickles (so it crosses Keras's worker processes). Every loader raises
the same types, with a `url` attribute; no message, cause or log record shows
a URL's user info or secret query values (`scrub`). Callers catch the builtin
families they already know:

```text
OSError
├── FileNotFoundError        missing object, prefix, bucket or `directory`
├── PermissionError          bad or missing credentials
├── ConnectionError          the server cannot be reached, or the connection was lost
├── TimeoutError             no complete answer within `RetryPolicy.timeout_s`
├── StoreResponseError       a store's error status to a presigned lakeFS read (retried)
└── ImageLoadError           any other failure to read bytes (or retries given up)
    └── ChecksumMismatchError  bytes that do not match the store's checksum (`integrity`)
ValueError
├── ImageDecodeError         bytes that are not a decodable image
└── InvalidRowsError         dataframe rows with NaN, empty or non-string paths
ImportError
└── MissingBackendError      an extra not installed: a URL's fsspec backend, grain, TensorFlow
RuntimeError
└── WorkerDiedError          a Keras worker process killed while `fit` waited for it
```

Secrets are masked by `remote_keras.redaction` (`redact`, `scrub` and
`sanitize`, re-exported here).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from remote_keras import cause_chain, client_logs
from remote_keras.client_errors import Kind, kind_of
from remote_keras.redaction import redact, sanitize, scrub

__all__ = [
    "ChecksumMismatchError",
    "ImageDecodeError",
    "ImageLoadError",
    "InvalidRowsError",
    "MissingBackendError",
    "StoreResponseError",
    "WorkerDiedError",
    "gave_up",
    "missing_backend",
    "protocol_of",
    "reading",
    "redact",
    "sanitize",
    "scrub",
    "translate",
]

# Protocol -> (the extra of remote-keras that installs its clients, those clients' packages).
EXTRAS_BY_PROTOCOL = {
    "s3": ("s3", "s3fs and obstore"),
    "s3a": ("s3", "s3fs and obstore"),
    "gs": ("gcs", "gcsfs and obstore"),
    "gcs": ("gcs", "gcsfs and obstore"),
    "az": ("azure", "adlfs and obstore"),
    "abfs": ("azure", "adlfs and obstore"),
    "abfss": ("azure", "adlfs and obstore"),
    "adl": ("azure", "adlfs and obstore"),
    "http": ("http", "aiohttp and requests"),
    "https": ("http", "aiohttp and requests"),
    "lakefs": ("lakefs", "lakefs-spec"),
}

# Protocol family -> where credentials can be given, for errors about missing ones.
_CREDENTIAL_HINTS = {
    "s3": "storage_options={'key': ..., 'secret': ...} (or 'anon': True for a public bucket), "
    "or the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY environment variables",
    "gs": "storage_options={'token': <path to a service account JSON>}, or the "
    "GOOGLE_APPLICATION_CREDENTIALS environment variable",
    "az": "storage_options={'account_name': ..., 'account_key': ...}, or the "
    "AZURE_STORAGE_CONNECTION_STRING environment variable",
    "lakefs": "storage_options={'host': ..., 'username': <access key id>, 'password': <secret>}, "
    "the LAKECTL_SERVER_ENDPOINT_URL, LAKECTL_CREDENTIALS_ACCESS_KEY_ID and "
    "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY environment variables, or ~/.lakectl.yaml",
}
_FAMILIES = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az", "adl": "az"}


class _NamesUrl:
    """Pickles as `type(url, message)` plus attributes, so errors cross process boundaries.

    Exceptions pickle their `args` by default, which here hold only the
    message: unpickling would then fail, and Keras's multiprocessing result
    thread with it.
    """

    url: str

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.url, str(self)), dict(self.__dict__))


class ImageLoadError(_NamesUrl, OSError):
    """Reading an image's bytes failed for a reason other than absence or permission.

    Attributes:
        url: The path or URL that could not be read (credentials redacted).
    """

    attempts: int  # set on the error `gave_up` builds
    seconds: float | None

    def __init__(self, url: str, message: str) -> None:
        super().__init__(scrub(message))
        self.url = redact(url)


class ImageDecodeError(_NamesUrl, ValueError):
    """The bytes read from `url` are not an image Pillow can decode.

    Attributes:
        url: The path or URL whose content is corrupt, truncated or not an image.
    """

    def __init__(self, url: str, message: str) -> None:
        super().__init__(scrub(message))
        self.url = redact(url)


class ChecksumMismatchError(ImageLoadError):
    """The bytes read from `url` do not match the checksum the store sent with them.

    Raised (or the sample skipped, with `on_error="skip"`) once retries of
    the read are spent; an `ImageLoadError`, so an `OSError`.

    Attributes:
        url: What was read (credentials redacted).
        algorithm: The checksum's algorithm (`"md5"`, `"crc32c"`, ...).
        expected: The store's checksum, hex.
        got: The checksum of the bytes received, hex.
        source: Where the expected checksum came from (`"ETag"`, `"x-goog-hash"`, ...).
        attempts: Reads made, once retries were spent (else 1).
        seconds: Seconds from the first read to giving up, once retries were spent.
    """

    algorithm: str = ""
    expected: str = ""
    got: str = ""
    source: str = ""
    attempts: int = 1
    seconds: float | None = None


def gave_up(
    url: str, attempts: int, cause: BaseException, seconds: float | None = None
) -> ImageLoadError:
    """The error raised when retries of a transient failure are exhausted.

    Args:
        url: What could not be read.
        attempts: Requests made for it.
        cause: The last failure.
        seconds: Time spent since the first attempt, when known.

    Returns:
        An `ImageLoadError` (a `ChecksumMismatchError` when the last read's
        body failed its checksum) with `attempts` and `seconds` attributes.
    """
    spent = f" over {seconds:.1f} s" if seconds is not None else ""
    if isinstance(cause, ChecksumMismatchError):
        error: ImageLoadError = ChecksumMismatchError(
            cause.url, f"Gave up reading {cause.url!r} after {attempts} attempt(s){spent}: {cause}"
        )
        error.__dict__.update(cause.__dict__)
        error.attempts, error.seconds = attempts, seconds
        return error
    shown = redact(url)
    last = cause.__cause__ if isinstance(cause, ImageLoadError) and cause.__cause__ else cause
    error = ImageLoadError(
        shown,
        f"Gave up reading {shown!r} after {attempts} attempt(s){spent}; last error: "
        f"{type(last).__name__}: {last}",
    )
    error.attempts = attempts
    error.seconds = seconds
    error.__cause__ = sanitize(cause)
    return error


class StoreResponseError(OSError):
    """The object store answered a presigned GET with an error status.

    Attributes:
        status: The HTTP status (retried when transient: 408, 429, 5xx).
    """

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message, status)
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0])


class WorkerDiedError(RuntimeError):
    """A Keras worker process died (killed by a signal) while `fit` waited for its batch."""


class MissingBackendError(ImportError):
    """An optional package is not installed: the message names the extra that installs it.

    The fsspec backend of a URL's protocol, grain (`format="grain"`), or
    TensorFlow (`format="tf"`, `to_tf_dataset()`, Keras 2, Keras's TensorFlow
    backend).
    """


class InvalidRowsError(ValueError, TypeError):
    """Dataframe rows whose path is missing, empty or not a string.

    A `TypeError` too, which is what Keras raises for non-string paths.

    Attributes:
        rows: The index labels of the offending rows.
    """

    def __init__(self, message: str, rows: list) -> None:
        super().__init__(message)
        self.rows = rows

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.rows), dict(self.__dict__))


_BUILTIN_FAMILIES = (FileNotFoundError, PermissionError, ConnectionError, TimeoutError)


def protocol_of(url: str) -> str:
    """Returns the protocol of the innermost filesystem of `url` (`file` if local)."""
    last = url.rsplit("::", 1)[-1]
    return last.split("://", 1)[0] if "://" in last else "file"


def missing_backend(url: str, cause: ImportError) -> MissingBackendError:
    """Builds the error for a URL whose backend is not installed."""
    protocol = url.split("::")[-1].split("://", 1)[0] if "://" in url else "file"
    if protocol in EXTRAS_BY_PROTOCOL:
        extra, packages = EXTRAS_BY_PROTOCOL[protocol]
        hint = f'pip install ".[{extra}]" in a clone of remote_keras, which installs {packages}'
    else:
        hint = "install the fsspec implementation for this protocol"
    return MissingBackendError(
        f"Cannot read {redact(url)!r}: the {protocol!r} backend is not installed "
        f"({cause}). Fix: {hint}"
    )


def translate(url: str, exc: BaseException) -> BaseException:
    """Maps an exception from a loader or filesystem to remote_keras's families.

    Args:
        url: The path or URL being read.
        exc: What the loader or filesystem raised.

    Returns:
        An exception naming `url`, with `exc` as its cause. Exceptions that
        already name the URL (our own types) are returned unchanged.
    """
    if isinstance(exc, (ImageLoadError, ImageDecodeError, MissingBackendError)):
        return exc
    shown = redact(url)
    if isinstance(exc, _BUILTIN_FAMILIES) and shown in str(exc):
        return sanitize(exc)  # translated already, e.g. by a loader that calls `reading()`
    cause = scrub(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    kind = kind_of(exc)
    if kind is Kind.NOT_FOUND:
        new: BaseException = FileNotFoundError(f"No such file or object: {shown!r} ({cause})")
    elif kind is Kind.NO_CREDENTIALS:
        family = _FAMILIES.get(protocol_of(url), protocol_of(url))
        where = _CREDENTIAL_HINTS.get(family, "storage_options")
        new = PermissionError(f"No credentials found for {shown!r} ({cause}); give them in {where}")
    elif kind is Kind.DENIED:
        new = PermissionError(f"Access denied to {shown!r} ({cause}); check the credentials")
    elif kind is Kind.TIMED_OUT:
        new = TimeoutError(f"Timed out reading {shown!r} ({cause})")
    elif kind is Kind.DROPPED:
        new = ConnectionError(f"Connection lost reading {shown!r} ({cause})")
    elif kind is Kind.UNREACHABLE:
        new = ConnectionError(f"Cannot reach the server for {shown!r}{_where(exc)} ({cause})")
    elif isinstance(exc, ImportError):
        new = missing_backend(url, exc)
    elif isinstance(exc, ValueError) and "Protocol not known" in str(exc):
        new = ValueError(
            f"Unknown protocol in {shown!r} ({exc}): fsspec has no filesystem for it. Pass "
            "`loader=` a callable that reads such URLs, or install its fsspec implementation."
        )
    else:
        new = ImageLoadError(shown, f"Could not read {shown!r}: {cause}")
    new.__cause__ = sanitize(exc)
    if not isinstance(new, (ImageLoadError, ImportError)):
        new.url = shown  # type: ignore[attr-defined]
    return new


def _where(exc: BaseException) -> str:
    """`" at <endpoint>"`, and whether its host name did not resolve, from a connection error."""
    found = None
    for link in cause_chain.chain(exc):
        found = _ENDPOINT_IN_TEXT.search(str(link))
        if found:
            break
    if found is None:
        return ""
    endpoint = redact(found.group(0))
    if cause_chain.is_unknown_host(exc):
        host = urlsplit(endpoint).hostname
        return f" at {endpoint}: host name {host!r} did not resolve"
    return f" at {endpoint}"


_ENDPOINT_IN_TEXT = re.compile(r"\b(?:https?|wss?)://[^/\s'\"<>?#]+")


@contextmanager
def reading(url: str) -> Iterator[None]:
    """Context manager that re-raises storage errors for `url` translated.

    The client's own log of an error it raises inside goes to DEBUG (`client_logs`):
    this error reports it.
    """
    try:
        with client_logs.own_calls():
            yield
    except Exception as exc:
        new = translate(url, exc)
        if new is exc:
            raise
        raise new from new.__cause__
