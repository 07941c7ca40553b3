"""Reading a batch's files: the disk cache, then the loader, with retries of transient failures.

Keras-free: `Fetcher` turns a list of paths into one result per path (the
bytes or whatever the loader returns, or the exception, already naming the
path, that reading it raised) and counts what it did into `StatsRecorder`.
With `verify_checksums`, bodies are checked against the checksum the store
sent with them (`remote_keras.storage.integrity`) on the fetch threads; a mismatch is
a failed read, retried like any transient failure.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from remote_keras import errors
from remote_keras.pipeline.carried import CarriedReads
from remote_keras.pipeline.stats import StatsRecorder
from remote_keras.storage import integrity, locations
from remote_keras.storage.cache import DiskCache
from remote_keras.storage.loaders import BatchLoader, CheckedBatchLoader, CheckedLoader, Loader
from remote_keras.storage.loaders.fetched import Fetched
from remote_keras.storage.loaders.protocol import offers_checked
from remote_keras.storage.retry import RetryPolicy, RetryRounds

_BYTES = (bytes, bytearray, memoryview)


@dataclasses.dataclass(eq=False, repr=False)  # equal only to itself; object's repr
class Fetcher:
    """Fetches paths through a disk cache (optional), a loader and the retry policy.

    Args:
        loader: Reads one path; a `BatchLoader` reads a whole batch at once.
        policy: Retries and the per-request timeout.
        cache: Disk cache of fetched bytes, or `None`.
        stats: Where requests, retries, bytes, cache hits, checksum checks
            and fetch time go.
        verify_checksums: Check bodies against the checksum the store sent
            with them, where the loader returns it (`CheckedLoader`,
            `CheckedBatchLoader`).

    Attributes:
        carried: Bytes a pass cut short at its first batch read, which the
            next pass takes instead of reading them again (`CarriedReads`).
    """

    loader: Loader
    policy: RetryPolicy
    cache: DiskCache | None
    stats: StatsRecorder
    verify_checksums: bool = True
    carried: CarriedReads = dataclasses.field(init=False, default_factory=CarriedReads)

    def fetch(
        self, paths: Sequence[str], executor: Executor, stop: threading.Event | None = None
    ) -> list[Any]:
        """Reads `paths`; failures are returned in place, as exceptions naming the path.

        Args:
            paths: Paths or URLs, possibly repeated.
            executor: Threads for per-file loaders (one blocking request each).
            stop: When set, failed reads are not retried any more.

        Returns:
            One entry per path, in order.
        """
        start = time.perf_counter()
        results: list[Any] = [self.carried.take(path) for path in paths]
        carried = sum(data is not None for data in results)
        if self.cache is not None:
            healed = 0
            for i, path in enumerate(paths):
                if results[i] is None:
                    results[i], damaged = self.cache.lookup(path)  # a damaged entry is dropped
                    healed += damaged
            hits = sum(data is not None for data in results) - carried
            self.stats.add(cache_hits=hits, cache_healed=healed)
        missing = [i for i, data in enumerate(results) if data is None]
        if missing:
            wanted = [paths[i] for i in missing]
            rounds = RetryRounds(wanted, self.policy, stop=stop)
            fetched = self._once(wanted, executor)
            while again := rounds.again(fetched):
                rounds.update(fetched, again, self._once([wanted[i] for i in again], executor))
            self.stats.add(retries=rounds.retries)
            for i, data in zip(missing, rounds.finish(fetched)):
                if isinstance(data, BaseException):
                    data = errors.sanitize(data)
                else:
                    self.carried.put(paths[i], data)
                    if self.cache is not None and isinstance(data, _BYTES):
                        self.cache.put(paths[i], data)  # never raises: warns once if unwritable
                results[i] = data
        read = sum(len(r) for r in results if isinstance(r, _BYTES))
        self.stats.add(fetch_s=time.perf_counter() - start, bytes=read, carried=carried)
        return results

    def _once(self, paths: list[str], executor: Executor) -> list[Any]:
        """One attempt at every path; failures (and requests past the timeout) returned in place.

        Each request may take `policy.timeout_s` from when a thread starts it,
        so requests queued behind others in a big batch are not cut short.
        """
        self.stats.add(requests=len(paths))
        loader = self.loader
        checked = [False] * len(paths)  # bodies that matched their store checksum
        if isinstance(loader, BatchLoader):
            if (
                self.verify_checksums
                and isinstance(loader, CheckedBatchLoader)
                and offers_checked(loader, "load_many", "load_many_checked")
            ):
                fetched = loader.load_many_checked(paths, executor=executor)
                results = [
                    self._checked(p, f, checked, i) for i, (p, f) in enumerate(zip(paths, fetched))
                ]
            else:
                results = loader.load_many(paths, executor=executor)
            return self._counted(paths, results, checked)
        read = (
            loader.read_checked
            if self.verify_checksums
            and isinstance(loader, CheckedLoader)
            and offers_checked(loader, "__call__", "read_checked")
            else loader
        )
        started: list[float | None] = [None] * len(paths)

        def timed(i: int) -> Any:
            started[i] = time.monotonic()
            value = read(paths[i])
            if isinstance(value, Fetched):  # checked on this thread: a mismatch raises
                checked[i] = integrity.verify(paths[i], value.data, value.checksum)
                return value.data
            return value

        futures = [executor.submit(timed, i) for i in range(len(paths))]
        results = []
        for i, (path, future) in enumerate(zip(paths, futures)):
            try:
                results.append(self._result(future, started, i))
            except FutureTimeout:
                future.cancel()
                stalled = TimeoutError(f"no answer within {self.policy.timeout_s} s")
                results.append(errors.translate(path, stalled))
            except Exception as exc:  # raised when the sample is decoded, in order
                results.append(errors.translate(path, exc))
        return self._counted(paths, results, checked)

    @staticmethod
    def _checked(path: str, value: Any, checked: list[bool], i: int) -> Any:
        """`value`'s bytes, checked against its checksum; a mismatch returned in place."""
        if not isinstance(value, Fetched):
            return value
        try:
            checked[i] = integrity.verify(path, value.data, value.checksum)
        except errors.ChecksumMismatchError as exc:
            return exc
        return value.data

    def _counted(self, paths: Sequence[str], results: list[Any], checked: list[bool]) -> list[Any]:
        """Counts checked, mismatched and unchecked reads of URLs (local files are neither)."""
        read = [not isinstance(r, BaseException) for r in results]
        self.stats.add(
            verified=sum(ok and c for ok, c in zip(read, checked)),
            checksum_mismatches=sum(isinstance(r, errors.ChecksumMismatchError) for r in results),
            unverified=sum(
                ok and not c and locations.is_url(p) for p, ok, c in zip(paths, read, checked)
            ),
        )
        return results

    def _result(self, future: Future, started: list[float | None], i: int) -> Any:
        """`future`'s result, waiting at most `timeout_s` after its request started."""
        timeout_s = self.policy.timeout_s
        while True:
            begun = started[i]
            wait = timeout_s if begun is None else begun + timeout_s - time.monotonic()
            try:
                return future.result(timeout=max(0.0, wait))
            except FutureTimeout:
                if begun is not None or started[i] is None and future.cancel():
                    raise  # stalled, or still queued after a whole timeout: cancelled
