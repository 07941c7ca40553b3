"""Running statistics of an iterator."""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any


@dataclasses.dataclass(frozen=True)
class LoaderStats:
    """A snapshot of what an iterator has done since it was built.

    Counts (`images`, `requests`, ...) add up over every thread of this
    process; durations ending in `_s` are wall-clock seconds unless they say
    thread-seconds, and none exceeds `elapsed_s`.

    Attributes:
        batches: Batches handed to the caller.
        images: Images decoded.
        bytes: Bytes read (from storage or the disk cache).
        requests: Read attempts sent to the loader, retries included.
        retries: Of those, retries of transient failures.
        cache_hits: Files served by the disk cache.
        carried: Files a pass cut short at its first batch had read, handed
            to the next pass instead of a second read (Keras's JAX and
            PyTorch trainers build a model from such a pass; see
            `remote_keras.pipeline.carried`).
        cache_healed: Damaged disk cache entries (checksum or length wrong,
            truncated, empty) dropped and read again from storage.
        verified: Reads from storage whose bytes matched the checksum the
            store sent with them (`verify_checksums`).
        checksum_mismatches: Reads whose bytes did not match it (each
            retried; counted per attempt).
        unverified: Reads of URLs with nothing to check against: no checksum
            sent, or not exposed by the client (obstore on GCS and Azure,
            multipart S3 ETags and lakeFS checksums, custom loaders), or
            `verify_checksums=False`. Local files and cache hits count in
            none of the three (the disk cache checks its own entries).
        skipped: Samples dropped with `on_error="skip"` (in Keras's worker
            processes too).
        fetch_s: Thread-seconds spent fetching bytes (summed over threads).
        decode_s: Thread-seconds spent decoding, resizing and augmenting.
        load_s: Seconds during which at least one batch was being built.
        wait_s: Seconds during which at least one caller of
            `__getitem__`/`next()` was waiting for a batch.
        elapsed_s: Seconds since the first batch was asked for.
        images_per_s: `images / elapsed_s`: includes the time the caller
            spent elsewhere (training, in `fit`), so it is the rate training
            consumed images, not what the pipeline can deliver.
        load_images_per_s: `images / load_s`: what the pipeline delivers
            while it works, whatever the caller does between batches.
        loader: Which loader reads (`"obstore for s3://"`, `"fsspec: <why>"`
            with `loader="auto"`, the name given, or `"given"` for a callable).
    """

    batches: int = 0
    images: int = 0
    bytes: int = 0
    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    carried: int = 0
    cache_healed: int = 0
    verified: int = 0
    checksum_mismatches: int = 0
    unverified: int = 0
    skipped: int = 0
    fetch_s: float = 0.0
    decode_s: float = 0.0
    load_s: float = 0.0
    wait_s: float = 0.0
    elapsed_s: float = 0.0
    images_per_s: float = 0.0
    load_images_per_s: float = 0.0
    loader: str = ""


class StatsRecorder:
    """Thread-safe counters behind `iterator.stats`.

    `busy(name)` measures the wall-clock time during which at least one
    thread is inside it, so overlapping batches or callers count once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, float] = {}
        self._started: float | None = None
        self._active: dict[str, tuple[int, float]] = {}  # name -> (threads inside, since)

    def __getstate__(self) -> dict[str, Any]:
        return {}  # counters are per process

    def __setstate__(self, state: dict[str, Any]) -> None:
        StatsRecorder.__init__(self)

    def add(self, **amounts: float) -> None:
        with self._lock:
            if self._started is None:
                self._started = time.perf_counter()
            for name, amount in amounts.items():
                self._counts[name] = self._counts.get(name, 0) + amount

    @contextlib.contextmanager
    def busy(self, name: str) -> Iterator[None]:
        """Adds to `name` the wall-clock time while any thread is inside this block."""
        self._enter(name)
        try:
            yield
        finally:
            self._leave(name)

    def _enter(self, name: str) -> None:
        now = time.perf_counter()
        with self._lock:
            if self._started is None:
                self._started = now
            inside, since = self._active.get(name, (0, now))
            self._active[name] = (inside + 1, since if inside else now)

    def _leave(self, name: str) -> None:
        now = time.perf_counter()
        with self._lock:
            inside, since = self._active[name]
            if inside == 1:
                del self._active[name]
                self._counts[name] = self._counts.get(name, 0) + now - since
            else:
                self._active[name] = (inside - 1, since)

    def snapshot(self) -> LoaderStats:
        now = time.perf_counter()
        with self._lock:
            counts = dict(self._counts)
            for name, (_, since) in self._active.items():  # still inside: count up to now
                counts[name] = counts.get(name, 0) + now - since
            elapsed = now - self._started if self._started else 0.0
        images = int(counts.get("images", 0))
        load_s = counts.get("load_s", 0.0)
        return LoaderStats(
            **{k: type(getattr(LoaderStats, k))(v) for k, v in counts.items()},
            elapsed_s=elapsed,
            images_per_s=images / elapsed if elapsed else 0.0,
            load_images_per_s=images / load_s if load_s else 0.0,
        )


class HandoffLog:
    """When each batch was asked for and handed out (`time.perf_counter()`), per process.

    `InputStallCallback` turns it on (`enabled`) and compares these times with
    when training asked for batches; until then nothing is recorded.

    Attributes:
        epoch_start: The iterator's `stats` when its current epoch began (when
            the previous one ended, unless Keras abandoned that one's pass
            after one batch to build a model: its reads go on; all zeros
            before the first ends). The first epoch of a `fit` reports the
            reads from there, those Keras made before the epoch began
            included (see `EpochInputReport`).
    """

    def __init__(self, maxlen: int = 1_000_000) -> None:
        self.enabled = False
        self.epoch_start = LoaderStats()
        self._lock = threading.Lock()
        self._entries: collections.deque[tuple[float, float]] = collections.deque(maxlen=maxlen)

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        HandoffLog.__init__(self)

    def record(self, asked: float, handed_out: float) -> None:
        if self.enabled:
            with self._lock:
                self._entries.append((asked, handed_out))

    def since(self, start: float) -> list[tuple[float, float]]:
        """Hand-offs asked for at or after `start`, in the order they were asked for.

        Earlier ones are dropped: epochs only move forward.
        """
        with self._lock:
            entries = sorted(self._entries)
            entries = entries[bisect.bisect_left(entries, (start, float("-inf"))) :]
            self._entries = collections.deque(entries, maxlen=self._entries.maxlen)
        return entries
