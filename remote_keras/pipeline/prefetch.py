"""Thread pools that fetch and decode batches ahead of the training loop.

Concurrency model:
    - Batch threads (`prefetch_batches + 2`): one per batch being built. A
      batch thread fetches the batch's files, hands each one to the decode
      threads and waits for them. Keras's own `workers` threads, when a
      `PyDataset` enqueuer is used, only wait on these futures.
    - Fetch threads (`max_in_flight`): used for loaders without `load_many`,
      one blocking request each. Loaders with `load_many` (the default fsspec
      loader on async backends) keep a whole batch of requests in flight on
      fsspec's event loop from a single batch thread.
    - Decode threads (one per core): decode, resize, augment and standardize
      one sample each. Pillow and scipy release the GIL, so they use all cores.

Bounds:
    `Prefetcher` holds at most `depth` batches that nobody has asked for yet
    (running or finished); a batch that is asked for is always started. Memory
    is therefore about `(depth + concurrent callers) * batch bytes`, whatever
    the dataset size.

Shutdown:
    `close()` cancels queued work and returns at once (it never waits for a
    stalled request); running tasks finish and their threads exit. Pools are
    created lazily in each process, so a forked child or an unpickled copy
    builds its own. After `IDLE_RELEASE_S` seconds with no work, the pools
    shut down the same way and the iterator drops its loader's clients;
    both are created again by the next batch.

Known limitations:
    Look-ahead only helps when batches are requested in order (hand loops,
    `fit(shuffle=False)`, `predict`, `evaluate`). With `fit(shuffle=True)`
    batch order is random, and overlap comes from Keras's `workers` threads,
    each of which asks for a different batch.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

# Seconds without work after which an iterator's threads exit and its loader's clients (and
# their connections) are dropped; both come back at the next batch. Iterators that `fit` keeps
# alive (a notebook cell run again) then hold no threads or sockets.
IDLE_RELEASE_S = 30.0


class _Pool(ThreadPoolExecutor):
    """A thread pool that tells its `WorkerPools` when work starts and ends."""

    def __init__(self, owner: WorkerPools, kind: str) -> None:
        super().__init__(owner.sizes[kind], thread_name_prefix=f"remote_keras-{kind}")
        self._owner = owner
        self._kind = kind

    def submit(self, fn, /, *args, **kwargs):
        owner = self._owner
        owner._started()
        try:
            future = super().submit(fn, *args, **kwargs)
        except RuntimeError:
            owner._finished(None)
            fresh = owner.get(self._kind)  # raises if the iterator was closed
            if fresh is self:
                raise
            return fresh.submit(fn, *args, **kwargs)  # this pool was released while idle
        future.add_done_callback(owner._finished)
        return future


class WorkerPools:
    """The three thread pools of one iterator, created on first use per process.

    After `idle_s` seconds with no work submitted or running, the pools shut
    down (their threads exit) and `on_idle` runs (the iterator drops its
    loader's clients); the next `get` creates them again.

    Args:
        batch_threads: Batches built at once.
        fetch_threads: Blocking requests in flight for per-file loaders.
        decode_threads: Samples decoded at once; `None` for one per core.
        idle_s: Seconds idle before releasing; `None` for `IDLE_RELEASE_S`.
        on_idle: Called (from a timer thread) after the pools were released.
    """

    def __init__(
        self,
        batch_threads: int,
        fetch_threads: int,
        decode_threads: int | None,
        idle_s: float | None = None,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self.sizes = {
            "batch": batch_threads,
            "fetch": fetch_threads,
            "decode": decode_threads or os.cpu_count() or 1,
        }
        self.idle_s = IDLE_RELEASE_S if idle_s is None else idle_s
        self.on_idle = on_idle
        self.releases = 0  # times the pools were released while idle
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._closed = False
        self._busy = 0  # futures submitted and not done
        self._last = time.monotonic()
        self._timer: threading.Timer | None = None

    def get(self, kind: str) -> ThreadPoolExecutor:
        """Returns the pool `kind` (`"batch"`, `"fetch"` or `"decode"`)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("This iterator has been closed.")
            if self._pid != os.getpid():  # forked: the parent's threads do not exist here
                self._pools = {}
                self._timer = None
                self._busy = 0
                self._pid = os.getpid()
            pool = self._pools.get(kind)
            if pool is None:
                pool = self._pools[kind] = _Pool(self, kind)
            self._last = time.monotonic()
            if self._timer is None:
                self._schedule(self.idle_s)
            return pool

    def close(self) -> None:
        """Cancels queued work and lets the threads exit; idempotent and non-blocking."""
        with self._lock:
            self._closed = True
            pools = self._release()
        _shut_down(pools)

    def _started(self) -> None:
        with self._lock:
            self._busy += 1
            self._last = time.monotonic()

    def _finished(self, _future: Any) -> None:
        with self._lock:
            self._busy -= 1
            self._last = time.monotonic()

    def _schedule(self, delay: float) -> None:
        timer = self._timer = threading.Timer(max(delay, 0.0), self._on_timer)
        timer.name = "remote_keras-idle"
        timer.daemon = True
        timer.start()

    def _on_timer(self) -> None:
        with self._lock:
            if self._timer is not threading.current_thread() or self._closed:
                return
            left = self._last + self.idle_s - time.monotonic()
            if self._busy or left > 0:
                self._schedule(left if left > 0 else self.idle_s)
                return
            pools = self._release()
            self.releases += 1
        _shut_down(pools)
        if self.on_idle is not None:
            self.on_idle()

    def _release(self) -> list[ThreadPoolExecutor]:
        """Forgets the pools and the timer (under the lock); returns the pools to shut down."""
        timer, self._timer = self._timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        pools, self._pools = self._pools, {}
        return list(pools.values()) if self._pid == os.getpid() else []


def _shut_down(pools: list[ThreadPoolExecutor]) -> None:
    """Cancels queued work; running tasks finish and the threads exit. Never waits (outside the
    pools' lock: cancelling runs the futures' callbacks)."""
    for pool in pools:
        pool.shutdown(wait=False, cancel_futures=True)


Key = tuple[int, int]  # (epoch, batch index)


class Prefetcher:
    """Futures of batches, keyed by `(epoch, batch index)`, bounded in number.

    Not thread-safe by itself: the owning iterator calls it under its lock.

    Args:
        pools: Where batch tasks run.
        depth: Batches that may be held without having been asked for.
    """

    def __init__(self, pools: WorkerPools, depth: int) -> None:
        self.pools = pools
        self.depth = depth
        self._pending: OrderedDict[Key, Future] = OrderedDict()
        # Batches asked for, by epoch (the last two): never built ahead again, since
        # `fit(shuffle=True)` asks out of order and a look-ahead would re-read them.
        self._asked: dict[int, set[int]] = {}

    def claim(self, key: Key) -> Future | None:
        """Marks `key` asked for; returns its future if it was started ahead, else `None`."""
        epoch, index = key
        if epoch not in self._asked:
            self._asked = {e: s for e, s in self._asked.items() if e >= epoch - 1}
        self._asked.setdefault(epoch, set()).add(index)
        future = self._pending.pop(key, None)
        return None if future is None or future.cancelled() else future

    def start(self, task: Callable[[], Any]) -> Future:
        """Runs `task` on the batch threads."""
        return self.pools.get("batch").submit(task)

    def wants(self, key: Key) -> bool:
        """Whether `key` may be built ahead: not asked for, not started, and there is room."""
        epoch, index = key
        started = key in self._pending or index in self._asked.get(epoch, ())
        return not started and len(self._pending) < self.depth

    def ahead(self, key: Key, task: Callable[[], Any]) -> None:
        """Starts `task` for `key` in the background (ask `wants(key)` first)."""
        self._pending[key] = self.start(task)

    def clear(self, epoch: int | None = None) -> None:
        """Drops every batch not yet asked for (of `epoch` only, if given), cancelling those
        not started."""
        for key in [k for k in self._pending if epoch is None or k[0] == epoch]:
            self._pending.pop(key).cancel()
