"""`Fetched` (a body and the checksum its response carried) and `CheckedReader`, a backend's read.

Kept apart from the registry (`checked_reads`) so that each backend's module
(`checked_s3`, `checked_gcs`, `checked_azure`, `checked_http`) and a user's own
can name them without importing the registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from remote_keras.storage.integrity import Checksum


class Fetched(NamedTuple):
    """A body and the checksum the store sent with it (`None` if none, or not exposed)."""

    data: bytes
    checksum: Checksum | None


@dataclasses.dataclass(frozen=True)
class CheckedReader:
    """How one backend's async fsspec filesystem reads a body with its checksum, in one GET.

    Attributes:
        protocols: The filesystem protocols it serves (`("s3", "s3a")`).
        client: The package whose filesystem it reads through (`"s3fs"`), named
            with its version when the filesystem lacks what `needs` lists.
        needs: The filesystem's attributes `read` uses, private ones included;
            checked the first time a filesystem class is read, so that a client
            release that renames one leaves reads unverified (with one warning)
            instead of failing them.
        read: `async read(fs, path) -> Fetched`, raising what the filesystem's
            `cat_file` raises for the same read.
    """

    protocols: tuple[str, ...]
    client: str
    needs: tuple[str, ...]
    read: Callable[[Any, str], Awaitable[Fetched]]
