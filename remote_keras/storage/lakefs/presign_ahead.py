"""Presigned addresses listed ahead of the reader and renewed before they expire.

`PresignAhead` runs in the background of a `PresignedReader` that was told what
will be read (`PresignedReader.expect`, which the iterators call at
construction). Started by the first read, it lists every folder to be read,
`THREADS` at a time in the order first needed, keeping all their addresses
(packed: `remote_keras.storage.packed_paths.AddressTable`, about 70 bytes per object
for the stand-in's URLs; reading in shuffled order needs them all anyway).
Then, while reads go on, it lists each folder again half-way through its addresses' lifetime. A
listing that fails (the lakeFS server is down) is tried again after a
growing pause, up to `MAX_PAUSE_S`, while reads go on with the addresses in
hand, which stay valid for the other half of their lifetime.

The thread ends after `IDLE_S` without a read (the next read starts a new
one), when its reader closes (`stop`) or is garbage-collected; it holds the
reader weakly and is a daemon, so it never keeps a process alive.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

Key = tuple[str, str, str, str]  # (host, repository, ref, folder)

# Folders listed at once, ahead of the reader.
THREADS = 4
# Pauses between tries of a failed listing: doubling from the first up to the last.
FIRST_PAUSE_S, MAX_PAUSE_S = 1.0, 30.0
# The thread ends after this long without a read.
IDLE_S = 300.0
# It looks for due renewals (and whether its reader is gone) at least this often.
POLL_S = 1.0


class Reader(Protocol):
    """What `PresignAhead` uses of the reader it fills (`presign.PresignedReader`)."""

    clock: Callable[[], float]

    def renew_at(self, key: Key) -> float:
        """When the folder `key` is due for listing."""
        ...

    def list_folder(self, fs: Any, key: Key) -> None:
        """Lists the folder `key` unless it is not due."""
        ...


class PresignAhead:
    """Lists the folders `keys` for `reader` in the background, then renews them while read.

    Args:
        reader: The `PresignedReader` to fill (held weakly).
        fs: The `lakefs_spec.LakeFSFileSystem` of the folders' server.
        keys: `(host, repository, ref, folder)` of each folder, in reading order.

    Attributes:
        ready: Set once every folder has been listed (or tried) once.
        failures: Listings that failed, in all.
    """

    def __init__(self, reader: Reader, fs: Any, keys: list[Key]) -> None:
        self._reader = weakref.ref(reader)
        self._fs = fs
        self._keys = keys
        self._pending = iter(keys)
        self._lock = threading.Lock()
        self._retry_at: dict[Key, tuple[float, float]] = {}  # key -> (when, next pause)
        self._touched = time.monotonic()
        self.ready = threading.Event()
        self.failures = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="remote_keras-presign-ahead", daemon=True
        )

    def start(self) -> None:
        """Starts the background thread."""
        self._thread.start()

    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive() and not self._stopped.is_set()

    def stop(self) -> None:
        """Ends the thread (soon: a listing under way finishes first)."""
        self._stopped.set()

    def touch(self) -> None:
        """Notes a read: the thread keeps renewing."""
        self._touched = time.monotonic()

    # ------------------------------------------------------------------ internals

    def _run(self) -> None:
        workers = [
            threading.Thread(target=self._first_pass, name=f"remote_keras-presign-{i}", daemon=True)
            for i in range(min(THREADS, len(self._keys)))
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        self.ready.set()
        while time.monotonic() - self._touched < IDLE_S and not self._stopped.is_set():
            pause = self._renew_due()
            if pause is None:
                return  # the reader is gone
            self._stopped.wait(pause)

    def _first_pass(self) -> None:
        while True:
            with self._lock:
                key = next(self._pending, None)
            if key is None or self._stopped.is_set() or not self._list(key):
                return

    def _renew_due(self) -> float | None:
        """Lists the folders that are due; returns how long to wait, or `None` to stop."""
        reader = self._reader()
        if reader is None:
            return None
        now = reader.clock()
        soonest = now + POLL_S
        for key in self._keys:
            when = max(reader.renew_at(key), self._retry_at.get(key, (0.0, 0.0))[0])
            if when <= now:
                if self._stopped.is_set() or not self._list(key):
                    return None
                when = max(reader.renew_at(key), self._retry_at.get(key, (0.0, 0.0))[0])
                now = reader.clock()
            soonest = min(soonest, when)
        return min(POLL_S, max(0.05, soonest - now))

    def _list(self, key: Key) -> bool:
        """Lists `key` once; returns `False` when the reader is gone."""
        reader = self._reader()
        if reader is None:
            return False
        try:
            reader.list_folder(self._fs, key)
        except Exception:  # the reads that need it list it again, and report
            self.failures += 1
            _, pause = self._retry_at.get(key, (0.0, FIRST_PAUSE_S))
            self._retry_at[key] = (reader.clock() + pause, min(MAX_PAUSE_S, 2 * pause))
        else:
            self._retry_at.pop(key, None)
        return True
