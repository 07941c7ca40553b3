"""Running statistics of an iterator."""

from __future__ import annotations

import bisect
import collections
import dataclasses
import threading
import time
from typing import Any


@dataclasses.dataclass(frozen=True)
class LoaderStats:
    """A snapshot of what an iterator has done since it was built.

    Attributes:
        batches: Batches handed to the caller.
        images: Images decoded.
        bytes: Bytes read (from storage or the disk cache).
        requests: Read attempts sent to the loader, retries included.
        retries: Of those, retries of transient failures.
        cache_hits: Files served by the disk cache.
        skipped: Samples dropped with `on_error="skip"`.
        fetch_s: Thread-seconds spent fetching bytes.
        decode_s: Thread-seconds spent decoding, resizing and augmenting.
        wait_s: Seconds callers of `__getitem__`/`next()` spent waiting for a
            batch, summed over calling threads (with Keras's `workers > 1`
            these are worker threads, so this is not the time training
            itself stalled).
        elapsed_s: Seconds since the first batch was asked for.
        images_per_s: `images / elapsed_s`.
    """

    batches: int = 0
    images: int = 0
    bytes: int = 0
    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    skipped: int = 0
    fetch_s: float = 0.0
    decode_s: float = 0.0
    wait_s: float = 0.0
    elapsed_s: float = 0.0
    images_per_s: float = 0.0


class StatsRecorder:
    """Thread-safe counters behind `iterator.stats`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, float] = {}
        self._started: float | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {}  # counters are per process

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()

    def add(self, **amounts: float) -> None:
        with self._lock:
            if self._started is None:
                self._started = time.perf_counter()
            for name, amount in amounts.items():
                self._counts[name] = self._counts.get(name, 0) + amount

    def snapshot(self) -> LoaderStats:
        with self._lock:
            counts = dict(self._counts)
            elapsed = time.perf_counter() - self._started if self._started else 0.0
        images = int(counts.get("images", 0))
        return LoaderStats(
            **{k: type(getattr(LoaderStats, k))(v) for k, v in counts.items()},
            elapsed_s=elapsed,
            images_per_s=images / elapsed if elapsed else 0.0,
        )


class HandoffLog:
    """When each batch was asked for and handed out (`time.perf_counter()`), per process.

    `InputStallCallback` turns it on (`enabled`) and compares these times with
    when training asked for batches; until then nothing is recorded.
    """

    def __init__(self, maxlen: int = 1_000_000) -> None:
        self.enabled = False
        self._lock = threading.Lock()
        self._entries: collections.deque[tuple[float, float]] = collections.deque(maxlen=maxlen)

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()

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
