"""Reads that keep the checksum the store sent with the body, with the one GET a read makes.

Each read returns `Fetched(data, checksum)`: the body, and the whole-object
checksum found in the same response (`remote_keras.storage.integrity`), or `None`.
Nothing here hashes: the caller (`remote_keras.pipeline.fetching.Fetcher`) checks the
body on its own thread, never on fsspec's event loop, which every async
filesystem of the process shares.

fsspec filesystems are read through a registry of `CheckedReader`s, one module
per backend, each naming the client internals it needs (`checked_s3`: s3fs's
`get_object`; `checked_gcs`: gcsfs's GET; `checked_azure`: adlfs's
`download_blob`; `checked_http`: fsspec's HTTP GET). The first read of a
filesystem class checks that it has them; if a client release dropped one,
its reads go through `cat_file` and are counted unverified, with one warning
naming the client's version. `register_checked_reader` adds a backend of one's
own (it is asked before the built-in ones). Filesystems of no registered
protocol are read with `cat_file`, with no checksum.

obstore (`read_obstore`) keeps the ETag of S3 reads (GCS and Azure ETags are
not MD5s); lakeFS reads keep theirs in `storage.lakefs` and `storage.lakefs.presign`.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from remote_keras.storage import integrity
from remote_keras.storage.loaders import checked_azure, checked_gcs, checked_http, checked_s3
from remote_keras.storage.loaders.fetched import CheckedReader, Fetched

__all__ = [
    "CheckedReader",
    "Fetched",
    "read_async",
    "read_batch",
    "read_one",
    "register_checked_reader",
]

S3_PROTOCOLS = ("s3", "s3a")

_READERS: list[CheckedReader] = [
    checked_s3.READER,
    checked_gcs.READER,
    checked_azure.READER,
    checked_http.READER,
]
_USABLE: dict[tuple[int, type], bool] = {}  # (reader, filesystem class) -> has what it needs
_LOCK = threading.Lock()


def register_checked_reader(reader: CheckedReader) -> None:
    """Reads `reader.protocols` with `reader`, before any reader registered earlier.

    Args:
        reader: The backend's checked read (see `CheckedReader`).
    """
    with _LOCK:
        _READERS.insert(0, reader)


def _protocols(fs: Any) -> set[str]:
    protocol = fs.protocol
    return set(protocol if isinstance(protocol, (tuple, list)) else (protocol,))


def reader_for(fs: Any) -> CheckedReader | None:
    """The registered reader of `fs`'s protocol, if `fs` has what it needs; else `None`.

    The first time a filesystem class lacks an attribute its reader needs,
    warns once, naming the client and its version.
    """
    protocols = _protocols(fs)
    with _LOCK:
        reader = next((r for r in _READERS if protocols & set(r.protocols)), None)
        if reader is None:
            return None
        key = (id(reader), type(fs))
        if key in _USABLE:
            return reader if _USABLE[key] else None
        missing = [name for name in reader.needs if not hasattr(fs, name)]
        _USABLE[key] = not missing
    if not missing:
        return reader
    warnings.warn(
        f"{type(fs).__name__} ({reader.client} {_version(reader.client)}) has no "
        f"{', '.join(missing)}, which remote_keras's checked reads of "
        f"{'/'.join(reader.protocols)} use: its reads are not verified against the store's "
        "checksum (counted `unverified` in the stats) until remote_keras supports this release.",
        stacklevel=2,
    )
    return None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "(version unknown)"


async def read_async(fs: Any, path: str) -> Fetched:
    """Reads `path` (as `fs` names it) on `fs`'s event loop, with the response's checksum.

    Raises:
        OSError: what the filesystem's `cat_file` raises for the same read
            (`FileNotFoundError`, `PermissionError`, the client's own errors).
    """
    reader = reader_for(fs)
    if reader is None:
        return Fetched(await fs._cat_file(path), None)
    return await reader.read(fs, path)


def read_batch(fs: Any, paths: Sequence[str]) -> list[Fetched | BaseException]:
    """Reads `paths` of the async filesystem `fs` concurrently, all in flight together.

    Returns:
        One entry per path, in order: `Fetched`, or the exception its read raised.
    """
    import fsspec.asyn

    async def gather() -> list[Fetched | BaseException]:
        return await asyncio.gather(*(read_async(fs, p) for p in paths), return_exceptions=True)

    return fsspec.asyn.sync(fs.loop, gather)


def read_one(fs: Any, path: str) -> Fetched:
    """`read_async` from a thread outside the event loop."""
    import fsspec.asyn

    return fsspec.asyn.sync(fs.loop, read_async, fs, path)


def read_obstore(store: Any, key: str, protocol: str) -> Fetched:
    """Reads `key` of an obstore store with one GET, keeping an S3 ETag as the checksum.

    Raises:
        Exception: obstore's own errors, untranslated (the caller translates them).
    """
    import obstore

    result = obstore.get(store, key)
    data = result.bytes().to_bytes()
    etag = result.meta.get("e_tag") if protocol in S3_PROTOCOLS else None
    return Fetched(data, integrity.from_etag(etag))
