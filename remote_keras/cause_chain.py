"""Walking an exception's causes: the chain, and whether DNS said a host does not exist.

Shared by `remote_keras.errors` (which names the endpoint at fault) and
`remote_keras.storage.retry` (which never retries an unknown host), below both.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

# A host name that does not exist: getaddrinfo's EAI_NONAME / EAI_NODATA in the words of
# glibc, macOS, Windows, Rust and Go. "Temporary failure in name resolution" (EAI_AGAIN)
# is not among them: it is retried.
_UNKNOWN_HOST_TEXT = re.compile(
    r"Name or service not known|nodename nor servname provided|No address associated with"
    r" hostname|getaddrinfo failed|no such host|did not resolve",
    re.IGNORECASE,
)
_UNKNOWN_HOST_ERRNOS = frozenset(
    getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name)
)


def chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and the exceptions it was raised from (and urllib3's `reason`), outermost first."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for linked in (getattr(current, "reason", None), current.__cause__, current.__context__):
            if isinstance(linked, BaseException):
                pending.append(linked)


def is_unknown_host(exc: BaseException) -> bool:
    """Whether DNS said that the host name in `exc`'s chain does not exist."""
    for current in chain(exc):
        if isinstance(current, socket.gaierror) and current.errno in _UNKNOWN_HOST_ERRNOS:
            return True
        if _UNKNOWN_HOST_TEXT.search(str(current)):
            return True
    return False
