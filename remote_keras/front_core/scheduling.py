"""Building batches on the iterator's pools, and building the next ones ahead of time."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from remote_keras.pipeline import batches
from remote_keras.pipeline.engine import ReadEngine
from remote_keras.pipeline.epochs import BatchPlan, EpochPlanner
from remote_keras.pipeline.prefetch import Prefetcher, WorkerPools
from remote_keras.pipeline.stats import HandoffLog


class SchedulingMixin:
    """Starts batch `(epoch, position)` on the pools, with look-ahead (callers hold `lock`)."""

    lock: Any
    index_array: Any
    handoffs: HandoffLog
    _planner: EpochPlanner
    _prefetcher: Prefetcher
    engine: ReadEngine
    _pools: WorkerPools
    _filepaths: Sequence[str]

    if TYPE_CHECKING:  # defined by `StateMixin`, `RemoteBatchCore` and the fronts

        def _current_epoch(self) -> int: ...

        def _image_spec(self) -> batches.ImageSpec: ...

        def batch_pixels(self) -> batches.Pixels: ...

    def _start(self, epoch: int, index: int) -> tuple[Future, bool]:
        return self._prefetcher.take((epoch, index), self._task_maker(epoch, index))

    def _task(self, epoch: int, index: int):
        plan = self._planner.plan(epoch, index)
        if epoch == self._current_epoch():
            self.index_array = self._planner.order(epoch)
        engine, pools, paths = self.engine, self._pools, self._filepaths
        spec, pixels = self._image_spec(), self.batch_pixels()
        return lambda: batches.load(engine, pools, paths, spec, pixels, plan, epoch)

    def _look_ahead(self, keys: list[tuple[int, int]]) -> None:
        with self.lock:
            for epoch, index in keys:
                self._prefetcher.ahead((epoch, index), self._task_maker(epoch, index))

    def _task_maker(self, epoch: int, index: int):
        return lambda: self._task(epoch, index)

    def _result(self, future: Future, prefetched: bool, ahead: list, asked: float):
        """Waits for a batch, starting the `ahead` batches meanwhile (or after, if it is cold).

        A batch that was not started ahead of time goes first, so that the
        look-ahead does not compete with it (time to first batch).
        """
        if prefetched:
            self._look_ahead(ahead)
        with self.engine.stats.busy("wait_s"):
            plan, batch_x = future.result()
        self.engine.stats.add(batches=1)
        if not prefetched:
            self._look_ahead(ahead)
        batch = self._assemble(plan, batch_x)
        self.handoffs.record(asked, time.perf_counter())
        return batch

    def _assemble(self, plan: BatchPlan, batch_x: np.ndarray) -> batches.Batch:
        return batches.assemble(self, plan, batch_x)
