"""`Scheduler`: what Keras asks of an iterator, batch by batch and epoch by epoch.

Keras's index to a batch on the iterator's pools, the batches asked next read
ahead, and the passes Keras begins and ends (`EpochClock` tells epoch ends from
resets).
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from remote_keras.keras_agnostic.pixels import keras_pixels
from remote_keras.keras_lines import distribution, keras3_16
from remote_keras.keras_lines.epoch_clock import built_model
from remote_keras.pipeline import batches
from remote_keras.pipeline.epochs import BatchPlan
from remote_keras.storage import saving


class Scheduler:
    """Starts batch `(epoch, position)` of an iterator on its pools, with look-ahead.

    A view made for each call of an entry point (it holds nothing of its
    own): the batch's files, image settings, pixels and labels are the
    iterator's as they are now (Keras lets users set them).

    Args:
        iterator: The iterator whose batches it starts.
    """

    def __init__(self, iterator: Any) -> None:
        self.it = iterator

    def batch_at(self, idx: int, asked: float, stacklevel: int):
        """Keras's `iterator[idx]`, asked at `asked` (`time.perf_counter()`).

        Skips' warnings name the line `stacklevel` above this call (`skips.warn`).
        """
        it = self.it
        length, clock = it._length(), it._clock
        with it.lock:
            if clock.held_here():
                self.end_epochs(clock.held_here(), stacklevel=stacklevel + 1)
            # Keras's index `idx` is batch `order[idx]` of the epoch: the same, except in an
            # epoch resumed mid-way, whose indices cover only the batches it has left.
            clock.note_asked(idx)  # before the order: Keras 3.16's tells `fit(shuffle=...)`
            epoch, order = clock.epoch, clock.order(length)
            position = clock.position(idx, length)
            it.total_batches_seen += 1
            clock.handed += clock.in_pass
            if clock.handed == 2:  # the pass goes on: its first reads are not carried
                it.engine.fetcher.carried.stop_recording()
            kept = clock.take((epoch, position))
            if kept is None:
                previous, it._last_requested = it._last_requested, idx
                future, prefetched = self.start(epoch, position)
        if kept is not None:
            it.handoffs.record(asked, time.perf_counter())
            return kept
        keys = self.ahead(epoch, order, idx, previous, length)
        with it.lock:  # a batch kept from before the pass is not read again
            keys = [key for key in keys if key not in clock.kept]
        batch = self.result(future, prefetched, keys, asked, stacklevel + 1)
        with it.lock:
            clock.keep((epoch, position), batch)  # read outside a pass: kept for the pass
        return batch

    def next_batch(self, asked: float, stacklevel: int):
        """Keras's `next(iterator)`: the stream's next batch (`batch_at`'s `stacklevel`)."""
        it = self.it
        with it.lock:
            length = max(it._length(), 1)
            epoch, index = divmod(it._stream_position, length)
            it._stream_position += 1
            it.total_batches_seen += 1
            it.batch_index = (index + 1) % length
            future, prefetched = self.start(epoch, index)
            position = it._stream_position
        steps = range(it.options.prefetch_batches)
        keys = [divmod(position + step, length) for step in steps]
        return self.result(future, prefetched, keys, asked, stacklevel + 1)

    def begin_pass(self) -> None:
        """Keras's `on_epoch_begin()`; refuses to feed tf.distribute's splitting a shard.

        Raises:
            ValueError: The iterator reads one shard of several, under
                multi-worker tf.distribute (`split_again_message`).
        """
        it = self.it
        askers = keras3_16.keras_askers(it.workers, it.use_multiprocessing)
        with it.lock:
            it._clock.begin(askers)
            it.engine.fetcher.carried.record()
        shard = it.shard
        if shard.count > 1 and it._keras_on_tensorflow() and distribution.in_tf_multi_worker():
            raise ValueError(split_again_message(shard))

    def end_pass(self, stacklevel: int) -> None:
        """Keras's `on_epoch_end()`: ends the epoch if a pass ends (`EpochClock.end`'s rule).

        Skips' summaries name the line `stacklevel` above this call.
        """
        it = self.it
        with it.lock:
            clock = it._clock
            ended = clock.end(it._length())
            if ended:  # a pass that handed out only its first batch carries its reads
                it.engine.fetcher.carried.end_pass(clock.handed == 1)
                built = clock.cut_short and clock.handed == 1  # Keras built a model from it
                from_build = built_model(clock, it.keras_line, it._keras_on_tensorflow())
                self.end_epochs(0 if from_build else ended, built, stacklevel + 1)
            elif it.options.on_error == "skip":  # held: a loop of one's own still hears now
                it.engine.skips.warn_summary(it._skips_listed_before(), stacklevel=stacklevel + 1)

    def end_epochs(self, count: int, carried: bool = False, stacklevel: int = 2) -> None:
        """Moves `count` epochs on (the caller holds the lock); `carried`: reads go on.

        The skips' summary names the line `stacklevel` above this call (`skips.warn`).
        """
        it = self.it
        it._clock.advance(count)
        if it.options.on_error == "skip":  # counts what `skipped` lists
            it.engine.skips.warn_summary(it._skips_listed_before(), stacklevel=stacklevel + 1)
        it._last_requested = None
        it._local.prefetcher.clear()
        it.index_array = it._planner.order(it._clock.epoch)
        if count and not carried:  # the next epoch's reads count from here (`InputStallCallback`)
            it.handoffs.epoch_start = it.stats

    def end_epoch(self) -> None:
        """Ends the epoch whatever the passes (for `to_tf_dataset`, which Keras never begins)."""
        with self.it.lock:
            self.end_epochs(1)

    def start(self, epoch: int, index: int) -> tuple[Future, bool]:
        """The future of batch `(epoch, index)`, and whether it was started ahead of time."""
        prefetcher = self.it._local.prefetcher
        future = prefetcher.claim((epoch, index))
        if future is not None:
            return future, True
        return prefetcher.start(self.task(epoch, index)), False

    def task(self, epoch: int, index: int):
        """What builds batch `(epoch, index)` on a pool: `() -> (plan, images)`."""
        it = self.it
        plan = it._planner.plan(epoch, index)
        if epoch == it._clock.epoch:
            it.index_array = it._planner.order(epoch)
        engine, pools, paths = it.engine, it._local.pools, it._filepaths
        spec, batch_pixels = image_spec(it), pixels(it)
        ref = weakref.ref(it)  # queued work must not keep a dropped iterator alive

        def build() -> tuple[BatchPlan, np.ndarray]:
            # Held while the batch loads: collected meanwhile, the iterator's finalizer
            # would shut its pools down from this pool's thread (a deadlock in `submit`).
            iterator = ref()
            if iterator is None:
                raise RuntimeError("The iterator was garbage-collected.")
            try:
                return batches.load(engine, pools, paths, spec, batch_pixels, plan, epoch)
            finally:
                del iterator

        return build

    def look_ahead(self, keys: list[tuple[int, int]]) -> None:
        """Starts the batches `keys` that are not started yet."""
        prefetcher = self.it._local.prefetcher
        with self.it.lock:
            for key in keys:
                if prefetcher.wants(key):
                    prefetcher.ahead(key, self.task(*key))

    def result(self, future: Future, prefetched: bool, ahead: list, asked: float, stacklevel: int):
        """Waits for a batch, starting the `ahead` batches meanwhile (or after, if it is cold).

        A batch that was not started ahead of time goes first, so that the
        look-ahead does not compete with it (time to first batch). Its skips'
        warnings name the line `stacklevel` above the call (`skips.warn`).
        """
        engine = self.it.engine
        if prefetched:
            self.look_ahead(ahead)
        with engine.stats.busy("wait_s"):
            plan, batch_x = future.result()
        engine.stats.add(batches=1)
        # This batch's skips (and those read ahead of it).
        engine.skips.warn_pending(stacklevel + 1)
        if not prefetched:
            self.look_ahead(ahead)
        batch = batches.assemble(targets(self.it), plan, batch_x, save_to(self.it))
        self.it.handoffs.record(asked, time.perf_counter())
        return batch

    def ahead(
        self, epoch: int, order: Sequence[int], idx: int, previous: int | None, length: int
    ) -> list[tuple[int, int]]:
        """The batches to build ahead after index `idx`: those Keras asks for next.

        In a pass of Keras 3.16, what its order rule says it asks for next
        (once the pass told `fit(shuffle=...)`); in a pass of Keras 3.8 to
        3.15 asked from one thread, the order predicted from Python's
        `random` once two asks followed it; otherwise the next indices if the
        last two asked were in order (outside a pass, after any first one).
        """
        it = self.it
        # With `use_multiprocessing`, Keras's worker processes build the epoch's batches: one
        # built ahead here, or in one of them, would mostly be read again by another.
        if it.use_multiprocessing or os.getpid() != it._home_pid:
            return []
        depth, clock = it.options.prefetch_batches, it._clock
        if it.keras_line.seeds_epochs:
            shard = it.keras_batches or (0, 1)
            with it.lock:
                in_pass = clock.in_pass
                upcoming = clock.upcoming(idx, clock.batches(length), shard)
            if in_pass:  # outside a pass (a loop of one's own), the next indices, below
                return [] if upcoming is None else [(epoch, order[i]) for i in upcoming[:depth]]
        with it.lock:
            in_pass = clock.in_pass
            prediction = clock.prediction
            predicted = None if prediction is None else prediction.after(idx)
        if predicted is not None:  # Keras 3.8-3.15 asking from one thread, as predicted
            return [(epoch, order[i]) for i in predicted[:depth]]
        if previous is None and in_pass:
            # A pass's first index tells no order, and Keras's JAX and PyTorch trainers build
            # a model from one batch of a pass they abandon: nothing is read ahead for it.
            return []
        if previous is not None and not 0 < idx - previous <= max(2, it.workers):
            return []
        return [(epoch, i) for i in order[idx + 1 : idx + 1 + depth]]


def split_again_message(shard: Any, advice: str = "") -> str:
    """Why a shard fed to Keras's multi-worker `fit` is refused; `advice` is a front's own."""
    return (
        f"This iterator reads shard {shard.index} of {shard.count} (from {shard.source}), but "
        "under multi-worker tf.distribute Keras would split every batch between the workers "
        f"again and train on only 1/{shard.count} of it. Pass `iterator.to_tf_dataset()` "
        "instead (it keeps each worker's shard whole), or `num_shards=1` to read the whole "
        f"dataset on every worker.{advice}"
    )


def targets(it: Any) -> batches.Targets:
    """What the batch's labels are made from (the iterator's settings now)."""
    return batches.Targets(
        it.class_mode,
        getattr(it, "classes", None),
        len(getattr(it, "class_indices", ()) or ()),
        it.dtype,
        getattr(it, "labels", None),
        getattr(it, "sample_weight", None),
    )


def save_to(it: Any) -> batches.SaveTo | None:
    """Where `save_to_dir` writes the batch's images, or `None`."""
    if not it.save_to_dir:
        return None
    pools = it._local.pools
    target = saving.SaveTarget(
        it.save_to_dir,
        it.save_format,
        it.filesystems,
        it.options.retry_policy,
        lambda: pools.get("fetch"),
    )
    return batches.SaveTo(target, it.save_prefix, it.data_format, pixels(it).floatx)


def image_spec(it: Any) -> batches.ImageSpec:
    """What each file becomes, from the iterator's settings now (Keras lets users set them)."""
    return batches.ImageSpec(
        tuple(it.image_shape),
        it.dtype,
        it.data_format,
        it.color_mode,
        (it.target_size[0], it.target_size[1]),
        it.interpolation,
        it.keep_aspect_ratio,
        it.options.jpeg_draft,
    )


def pixels(it: Any) -> batches.Pixels:
    """Keras's `floatx` and the generator's transform and standardization, as they are now."""
    api, generator = it.keras_api, it.image_data_generator
    return keras_pixels(generator, api.floatx(), api.ImageDataGenerator)
