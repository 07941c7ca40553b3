"""`RemoteBatchCore`: Keras's iterator entry points over the planner, fetcher and thread pools.

Both fronts mix it into their Keras's `Iterator` (`remote_keras.keras3.iterators.base`,
`remote_keras.keras2.iterators`); it imports no Keras. See the package docstring of
`remote_keras.keras3.iterators` for what changes from stock Keras.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from remote_keras import errors
from remote_keras.keras_agnostic.files import FilesMixin
from remote_keras.keras_agnostic.lifecycle import LifecycleMixin
from remote_keras.keras_agnostic.scheduling import SchedulingMixin
from remote_keras.keras_agnostic.state import StateMixin
from remote_keras.keras_agnostic.tfdata import to_tf_dataset
from remote_keras.keras_lines import KerasLine, distribution, keras3_16
from remote_keras.keras_lines.epoch_clock import EpochClock, built_model
from remote_keras.keras_lines.resumption import Resumption
from remote_keras.pipeline import batches, sharding
from remote_keras.pipeline.engine import ReadEngine
from remote_keras.pipeline.epochs import EpochPlanner
from remote_keras.pipeline.options import LoaderOptions, LoaderOverrides
from remote_keras.pipeline.stats import HandoffLog


class RemoteBatchCore(StateMixin, FilesMixin, SchedulingMixin, LifecycleMixin):
    """Batch loading through a loader and thread pools, for file-based iterators.

    Mixed into `DataFrameIterator` and `DirectoryIterator` ahead of Keras's
    classes; it replaces `__getitem__`, `__next__`, `on_epoch_end` and
    `_get_batches_of_transformed_samples`. A front overrides
    `_keras_on_tensorflow` (whether its Keras trains on TensorFlow).
    """

    # Set by Keras's `__init__` (or `listing.init_from_listing`) in the subclasses.
    n: int
    total_batches_seen: int
    directory: Any
    _filenames: Sequence[str]
    seed: int | None
    _filepaths: Sequence[str]
    # The front's one epoch tracker (Keras 2's ends its epochs by its own rule).
    _clock_type: type[EpochClock] = EpochClock
    # The Keras line the front runs on (`remote_keras.keras_lines`), set by the front.
    keras_line: KerasLine

    def _init_remote(self, options: LoaderOptions | None, overrides: LoaderOverrides) -> None:
        self.options = (options or LoaderOptions()).merged(overrides)
        opts = self.options
        detecting = opts.num_shards is None and opts.shard_index is None
        # Keras 3.16 may shard the batches itself: then every process holds all the files.
        self.keras_batches = self.keras_line.batch_shard()
        if self.keras_batches is not None and not detecting and opts.num_shards != 1:
            raise ValueError(
                f"Keras's distribution shards the batches of this iterator itself "
                f"(auto_shard_dataset=True, shard {self.keras_batches[0]} of "
                f"{self.keras_batches[1]}): pass no `num_shards`/`shard_index` (or set "
                "`auto_shard_dataset=False` on the distribution to shard the files instead)."
            )
        if self.keras_batches is not None:
            self.shard = sharding.Shard(remainder=opts.shard_remainder)
        else:
            self.shard = sharding.resolve(opts.num_shards, opts.shard_index, opts.shard_remainder)
        self._planner = EpochPlanner(self, self.shard)
        self.engine = ReadEngine(opts)  # "auto": the loader is chosen in _finish_init
        self._known_paths: dict[str, str] = {}  # filename -> path, filled by validation
        self._path_prefix: str | None = None  # set by a listing: path = prefix + filename
        self.handoffs = HandoffLog()
        self._per_process_state()
        # Epoch, passes, batches kept for the pass and a resumed epoch's order; copies in
        # worker processes get them too.
        self._clock = self._clock_type()
        self._prepared: tuple[int, int, Resumption | None] | None = None
        self._stream_position = 0
        self._last_requested: int | None = None
        self.closed = False
        self._home_pid = os.getpid()  # pickled: a copy knows it runs in another process

    def _finish_init(self) -> None:
        """Runs after Keras's `__init__`: URL-aware paths, shards and `PyDataset` knobs."""
        index, count = self.keras_batches or (self.shard.index, self.shard.count)
        if count > 1 and self.shuffle and self.seed is None:
            self.seed = 0  # every worker must draw the same permutation
            source = "Keras's batch sharding" if self.keras_batches else self.shard.source
            warnings.warn(
                f"Reading shard {index} of {count} (from {source}) with shuffle=True and no "
                "seed: using seed=0 so that all workers shuffle alike. Pass `seed=` to "
                "choose another.",
                stacklevel=3,
            )
        self._filepaths = self._read_paths()
        first = self._filepaths[0] if self._filepaths else str(self.directory or "")
        self.engine.choose_loader(first)
        self.engine.expect(self._filepaths)  # lakeFS: addresses listed ahead of reads
        # Keras's iterators do not forward these to `PyDataset.__init__`.
        self.workers = self.options.workers
        self.use_multiprocessing = self.options.use_multiprocessing
        self.max_queue_size = self.options.max_queue_size

    def to_tf_dataset(self) -> Any:
        """Returns the batches of one epoch per pass, as a `tf.data.Dataset`.

        See `remote_keras.keras_agnostic.tfdata.to_tf_dataset`.

        Returns:
            A `tf.data.Dataset`; each complete pass ends the iterator's
            epoch, so the next pass is the next epoch's order.
        """
        return to_tf_dataset(self)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} samples={self.n} batch_size={self.batch_size} "
            f"directory={errors.redact(str(self.directory))!r} loader={self.loader!r}>"
        )

    # ------------------------------------------------------------------ Keras entry points

    def __getitem__(self, idx: int):
        asked = time.perf_counter()
        self._ensure_process()
        length = self._length()
        clock = self._clock
        caller = self._caller_level("__getitem__")  # skips' warnings name `it[i]`'s line
        with self.lock:
            if clock.held_here():
                self._end_epochs(clock.held_here(), stacklevel=caller)
            # Keras's index `idx` is batch `order[idx]` of the epoch: the same, except in an
            # epoch resumed mid-way, whose indices cover only the batches it has left.
            clock.note_asked(idx)  # before the order: Keras 3.16's tells `fit(shuffle=...)`
            epoch, order = clock.epoch, clock.order(length)
            position = clock.position(idx, length)
            self.total_batches_seen += 1
            clock.handed += clock.in_pass
            if clock.handed == 2:  # the pass goes on: its first reads are not carried
                self.engine.fetcher.carried.stop_recording()
            kept = clock.take((epoch, position))
            if kept is None:
                previous, self._last_requested = self._last_requested, idx
                future, prefetched = self._start(epoch, position)
        if kept is not None:
            self.handoffs.record(asked, time.perf_counter())
            return kept
        keys = self._ahead(epoch, order, idx, previous, length)
        with self.lock:  # a batch kept from before the pass is not read again
            keys = [key for key in keys if key not in clock.kept]
        batch = self._result(future, prefetched, keys, asked, caller)
        with self.lock:
            clock.keep((epoch, position), batch)  # read outside a pass: kept for the pass
        return batch

    def __next__(self):
        asked = time.perf_counter()
        self._ensure_process()
        with self.lock:
            length = max(self._length(), 1)
            epoch, index = divmod(self._stream_position, length)
            self._stream_position += 1
            self.total_batches_seen += 1
            self.batch_index = (index + 1) % length
            future, prefetched = self._start(epoch, index)
            position = self._stream_position
        steps = range(self.options.prefetch_batches)
        keys = [divmod(position + step, length) for step in steps]
        return self._result(future, prefetched, keys, asked, self._caller_level("__next__"))

    def _caller_level(self, entry: str) -> int:
        """The `stacklevel` (`skips.warn`) that names the caller of the entry point `entry`.

        Counted from the code, from a method that `entry` calls: 2, plus a
        frame for each override of `entry` that calls ours with `super()`
        (Keras 2's `__getitem__`).
        """
        return 2 + _overrides(type(self), entry)

    def reset(self) -> None:
        """Makes the next `next()` call start a new epoch, as Keras does."""
        with self.lock:
            length = max(self._length(), 1)
            self._stream_position = -(-self._stream_position // length) * length
            self.batch_index = 0

    def on_epoch_begin(self) -> None:
        """Called by Keras before each pass; refuses to feed tf.distribute's splitting a shard."""
        askers = keras3_16.keras_askers(self.workers, self.use_multiprocessing)
        with self.lock:
            self._clock.begin(askers)
            self.engine.fetcher.carried.record()
        if (
            self.shard.count > 1
            and self._keras_on_tensorflow()
            and distribution.in_tf_multi_worker()
        ):
            raise ValueError(
                f"This iterator reads shard {self.shard.index} of {self.shard.count} "
                f"(from {self.shard.source}), but under multi-worker tf.distribute Keras "
                "would split every batch between the workers again and train on only "
                f"1/{self.shard.count} of it. Pass `iterator.to_tf_dataset()` instead (it "
                "keeps each worker's shard whole), or `num_shards=1` to read the whole "
                "dataset on every worker."
            )

    def on_epoch_end(self) -> None:
        """Ends the epoch: the next batches come from the next epoch's order.

        Keras's `fit`, `evaluate` and `predict` also call this when they
        reset their epoch iterator before a pass (after TensorFlow reads
        batches 0 and 1 to infer the tensor spec). Such a call, made outside
        a pass, ends no epoch, and the batches read outside a pass are handed
        out again by the pass: the first epoch `fit` trains on is epoch 0 and
        each image is read once per epoch. See `EpochClock.end` for the rule.
        """
        self._ensure_process()
        caller = self._caller_level("on_epoch_end")  # skips' warnings name this call's line
        with self.lock:
            ended = self._clock.end(self._length())
            if ended:  # a pass that handed out only its first batch carries its reads
                clock = self._clock
                self.engine.fetcher.carried.end_pass(clock.handed == 1)
                built = clock.cut_short and clock.handed == 1  # Keras built a model from it
                from_build = built_model(clock, self.keras_line, self._keras_on_tensorflow())
                ending = 0 if from_build else ended
                self._end_epochs(ending, built, stacklevel=caller)
            elif self.options.on_error == "skip":  # held: a loop of one's own still hears now
                self.engine.skips.warn_summary(self._skips_listed_before(), stacklevel=caller)

    def _keras_on_tensorflow(self) -> bool:
        """Whether the Keras calling this iterator trains on TensorFlow (Keras 2 always does)."""
        return True

    def _end_pass(self) -> None:
        """Ends the epoch whatever the passes (for `to_tf_dataset`, which Keras never begins)."""
        with self.lock:
            self._end_epochs(1)

    def _resuming(self) -> bool:
        """Whether the epoch read now was restored mid-way and has not ended."""
        with self.lock:
            pending = self._clock.resume
            return pending is not None and pending.epoch == self._clock.epoch

    def _end_epochs(self, count: int, carried: bool = False, stacklevel: int = 2) -> None:
        """Moves `count` epochs on (the caller holds the lock); `carried`: reads go on.

        The skips' summary names the line `stacklevel` above this call
        (`skips.warn`): by default the caller of the entry point calling it.
        """
        self._clock.advance(count)
        if self.options.on_error == "skip":  # counts what `skipped` lists
            self.engine.skips.warn_summary(self._skips_listed_before(), stacklevel=stacklevel + 1)
        self._last_requested = None
        self._prefetcher.clear()
        self.index_array = self._planner.order(self._clock.epoch)
        if count and not carried:  # the next epoch's reads count from here (`InputStallCallback`)
            self.handoffs.epoch_start = self.stats

    def _get_batches_of_transformed_samples(self, index_array):
        """Loads the samples `index_array`, drawing transforms from the global `np.random`."""
        plan = self._planner.draw(np.asarray(index_array), seed=None)
        load = batches.load(
            self.engine,
            self._pools,
            self._filepaths,
            self._image_spec(),
            self.batch_pixels(),
            plan,
            self._current_epoch(),
        )
        self.engine.skips.warn_pending(2)  # at the caller's line
        return batches.assemble(self._batch_targets(), *load, self._batch_save_to())


def _overrides(cls: type, name: str) -> int:
    """How many classes before `RemoteBatchCore` in `cls`'s MRO define the method `name`."""
    mro = cls.__mro__
    return sum(name in vars(base) for base in mro[: mro.index(RemoteBatchCore)])
