"""A bounded local disk cache of fetched files: verified, self-healing, shared by processes.

**Layout.** Everything lives in `remote_keras_cache/` inside the folder given
(`cache_dir`), which also holds a `CACHEDIR.TAG` (the Cache Directory Tagging
standard: backup tools skip the folder). Nothing else in `cache_dir` is read,
counted or deleted, except the listing cache's own `listings/*.keys.gz`
files (see `remote_keras.storage.listing.listing_cache`), which share the size limit. An
entry is named by the sha256 of the URL it came from, in a subfolder named by
its first two hex digits, so the cache assumes objects do not change under
one URL (true for lakeFS commit URLs; for a mutable bucket, clear the folder
when the data changes). Only files and folders named in these patterns, never
symbolic links, are counted or deleted.

**Integrity.** Each entry starts with a 20-byte header: the magic `RKDC`, the
format version, the payload's length and its CRC-32 (`zlib.crc32`, about
2 GB/s: 10 us for a 25 kB JPEG). A hit is verified; a damaged entry (flipped
bytes, truncated, empty, another format) is deleted and reported as a miss,
so the caller reads the object again and stores a good copy.

**Writes** go to a temporary `<entry>.tmp-<pid>-<random>` that is renamed into
place with `os.replace`, so a reader never sees a half-written entry. A write
that fails removes its temporary file; temporary files older than an hour
(left by killed processes) are deleted when a cache is opened and at each
eviction. A cache that cannot be written (read-only, full, permission
denied, not a folder) warns once per folder and process, naming the folder
and the reason, and from then on only reads: fetched files are still used.

**Eviction.** When the entries grow past `max_bytes`, the least recently used
ones (oldest modification time; a hit refreshes it) are deleted until they
are below 90% of the limit.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
import struct
import threading
import time
import warnings
import zlib

ROOT_NAME = "remote_keras_cache"
FORMAT_VERSION = 1
_MAGIC = b"RKDC"
_HEADER = struct.Struct("<4sIQI")  # magic, format version, payload length, CRC-32 of the payload
_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This folder is a cache of files fetched by remote_keras (entry format 1).\n"
    "# remote_keras reads and deletes only the files it named here\n"
    "# (see remote_keras.storage.cache).\n"
)
_FOLDER = re.compile(r"[0-9a-f]{2}")
_ENTRY = re.compile(r"[0-9a-f]{64}")
_TEMPORARY = re.compile(r"[0-9a-f]{64}(\.keys\.gz)?\.tmp-[0-9]+-[0-9a-f]+")
_LISTINGS = "listings"
_LISTING = re.compile(r"[0-9a-f]{64}\.keys\.gz")

_WARNED: set[str] = set()  # folders warned about in this process
_WARNED_LOCK = threading.Lock()


class DiskCache:
    """Stores bytes by URL in `directory`, holding at most about `max_bytes`.

    Args:
        directory: Folder for the cache (`cache_dir`); its `remote_keras_cache/`
            subfolder is created if missing. Several processes may share it.
        max_bytes: Size limit of the cache's entries.

    Raises:
        ValueError: If `max_bytes` is not a positive integer.
    """

    TMP_MARKER = ".tmp-"
    STALE_TMP_S = 3600.0

    def __init__(self, directory: str | os.PathLike, max_bytes: int) -> None:
        if not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(
                f"`cache_max_bytes` must be a positive integer. Received: {max_bytes!r}"
            )
        self.directory = os.fspath(directory)
        self.root = os.path.join(self.directory, ROOT_NAME)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.healed = 0
        self.writable = self._open()
        self._size = sum(size for _, size, _ in self._scan())

    def __repr__(self) -> str:
        return f"DiskCache({self.directory!r}, max_bytes={self.max_bytes})"

    def __getstate__(self) -> dict:
        return {"directory": self.directory, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict) -> None:
        DiskCache.__init__(self, state["directory"], state["max_bytes"])

    def _open(self) -> bool:
        """Creates the cache folder and its tag; `False` (after one warning) if it cannot."""
        tag = os.path.join(self.root, "CACHEDIR.TAG")
        try:
            os.makedirs(self.root, exist_ok=True)
            if not os.path.isfile(tag):
                _write_atomically(tag, [_TAG.encode()])
        except OSError as exc:
            self._cannot_write(exc)
            return False
        return True

    def _path(self, url: str) -> str:
        digest = hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()
        return os.path.join(self.root, digest[:2], digest)

    def get(self, url: str) -> bytes | None:
        """Returns the cached bytes of `url`, or `None` (absent, unreadable or damaged)."""
        return self.lookup(url)[0]

    def lookup(self, url: str) -> tuple[bytes | None, bool]:
        """Returns the cached bytes of `url` (or `None`) and whether a damaged entry was dropped.

        A damaged entry (checksum or length wrong, truncated, empty) is
        deleted, so that the caller reads `url` again and stores it anew.
        """
        path = self._path(url)
        try:
            with open(path, "rb", buffering=0) as f:
                data = _verified(f.read(_HEADER.size), f.readall())
        except OSError:  # absent, evicted by another process meanwhile, or unreadable
            with self._lock:
                self.misses += 1
            return None, False
        if data is None:
            _remove(path)
            with self._lock:
                self.misses += 1
                self.healed += 1
            return None, True
        with contextlib.suppress(OSError):  # a read-only cache still serves its entries
            os.utime(path)
        with self._lock:
            self.hits += 1
        return data, False

    def put(self, url: str, data: bytes | bytearray | memoryview) -> bool:
        """Stores `data` for `url` atomically, evicting old entries if needed.

        Never raises for a folder that cannot be written: it warns once and
        stops writing.

        Returns:
            Whether the entry was written.
        """
        if not self.writable:
            return False
        path = self._path(url)
        size = memoryview(data).nbytes
        header = _HEADER.pack(_MAGIC, FORMAT_VERSION, size, zlib.crc32(data))
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_atomically(path, [header, data])
        except OSError as exc:
            self._cannot_write(exc)
            return False
        with self._lock:
            self._size += _HEADER.size + size
            over = self._size > self.max_bytes
        if over:
            self.evict()
        return True

    def _cannot_write(self, exc: OSError) -> None:
        self.writable = False
        name = errno.errorcode.get(exc.errno or 0)
        reason = f"{name}: {exc.strerror}" if name and exc.strerror else repr(exc)
        with _WARNED_LOCK:
            first = self.root not in _WARNED
            _WARNED.add(self.root)
        if first:
            warnings.warn(
                f"The disk cache folder {self.root!r} cannot be written ({reason}): files are "
                "read from storage and no longer cached by this process. Free space or fix "
                "the folder, or pass another `cache_dir` (or `cache_dir=None`).",
                stacklevel=3,
            )

    def evict(self) -> None:
        """Deletes least recently used entries until below 90% of `max_bytes`."""
        entries = sorted(self._scan())
        total = sum(size for _, size, _ in entries)
        target = int(self.max_bytes * 0.9)
        for _, size, path in entries:
            if total <= target:
                break
            _remove(path)
            total -= size
        with self._lock:
            self._size = total

    def _scan(self) -> list[tuple[float, int, str]]:
        """`(mtime, size, path)` of every entry; deletes stale temporary files on the way."""
        folders = [(f, _ENTRY) for f in _subfolders(self.root, _FOLDER)]
        folders.append((os.path.join(self.directory, _LISTINGS), _LISTING))
        stale = time.time() - self.STALE_TMP_S
        found = []
        for folder, pattern in folders:
            for name, info in _files(folder):
                path = os.path.join(folder, name)
                if pattern.fullmatch(name) and (pattern is _LISTING or name[:2] == folder[-2:]):
                    found.append((info.st_mtime, info.st_size, path))
                elif _TEMPORARY.fullmatch(name) and info.st_mtime < stale:
                    _remove(path)
        return found


def _verified(header: bytes, payload: bytes) -> bytes | None:
    """The payload if the header matches it, else `None`."""
    if len(header) != _HEADER.size:
        return None
    magic, version, size, crc = _HEADER.unpack(header)
    if magic != _MAGIC or version != FORMAT_VERSION or size != len(payload):
        return None
    return payload if zlib.crc32(payload) == crc else None


def _write_atomically(path: str, parts: list[bytes | bytearray | memoryview]) -> None:
    """Writes `parts` to a new temporary file renamed to `path`; removes it on failure."""
    temporary = f"{path}{DiskCache.TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(temporary, "xb") as f:
            for part in parts:
                f.write(part)
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def _subfolders(directory: str, pattern: re.Pattern[str]) -> list[str]:
    """Real subfolders (no links) of `directory` whose names match `pattern`."""
    try:
        with os.scandir(directory) as entries:
            return [
                e.path
                for e in entries
                if pattern.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return []


def _files(directory: str) -> list[tuple[str, os.stat_result]]:
    """Names and `lstat`s of the regular files in `directory` (no links); `[]` if unreadable."""
    found = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:  # deleted by another process meanwhile
                    continue
                if stat.S_ISREG(info.st_mode):
                    found.append((entry.name, info))
    except OSError:
        pass
    return found


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
