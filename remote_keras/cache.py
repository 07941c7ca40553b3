"""A bounded local disk cache of fetched files, safe to share between processes.

Entries are named by the sha256 of the URL they came from, so the cache
assumes objects do not change under the same URL (true for lakeFS commit
URLs; for a mutable bucket, clear the folder when the data changes). Writes
go to a temporary file named with the process and thread id and are renamed
into place with `os.replace`, so a reader never sees a half-written entry and
a killed process leaves at most a stray `*.tmp-*` file, which is never read and
is removed by the next eviction. When the folder grows past `max_bytes`, the
least recently used entries (oldest modification time; a hit refreshes it)
are deleted until it is below 90% of the limit.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time


class DiskCache:
    """Stores bytes by URL in `directory`, holding at most about `max_bytes`.

    Args:
        directory: Folder for the cache; created if missing. Several
            processes may share it.
        max_bytes: Size limit of the folder's entries.
    """

    TMP_MARKER = ".tmp-"

    def __init__(self, directory: str | os.PathLike, max_bytes: int) -> None:
        if not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(
                f"`cache_max_bytes` must be a positive integer. Received: {max_bytes!r}"
            )
        self.directory = os.fspath(directory)
        self.max_bytes = max_bytes
        os.makedirs(self.directory, exist_ok=True)
        self._lock = threading.Lock()
        self._size = self._scan_size()
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"DiskCache({self.directory!r}, max_bytes={self.max_bytes})"

    def __getstate__(self) -> dict:
        return {"directory": self.directory, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict) -> None:
        DiskCache.__init__(self, state["directory"], state["max_bytes"])

    def _path(self, url: str) -> str:
        digest = hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()
        return os.path.join(self.directory, digest[:2], digest)

    def get(self, url: str) -> bytes | None:
        """Returns the cached bytes of `url`, or `None`."""
        path = self._path(url)
        try:
            with open(path, "rb") as f:
                data = f.read()
            os.utime(path)
        except FileNotFoundError:  # absent, or evicted by another process meanwhile
            with self._lock:
                self.misses += 1
            return None
        with self._lock:
            self.hits += 1
        return data

    def put(self, url: str, data: bytes | memoryview) -> None:
        """Stores `data` for `url` atomically, evicting old entries if needed."""
        path = self._path(url)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}{self.TMP_MARKER}{os.getpid()}-{threading.get_ident()}"
        with open(temporary, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
        with self._lock:
            self._size += len(data)
            over = self._size > self.max_bytes
        if over:
            self.evict()

    def evict(self) -> None:
        """Deletes least recently used entries until below 90% of `max_bytes`."""
        entries = []
        now = time.time()
        for folder in _subfolders(self.directory):
            for entry in os.scandir(folder):
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue
                if self.TMP_MARKER in entry.name:
                    if now - stat.st_mtime > 3600:  # left behind by a killed process
                        _remove(entry.path)
                    continue
                entries.append((stat.st_mtime, stat.st_size, entry.path))
        entries.sort()
        total = sum(size for _, size, _ in entries)
        target = int(self.max_bytes * 0.9)
        for _, size, path in entries:
            if total <= target:
                break
            _remove(path)
            total -= size
        with self._lock:
            self._size = total

    def _scan_size(self) -> int:
        total = 0
        for folder in _subfolders(self.directory):
            for entry in os.scandir(folder):
                if self.TMP_MARKER not in entry.name:
                    try:
                        total += entry.stat().st_size
                    except FileNotFoundError:
                        pass
        return total


def _subfolders(directory: str) -> list[str]:
    return [entry.path for entry in os.scandir(directory) if entry.is_dir()]


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
