"""The one table from storage clients' errors to what they mean.

Every loader, lister and writer reads through a client (s3fs/botocore,
aiohttp, urllib3, requests, obstore, gcsfs, adlfs, lakefs-sdk) whose errors
are its own types. `kind_of` finds the first row of `TABLE` that an error
matches, by type (its class or any base class, named `package.Class` so that
no client is imported to check) or else by the HTTP status it carries.
`remote_keras.errors.translate` turns the kind into the public exception,
`remote_keras.storage.retry.is_transient` into "retry or not", and the obstore
loader, whose network failures are all one `GenericError`, reads the status
from the message and asks the same table.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class Kind(enum.Enum):
    """What a failed request means, whatever client raised it."""

    NOT_FOUND = "not found"
    NO_CREDENTIALS = "no credentials"
    DENIED = "access denied"
    CERTIFICATE = "certificate rejected"
    TIMED_OUT = "timed out"
    DROPPED = "connection lost"
    UNREACHABLE = "server unreachable"
    SERVER_BUSY = "server busy or failing"

    @property
    def transient(self) -> bool:
        """Whether trying again may help."""
        return self in (Kind.TIMED_OUT, Kind.DROPPED, Kind.UNREACHABLE, Kind.SERVER_BUSY)


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table: the types and statuses that mean `kind`."""

    kind: Kind
    types: frozenset[str]
    statuses: frozenset[int] = frozenset()


def _row(kind: Kind, types: str, statuses: tuple[int, ...] = ()) -> Row:
    return Row(kind, frozenset(types.split()), frozenset(statuses))


# Statuses of throttling and server trouble (retried).
SERVER_BUSY_STATUS = frozenset({408, 429, 500, 502, 503, 504})

# First match wins: a missing object outranks the connection error it arrived in.
TABLE: tuple[Row, ...] = (
    _row(Kind.NOT_FOUND, "builtins.FileNotFoundError obstore.NotFoundError", (404, 410)),
    _row(
        Kind.NO_CREDENTIALS,
        "botocore.NoCredentialsError botocore.PartialCredentialsError lakefs.NoAuthenticationFound",
    ),
    _row(
        Kind.DENIED,
        "builtins.PermissionError obstore.PermissionDeniedError obstore.UnauthenticatedError",
        (401, 403),
    ),
    _row(Kind.CERTIFICATE, "ssl.SSLCertVerificationError aiohttp.ClientConnectorCertificateError"),
    _row(
        Kind.TIMED_OUT,
        "builtins.TimeoutError urllib3.ReadTimeoutError botocore.ReadTimeoutError"
        " requests.ReadTimeout aiohttp.ServerTimeoutError",
    ),
    _row(
        Kind.DROPPED,
        "botocore.ConnectionClosedError botocore.ResponseStreamingError"
        " aiohttp.ServerDisconnectedError aiohttp.ClientPayloadError aiohttp.ContentLengthError"
        " http.IncompleteRead urllib3.IncompleteRead urllib3.ProtocolError",
    ),
    _row(
        Kind.UNREACHABLE,
        "builtins.ConnectionError urllib3.MaxRetryError urllib3.NewConnectionError"
        " urllib3.ConnectTimeoutError botocore.EndpointConnectionError"
        " botocore.ConnectTimeoutError aiohttp.ClientOSError requests.ConnectTimeout",
    ),
    _row(Kind.SERVER_BUSY, "", tuple(sorted(SERVER_BUSY_STATUS))),
)

# S3's error codes for throttling and server trouble (botocore's `ClientError.response`).
S3_BUSY_CODES = frozenset(
    {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling",
     "TooManyRequests"}
)  # fmt: skip


def type_names(exc: BaseException) -> set[str]:
    """`package.Class` of `exc`'s class and of each of its base classes."""
    return {f"{cls.__module__.split('.')[0]}.{cls.__name__}" for cls in type(exc).__mro__}


def status_of(exc: BaseException) -> int | None:
    """The HTTP status `exc` carries (`status`, `status_code`, botocore's response), if any."""
    status: Any = getattr(exc, "status", None) or getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    if status is None and isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def kind_of(exc: BaseException, status: int | None = None) -> Kind | None:
    """What `exc` means, by its type, else by its HTTP status; `None` if the table has no row.

    Args:
        exc: What a client raised (only `exc` itself, not its causes).
        status: The HTTP status, where the caller read it from elsewhere
            (obstore's message); otherwise taken from `exc`.

    Returns:
        The `Kind` of the first matching row of `TABLE`.
    """
    names = type_names(exc)
    status = status if status is not None else status_of(exc)
    response = getattr(exc, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    for row in TABLE:
        if names & row.types or status in row.statuses:
            return row.kind
        if row.kind is Kind.SERVER_BUSY and code in S3_BUSY_CODES:
            return row.kind
    return None
