"""Listings reused instead of made again: by the subsets of one generator, and from disk.

Two caches, both keyed by the URL listed (lakeFS refs pinned to their
commit) and the storage options:

- **Shared by subsets, in memory.** `flow_from_directory(url,
  subset="training")` and `flow_from_directory(url, subset="validation")`
  on one generator list `url` once: a listing made for a `subset` is kept on
  the generator (weakly: it goes with the generator) for `SHARE_S` seconds
  and handed to one later call for each other subset. The same subset
  again, or a call without `subset`, lists anew, so new data is seen; once
  every subset has used a listing it is dropped. `flow_from_dataframe`
  shares its file checks (`validate_filenames=True`) the same way.
- **On disk, where data cannot change.** A listing of a lakeFS commit never
  changes, so it is written to disk and read back by any later run, process
  or worker on the machine that lists the same commit and folder: it then
  starts without a listing request. Listings of mutable stores (S3, GCS,
  Azure, ...) are cached on disk only when asked, with a lifetime:
  `listing_cache_s` seconds. Only listings of more than one page
  (`DISK_MIN_KEYS` objects) are written: a smaller one costs one request.

The folder (`listing_cache_dir`) defaults to `listings/` in `cache_dir`
when one is given (where its size limit and eviction cover them), else to
`$XDG_CACHE_HOME/remote_keras/listings` (`~/.cache/remote_keras/listings`);
`listing_cache_dir=False` turns the disk cache off. Each entry is one file
named by the sha256 of its key: a JSON header line, then the relative keys,
one per line, gzip-compressed; it is written to a temporary file and
renamed into place, so readers never see half an entry. Listings holding a
key with a newline are not written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from remote_keras.storage.cache import DiskCache

# Seconds a listing made for one subset waits for the other subsets of its generator.
SHARE_S = 600.0
# Listings of at most this many objects (one page) are not written to disk.
DISK_MIN_KEYS = 1000
FORMAT = "remote_keras-listing-1"
CHUNK = 10_000  # keys compressed at a time when a listing is written
_CODEC = ("utf-8", "surrogatepass")
BLOCK = 1 << 20  # bytes decompressed at a time when a listing is read

_LOCK = threading.Lock()
_SHARED: weakref.WeakKeyDictionary[Any, dict[str, _Shared]] = weakref.WeakKeyDictionary()
# Storage options that say which store a listing comes from (never credentials).
_WHERE = ("endpoint_url", "endpoint", "host", "account_name", "project", "anon")


@dataclasses.dataclass
class _Shared:
    value: Any
    made: float
    used: set[str]


def fingerprint(*parts: Any) -> str:
    """A stable digest of `parts` (JSON-encoded; other values by `repr`)."""
    text = json.dumps(parts, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def shared(generator: Any, key: str, subset: str | None) -> Any:
    """The value another subset of `generator` left under `key`, or `None`.

    Args:
        generator: The `ImageDataGenerator` the iterator was made by.
        key: What was listed (see `fingerprint`).
        subset: `"training"` or `"validation"`; `None` never shares.
    """
    if generator is None or subset is None:
        return None
    now = time.monotonic()
    with _LOCK:
        table = _table(generator)
        if table is None:
            return None
        for old in [k for k, e in table.items() if now - e.made > SHARE_S]:
            del table[old]
        entry = table.get(key)
        if entry is None or subset in entry.used:
            return None
        entry.used.add(subset)
        if entry.used >= {"training", "validation"}:
            del table[key]
        return entry.value


def share(generator: Any, key: str, subset: str | None, value: Any) -> None:
    """Leaves `value` under `key` for the other subsets of `generator` (see `shared`)."""
    if generator is None or subset is None:
        return
    with _LOCK:
        table = _table(generator, create=True)
        if table is not None:
            table[key] = _Shared(value, time.monotonic(), {subset})


def _table(generator: Any, create: bool = False) -> dict[str, _Shared] | None:
    try:
        table = _SHARED.get(generator)
        if table is None and create:
            table = _SHARED[generator] = {}
    except TypeError:  # cannot be referenced weakly: nothing is shared
        return None
    return table


def where(storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parts of `storage_options` naming the store (endpoint, account); no credentials."""
    options = dict(storage_options or {})
    found = {name: options[name] for name in _WHERE if name in options}
    nested = options.get("client_kwargs")
    if isinstance(nested, Mapping):
        found.update({f"client_kwargs.{n}": nested[n] for n in _WHERE if n in nested})
    return found


def folder(options: Any) -> str | None:
    """The listing cache folder for an iterator's `options`; `None` when turned off."""
    chosen = options.listing_cache_dir
    if chosen is False:
        return None
    if chosen:
        return os.fspath(chosen)
    cache_dir = getattr(options, "cache_dir", None)
    if cache_dir:
        return os.path.join(os.fspath(cache_dir), "listings")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "remote_keras", "listings")


class DiskListings:
    """Listings stored as files in `directory`, each under a key.

    Args:
        directory: Folder of the entries; created on first write.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)

    def __repr__(self) -> str:
        return f"DiskListings({self.directory!r})"

    def path(self, key: str) -> str:
        """The file holding the entry for `key`."""
        return os.path.join(self.directory, f"{key}.keys.gz")

    def load(self, key: str, max_age_s: float | None = None) -> list[str] | None:
        """The keys stored under `key`; `None` if absent, unreadable or older than `max_age_s`."""
        path = self.path(key)
        try:
            if max_age_s is not None and time.time() - os.stat(path).st_mtime > max_age_s:
                return None
            # In blocks cut at newlines: no whole-listing bytes or text next to the keys.
            with gzip.open(path, "rb") as f:
                header = f.readline().decode(*_CODEC)
                keys: list[str] = []
                rest, body = b"", False
                while block := f.read(BLOCK):
                    body, block = True, rest + block
                    cut = block.rfind(b"\n")
                    if cut >= 0:
                        keys += block[:cut].decode(*_CODEC).split("\n")
                    rest = block[cut + 1 :]
                if body:
                    keys.append(rest.decode(*_CODEC))
        except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
            return None
        try:
            meta = json.loads(header)
        except ValueError:
            return None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            return None
        if meta.get("count") != len(keys):
            return None
        return keys

    def store(self, key: str, keys: list[str]) -> bool:
        """Writes `keys` under `key` atomically; returns whether it was written.

        Nothing is written for a key holding a newline, or if the folder
        cannot be written (the listing is then simply not cached).
        """
        if any("\n" in k for k in keys):
            return False
        header = json.dumps({"format": FORMAT, "count": len(keys), "written": time.time()})
        path = self.path(key)
        temporary = f"{path}{DiskCache.TMP_MARKER}{os.getpid()}-{threading.get_ident()}"
        try:
            os.makedirs(self.directory, exist_ok=True)
            # Compressed in chunks: never a second copy of the whole listing in memory.
            with (
                open(temporary, "wb") as f,
                gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1) as z,
            ):
                z.write(header.encode())
                for start in range(0, len(keys), CHUNK):
                    chunk = keys[start : start + CHUNK]
                    z.write(("\n" + "\n".join(chunk)).encode("utf-8", "surrogatepass"))
            os.replace(temporary, path)
        except OSError:
            try:
                os.remove(temporary)
            except OSError:
                pass
            return False
        return True


def cached_listing(
    make: Callable[[], list[str]],
    key: str,
    directory: str | None,
    max_age_s: float | None,
    immutable: bool,
) -> tuple[list[str], bool]:
    """A listing from disk when there is a fresh one, else made by `make()` (and stored).

    Args:
        make: Lists for real.
        key: The listing's key (see `fingerprint`).
        directory: The disk cache folder; `None` for no disk cache.
        max_age_s: Lifetime of a stored listing of mutable data; `None`:
            mutable listings are neither read nor written.
        immutable: The data cannot change (a lakeFS commit): no lifetime.

    Returns:
        `(keys, from_disk)`.
    """
    usable = directory is not None and (immutable or (max_age_s is not None and max_age_s > 0))
    disk = DiskListings(directory) if usable and directory is not None else None
    if disk is not None:
        found = disk.load(key, None if immutable else max_age_s)
        if found is not None:
            if immutable:  # a hit refreshes it for `cache_dir`'s eviction (oldest first)
                with contextlib.suppress(OSError):
                    os.utime(disk.path(key))
            return found, True
    keys = make()
    if disk is not None and len(keys) > DISK_MIN_KEYS:
        disk.store(key, keys)
    return keys, False
