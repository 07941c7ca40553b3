"""Building batches on the iterator's pools, and the ones Keras asks for next ahead of time."""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from remote_keras.keras_agnostic.pixels import keras_pixels
from remote_keras.keras_lines import KerasLine
from remote_keras.keras_lines.epoch_clock import EpochClock
from remote_keras.keras_lines.keras3_16 import EpochSeededReplay
from remote_keras.pipeline import batches
from remote_keras.pipeline.engine import ReadEngine
from remote_keras.pipeline.epochs import BatchPlan, EpochPlanner
from remote_keras.pipeline.options import LoaderOptions
from remote_keras.pipeline.prefetch import Prefetcher, WorkerPools
from remote_keras.pipeline.stats import HandoffLog
from remote_keras.storage import saving


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
    _clock: EpochClock
    _home_pid: int
    options: LoaderOptions
    keras_batches: tuple[int, int] | None
    keras_line: KerasLine
    # The front's Keras: `floatx()`, `image_data_format()`, `print_msg(message)`, and its
    # `Iterator` and `ImageDataGenerator` classes (a module or a namespace, set by the front).
    keras_api: Any
    image_data_generator: Any
    workers: int
    use_multiprocessing: bool

    if TYPE_CHECKING:  # defined by `StateMixin`, `RemoteBatchCore` and the fronts

        def _current_epoch(self) -> int: ...

    def batch_pixels(self) -> batches.Pixels:
        """Keras's `floatx` and the generator's transform and standardization, as they are now.

        Returns:
            The `Pixels` of the next batch (`remote_keras.keras_agnostic.pixels`).
        """
        api, generator = self.keras_api, self.image_data_generator
        return keras_pixels(generator, api.floatx(), api.ImageDataGenerator)

    def _start(self, epoch: int, index: int) -> tuple[Future, bool]:
        future = self._prefetcher.claim((epoch, index))
        if future is not None:
            return future, True
        return self._prefetcher.start(self._task(epoch, index)), False

    def _task(self, epoch: int, index: int):
        plan = self._planner.plan(epoch, index)
        if epoch == self._current_epoch():
            self.index_array = self._planner.order(epoch)
        engine, pools, paths = self.engine, self._pools, self._filepaths
        spec, pixels = self._image_spec(), self.batch_pixels()
        ref = weakref.ref(self)  # queued work must not keep a dropped iterator alive

        def build() -> tuple[BatchPlan, np.ndarray]:
            # Held while the batch loads: collected meanwhile, the iterator's finalizer
            # would shut its pools down from this pool's thread (a deadlock in `submit`).
            iterator = ref()
            if iterator is None:
                raise RuntimeError("The iterator was garbage-collected.")
            try:
                return batches.load(engine, pools, paths, spec, pixels, plan, epoch)
            finally:
                del iterator

        return build

    def _look_ahead(self, keys: list[tuple[int, int]]) -> None:
        with self.lock:
            for key in keys:
                if self._prefetcher.wants(key):
                    self._prefetcher.ahead(key, self._task(*key))

    def _result(self, future: Future, prefetched: bool, ahead: list, asked: float, stacklevel: int):
        """Waits for a batch, starting the `ahead` batches meanwhile (or after, if it is cold).

        A batch that was not started ahead of time goes first, so that the
        look-ahead does not compete with it (time to first batch). Its skips'
        warnings name the line `stacklevel` above the call (`skips.warn`).
        """
        if prefetched:
            self._look_ahead(ahead)
        with self.engine.stats.busy("wait_s"):
            plan, batch_x = future.result()
        self.engine.stats.add(batches=1)
        # This batch's skips (and those read ahead of it).
        self.engine.skips.warn_pending(stacklevel + 1)
        if not prefetched:
            self._look_ahead(ahead)
        batch = batches.assemble(self._batch_targets(), plan, batch_x, self._batch_save_to())
        self.handoffs.record(asked, time.perf_counter())
        return batch

    def _batch_targets(self) -> batches.Targets:
        """What the batch's labels are made from (the iterator's settings now)."""
        it: Any = self
        return batches.Targets(
            it.class_mode,
            getattr(it, "classes", None),
            len(getattr(it, "class_indices", ()) or ()),
            it.dtype,
            getattr(it, "labels", None),
            getattr(it, "sample_weight", None),
        )

    def _batch_save_to(self) -> batches.SaveTo | None:
        """Where `save_to_dir` writes the batch's images, or `None`."""
        it: Any = self
        if not it.save_to_dir:
            return None
        target = saving.SaveTarget(
            it.save_to_dir,
            it.save_format,
            it.filesystems,
            it.options.retry_policy,
            lambda: it._pools.get("fetch"),
        )
        floatx = it.batch_pixels().floatx
        return batches.SaveTo(target, it.save_prefix, it.data_format, floatx)

    def _ahead(
        self, epoch: int, order: Sequence[int], idx: int, previous: int | None, length: int
    ) -> list[tuple[int, int]]:
        """The batches to build ahead after index `idx`: those Keras asks for next.

        In a pass of Keras 3.16, what its order rule says it asks for next
        (once the pass told `fit(shuffle=...)`); in a pass of Keras 3.8 to
        3.15 asked from one thread, the order predicted from Python's
        `random` once two asks followed it; otherwise the next indices if the
        last two asked were in order (outside a pass, after any first one).
        """
        # With `use_multiprocessing`, Keras's worker processes build the epoch's batches: one
        # built ahead here, or in one of them, would mostly be read again by another.
        if self.use_multiprocessing or os.getpid() != self._home_pid:
            return []
        depth = self.options.prefetch_batches
        if self.keras_line.seeds_epochs:
            shard = self.keras_batches or (0, 1)
            with self.lock:
                in_pass = self._clock.in_pass
                upcoming = self._clock.upcoming(idx, self._clock.batches(length), shard)
            if in_pass:  # outside a pass (a loop of one's own), the next indices, below
                return [] if upcoming is None else [(epoch, order[i]) for i in upcoming[:depth]]
        with self.lock:
            in_pass = self._clock.in_pass
            prediction = self._clock.prediction
            predicted = None if prediction is None else prediction.after(idx)
        if predicted is not None:  # Keras 3.8-3.15 asking from one thread, as predicted
            return [(epoch, order[i]) for i in predicted[:depth]]
        if previous is None and in_pass:
            # A pass's first index tells no order, and Keras's JAX and PyTorch trainers build
            # a model from one batch of a pass they abandon: nothing is read ahead for it.
            return []
        if previous is not None and not 0 < idx - previous <= max(2, self.workers):
            return []
        return [(epoch, i) for i in order[idx + 1 : idx + 1 + depth]]

    def _image_spec(self) -> batches.ImageSpec:
        """What each file becomes, from the iterator's settings now (Keras lets users set them)."""
        it: Any = self  # Keras's attributes: image_shape, dtype, color_mode, ...
        return batches.ImageSpec(
            tuple(it.image_shape),
            it.dtype,
            it.data_format,
            it.color_mode,
            (it.target_size[0], it.target_size[1]),
            it.interpolation,
            it.keep_aspect_ratio,
            self.options.jpeg_draft,
        )

    def _replay_fit(self, replay: EpochSeededReplay | None) -> None:
        """Reads every epoch from now on in the steps `replay` maps Keras's indices to."""
        with self.lock:
            self._clock.replay = replay
            self._prefetcher.clear()

    def _read_shuffle(self, fit_pass: int, count: int, trained: int, proven: bool) -> bool | None:
        """Keras 3.16's `fit(shuffle=...)`, from the pass under way (`EpochClock.read_shuffle`).

        Outside a pass (read through `to_tf_dataset()`, Keras orders nothing), proven
        `False`; read, `None`.
        """
        with self.lock:
            if not self._clock.in_pass:
                return False if proven else None
            return self._clock.read_shuffle(fit_pass, count, trained, proven=proven)
