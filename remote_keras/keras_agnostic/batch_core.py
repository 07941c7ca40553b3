"""`RemoteBatchCore`: Keras's iterator entry points over the planner, fetcher and thread pools.

Both fronts mix it into their Keras's `Iterator` (`remote_keras.keras3.iterators.base`,
`remote_keras.keras2.iterators`); it imports no Keras. It holds the iterator's public
attributes and delegates to its parts: `ProcessLocal` (lock, pools, look-ahead),
`Scheduler` (Keras's index to a batch, and what is read ahead), `Resumable` (its state and
moving it) and `files` (the paths read). See the package docstring of
`remote_keras.keras3.iterators` for what changes from stock Keras.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from remote_keras import errors
from remote_keras.keras_agnostic import files, iterator_setup, scheduling, workers
from remote_keras.keras_agnostic.lifecycle import ProcessLocal
from remote_keras.keras_agnostic.resumable import Resumable
from remote_keras.keras_agnostic.scheduling import Scheduler
from remote_keras.keras_agnostic.tfdata import to_tf_dataset
from remote_keras.keras_lines import KerasLine
from remote_keras.keras_lines.epoch_clock import EpochClock
from remote_keras.keras_lines.resumption import Resumption
from remote_keras.pipeline import batches, sharding
from remote_keras.pipeline.engine import ReadEngine, engine_attribute
from remote_keras.pipeline.epochs import EpochPlanner
from remote_keras.pipeline.options import LoaderOptions
from remote_keras.pipeline.stats import HandoffLog, LoaderStats
from remote_keras.storage import locations
from remote_keras.storage.lakefs import LakeFSPin


class RemoteBatchCore:
    """Batch loading through a loader and thread pools, for file-based iterators.

    Mixed into `DataFrameIterator` and `DirectoryIterator` ahead of Keras's
    classes; it replaces `__getitem__`, `__next__`, `on_epoch_end` and
    `_get_batches_of_transformed_samples`. A front sets `keras_line` and
    `keras_api` and overrides `_keras_on_tensorflow`.
    """

    # Set by `iterator_setup.start`, before Keras's `__init__`.
    options: LoaderOptions
    shard: sharding.Shard
    keras_batches: tuple[int, int] | None  # Keras 3.16 shards the batches itself
    engine: ReadEngine
    handoffs: HandoffLog
    closed: bool
    _local: ProcessLocal
    _planner: EpochPlanner
    _clock: EpochClock
    _known_paths: dict[str, str]
    _path_prefix: str | None
    _prepared: tuple[int, int, Resumption | None] | None
    _stream_position: int
    _last_requested: int | None
    _home_pid: int
    # Set by Keras's `__init__` (or `directory.init_from_listing`), then `iterator_setup.finish`.
    n: int
    batch_size: int
    shuffle: bool
    seed: int | None
    total_batches_seen: int
    batch_index: int
    index_array: Any
    directory: Any
    image_data_generator: Any
    _filenames: Sequence[str]
    _filepaths: Sequence[str]
    max_queue_size: int
    # The front's one epoch tracker (Keras 2's ends its epochs by its own rule).
    _clock_type: type[EpochClock] = EpochClock
    # The Keras line the front runs on (`remote_keras.keras_lines`), set by the front.
    keras_line: KerasLine
    # The front's Keras: `floatx()`, `image_data_format()`, `print_msg(message)`, and its
    # `Iterator` and `ImageDataGenerator` classes (a module or a namespace).
    keras_api: Any
    workers: int
    use_multiprocessing: bool

    loader = engine_attribute("loader")
    loader_choice = engine_attribute("loader_choice")
    cache = engine_attribute("cache")

    def _finish_init(self) -> None:
        """Runs after Keras's `__init__` (`iterator_setup.finish`); fronts add their own."""
        iterator_setup.finish(self)

    # ------------------------------------------------------------------ Keras entry points

    def __len__(self) -> int:
        return self._length()

    def __getitem__(self, idx: int):
        asked = time.perf_counter()
        self._ensure_process()
        return Scheduler(self).batch_at(idx, asked, self._caller_level("__getitem__"))

    def __next__(self):
        asked = time.perf_counter()
        self._ensure_process()
        return Scheduler(self).next_batch(asked, self._caller_level("__next__"))

    def reset(self) -> None:
        """Makes the next `next()` call start a new epoch, as Keras does."""
        with self.lock:
            length = max(self._length(), 1)
            self._stream_position = -(-self._stream_position // length) * length
            self.batch_index = 0

    def on_epoch_begin(self) -> None:
        """Called by Keras before each pass; refuses to feed tf.distribute's splitting a shard."""
        Scheduler(self).begin_pass()

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
        Scheduler(self).end_pass(self._caller_level("on_epoch_end"))

    def _get_batches_of_transformed_samples(self, index_array):
        """Loads the samples `index_array`, drawing transforms from the global `np.random`."""
        plan = self._planner.draw(np.asarray(index_array), seed=None)
        spec, pixels = scheduling.image_spec(self), scheduling.pixels(self)
        paths, epoch = self._filepaths, self._clock.epoch
        load = batches.load(self.engine, self._local.pools, paths, spec, pixels, plan, epoch)
        self.engine.skips.warn_pending(2)  # at the caller's line
        return batches.assemble(scheduling.targets(self), *load, scheduling.save_to(self))

    def to_tf_dataset(self) -> Any:
        """Returns the batches of one epoch per pass, as a `tf.data.Dataset`.

        See `remote_keras.keras_agnostic.tfdata.to_tf_dataset`.

        Returns:
            A `tf.data.Dataset`; each complete pass ends the iterator's
            epoch, so the next pass is the next epoch's order.
        """
        return to_tf_dataset(self)

    # ------------------------------------------------------------------ public state

    @property
    def num_batches(self) -> int:
        """Batches in this pass: `len(self)`, or what an epoch resumed mid-way has left.

        Keras reads it before training to count every epoch's steps, and at
        the start of each pass for the indices it asks for. After
        `load_state_dict` of a state saved mid-epoch it counts the rest of
        that epoch; `BackupAndRestore` restores early and makes it count the
        rest only when training begins, after Keras counted whole epochs.
        """
        return self._clock.batches(self._length())

    @property
    def epoch(self) -> int:
        """The epoch (from 0) whose batches `iterator[i]` returns now, in this thread."""
        return self._clock.epoch + self._clock.held_here()

    @property
    def resumable(self) -> Resumable:
        """What `BackupAndRestore` reads and moves of this iterator (`Resumable`)."""
        return Resumable(self)

    @property
    def stats(self) -> LoaderStats:
        """Running statistics: images, bytes, requests, retries, cache hits, time waiting."""
        engine = self.engine
        return dataclasses.replace(
            engine.stats.snapshot(), skipped=len(self.skipped), loader=engine.loader_choice
        )

    @property
    def skipped(self) -> list[tuple[str, str]]:
        """`(url, reason)` of every sample dropped with `on_error="skip"`, oldest first.

        Includes those skipped in Keras's worker processes (`use_multiprocessing=True`).
        Each sample is listed once per epoch, however often Keras read its batch.
        """
        return self.engine.skips.records(self._skips_listed_before())

    @property
    def retries_made(self) -> int:
        """Retries of transient failures so far, in this process."""
        return self.engine.stats.snapshot().retries

    @property
    def lakefs_pins(self) -> list[LakeFSPin]:
        """The lakeFS commits this iterator reads, one per `(repository, ref)` requested."""
        return list(self.engine.pinner.pins.values())

    def set_epoch(self, epoch: int) -> None:
        """Makes `iterator[i]` and `next()` return the batches of `epoch` (from 0).

        For `fit(initial_epoch=k)`: call `iterator.set_epoch(k)` first, and
        epoch `k` reads epoch `k`'s order and augmentation (Keras does not tell
        the iterator which epoch it trains).

        Args:
            epoch: The epoch to read next.
        """
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.resumable.go_to(epoch)

    def state_dict(self, epoch: int | None = None, batch: int | None = None) -> dict[str, Any]:
        """Returns what `load_state_dict` needs to continue this iterator's stream exactly.

        Args:
            epoch: The epoch in progress; defaults to the iterator's own.
            batch: Batches of that epoch already consumed; defaults to the
                position of `next()`, or 0 when batches are read by index.

        Returns:
            A JSON-serialisable dict: format, epoch, batch, seed, shuffle,
            batch size, shard, lakeFS pins and a fingerprint of the samples.
        """
        return self.resumable.get_state(epoch, batch)

    def load_state_dict(self, state: dict[str, Any], fit_random_state: tuple | None = None) -> None:
        """Continues the stream `state` was saved from: same data, epoch and position.

        lakeFS refs are read at the commits of `state` even if a branch moved
        since (a folder is listed again at that commit). A state saved
        mid-epoch makes `num_batches` count the rest of that epoch at once;
        to resume `fit` mid-epoch use `remote_keras.BackupAndRestore`, which
        lets Keras count whole epochs first. A state saved by any process of
        a run serves all (each continues its own shard), also with another
        number of processes at an epoch's start.

        Args:
            state: A dict from `state_dict()`.
            fit_random_state: When `fit(shuffle=True)` drew the interrupted
                epoch's batch order, Python's `random` state it drew from
                (`random.getstate()`): the remaining batches then come in the
                order `fit` asks for them once `random` is set to it again.
                By default, index `i` of the interrupted epoch returns its
                `state["batch"] + i`-th batch.

        Raises:
            ValueError: The state was saved from different data (another file
                list, seed or batch size), or in the middle of an epoch by a
                run of another number of processes, naming what differs.
        """
        self.resumable.set_state(state, fit_random_state)

    # ------------------------------------------------------------------ files

    @property
    def filesystems(self) -> locations.FileSystems:
        """The fsspec filesystems listings and writes go through."""
        return self.engine.filesystems

    @property
    def filenames(self) -> list[str]:
        """Every file's name relative to `directory`, as Keras's attribute (a list).

        A listed folder's names are held packed (`packed_paths.PackedNames`);
        this list is made at the first access and kept.
        """
        names = self._filenames
        if not isinstance(names, list):
            names = self._filenames = list(names)
        return names

    @filenames.setter
    def filenames(self, names: Sequence[str]) -> None:
        self._filenames = names

    @property
    def filepaths(self) -> list[str]:
        """Every file's full path or URL, as Keras's attribute: a new list on each access."""
        return list(self._filepaths)

    def batch_pixels(self) -> batches.Pixels:
        """Keras's `floatx` and the generator's transform and standardization, as they are now.

        Returns:
            The `Pixels` of the next batch (`remote_keras.keras_agnostic.pixels`).
        """
        return scheduling.pixels(self)

    # ------------------------------------------------------------------ processes

    @property
    def lock(self) -> Any:
        """The lock around choosing samples and drawing their transforms (this process's)."""
        return self._local.lock

    @lock.setter
    def lock(self, value: Any) -> None:  # Keras's `Iterator.__init__` sets its own
        self._local.lock = value

    def _ensure_process(self) -> None:
        """After `fork`, the parent's threads, futures and lock holders do not exist here."""
        if not self._local.is_here():
            self._local = ProcessLocal(self.options, self)
        workers.leave_interrupts_to_parent()  # in a Keras worker process: Ctrl-C is the parent's

    def __getstate__(self) -> dict[str, Any]:
        """Pickles the configuration and data, not threads (for `use_multiprocessing=True`)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_local", "index_generator")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = ProcessLocal(self.options, self)
        self.index_generator = self._flow_index()  # type: ignore[attr-defined]  # Keras's

    def close(self) -> None:
        """Stops the background threads and closes connections; returns at once.

        Requests in flight finish in the background. The iterator cannot load
        batches afterwards.
        """
        self.closed = True
        self._local.close(self)
        self.engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} samples={self.n} batch_size={self.batch_size} "
            f"directory={errors.redact(str(self.directory))!r} loader={self.loader!r}>"
        )

    # ------------------------------------------------------------------ for the parts

    def _length(self) -> int:
        """Batches per epoch; the package's own calls use it, and Keras's `len()`."""
        return self._planner.batches()

    def _caller_level(self, entry: str) -> int:
        """The `stacklevel` (`skips.warn`) that names the caller of the entry point `entry`.

        Counted from the code, from a method that `entry` calls: 2, plus a
        frame for each override of `entry` that calls ours with `super()`
        (Keras 2's `__getitem__`).
        """
        return 2 + _overrides(type(self), entry)

    def _keras_on_tensorflow(self) -> bool:
        """Whether the Keras calling this iterator trains on TensorFlow (Keras 2 always does)."""
        return True

    def _skips_listed_before(self) -> int | None:
        """The epoch whose skips and later ones `skipped` leaves out (`None`: none; a front's)."""
        return None

    def _path_of(self, filename: str) -> str:
        """The path or URL read for `filename`; lakeFS refs pinned to their commit."""
        path = self._known_paths.get(filename)
        if path is None:
            path = self.engine.pin(locations.join(self.directory, filename))
        return path

    def _reread_at_pins(self) -> None:
        """Recomputes the paths read after the engine's pins changed (subclasses may list again)."""
        self._known_paths = {}
        self._path_prefix = None
        self._filepaths = files.read_paths(self)


def _overrides(cls: type, name: str) -> int:
    """How many classes before `RemoteBatchCore` in `cls`'s MRO define the method `name`."""
    mro = cls.__mro__
    return sum(name in vars(base) for base in mro[: mro.index(RemoteBatchCore)])
