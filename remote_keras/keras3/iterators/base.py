"""`RemoteBatchMixin`: Keras's entry points over remote_keras's planner, fetcher and thread pools.

See the package docstring (`remote_keras.keras3.iterators`) for what changes from stock Keras.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from types import FrameType
from typing import Any

import numpy as np
from keras.src import backend
from keras.src.legacy.preprocessing import image as keras_image
from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter
from keras.src.trainers.epoch_iterator import EpochIterator

from remote_keras import errors
from remote_keras.keras3 import resume, workers
from remote_keras.keras3.tfdata import to_tf_dataset
from remote_keras.pipeline import batches, sharding
from remote_keras.pipeline.epochs import BatchPlan, EpochPlanner
from remote_keras.pipeline.fetching import Fetcher
from remote_keras.pipeline.options import LoaderOptions, LoaderOverrides
from remote_keras.pipeline.prefetch import Prefetcher, WorkerPools
from remote_keras.pipeline.skips import SkipLog
from remote_keras.pipeline.stats import HandoffLog, LoaderStats, StatsRecorder
from remote_keras.storage import locations, presign
from remote_keras.storage.cache import DiskCache
from remote_keras.storage.lakefs import LakeFSPin, Pinner
from remote_keras.storage.loaders import choose_loader, make_loader


class RemoteBatchMixin(keras_image.Iterator):
    """Batch loading through a loader and thread pools, for file-based iterators.

    Mixed into `DataFrameIterator` and `DirectoryIterator` ahead of Keras's
    classes; it replaces `__getitem__`, `__next__`, `on_epoch_end` and
    `_get_batches_of_transformed_samples`.
    """

    # Set by Keras's `__init__` (or `listing.init_from_listing`) in the subclasses.
    directory: Any
    filenames: list[str]
    seed: int | None
    _filepaths: list[str]

    def _init_remote(self, options: LoaderOptions | None, overrides: LoaderOverrides) -> None:
        self.options = (options or LoaderOptions()).merged(overrides)
        opts = self.options
        self.shard = sharding.resolve(opts.num_shards, opts.shard_index, opts.shard_remainder)
        self._planner = EpochPlanner(self, self.shard)
        self.filesystems = locations.FileSystems(opts.storage_options)
        timeout_s = opts.retry_policy.timeout_s  # "auto": the loader is set in _finish_init
        self.loader = make_loader(opts.loader, opts.storage_options, timeout_s)
        self.loader_choice = "given" if callable(opts.loader) else str(opts.loader)
        cache = opts.cache_dir
        self.cache = DiskCache(cache, opts.cache_max_bytes) if cache is not None else None
        self._stats = StatsRecorder()
        self._fetcher = Fetcher(
            self.loader, opts.retry_policy, self.cache, self._stats, opts.verify_checksums
        )
        self._pinner = Pinner(self.filesystems)
        self._known_paths: dict[str, str] = {}  # filename -> path, filled by validation
        self._skips = SkipLog()
        self.handoffs = HandoffLog()
        self._per_process_state()
        self._epoch = 0
        self._epoch_begun = False  # `on_epoch_begin()` seen since the epoch started
        # Batches Keras read to infer the tensor spec before the epoch began, handed out again
        # when the epoch asks for them; copies in worker processes get them too.
        self._peeked: dict[tuple[int, int], Any] = {}
        self._stream_position = 0
        self._last_requested: int | None = None
        self._resume: resume.Resumption | None = None  # the rest of an interrupted epoch
        self._read_yet = False  # a BackupAndRestore may claim it before its first read
        self._home_pid = os.getpid()  # pickled: a copy knows it runs in another process

    def _finish_init(self) -> None:
        """Runs after Keras's `__init__`: URL-aware paths, shards and `PyDataset` knobs."""
        if self.shard.count > 1 and self.shuffle and self.seed is None:
            self.seed = 0  # every worker must draw the same permutation
            warnings.warn(
                f"Reading shard {self.shard.index} of {self.shard.count} "
                f"(from {self.shard.source}) with shuffle=True and no seed: using seed=0 so "
                "that all workers shuffle alike. Pass `seed=` to choose another.",
                stacklevel=3,
            )
        self._filepaths = [self._path_of(name) for name in self.filenames]
        self._known_paths = {}
        if self.options.loader == "auto":
            read = self._filepaths[0] if self._filepaths else str(self.directory or "")
            self.loader, self.loader_choice = choose_loader(
                read, self.options.storage_options, self.options.retry_policy.timeout_s
            )
            self._fetcher.loader = self.loader
        presign.expect(self.loader, self._filepaths)  # lakeFS: addresses listed ahead of reads
        # Keras's iterators do not forward these to `PyDataset.__init__`.
        self.workers = self.options.workers
        self.use_multiprocessing = self.options.use_multiprocessing
        self.max_queue_size = self.options.max_queue_size

    def _path_of(self, filename: str) -> str:
        """The path or URL read for `filename`; lakeFS refs pinned to their commit."""
        path = self._known_paths.get(filename)
        if path is None:
            path = self._pinner.pin(locations.join(self.directory, filename))
        return path

    # ------------------------------------------------------------------ processes

    def _per_process_state(self) -> None:
        """Fresh lock, pools and look-ahead: for a new iterator, a fork, or an unpickled copy."""
        opts = self.options
        self.lock = threading.Lock()
        self._pid = os.getpid()
        ref = weakref.ref(self)  # the pools' idle timer must not keep the iterator alive

        def when_idle() -> None:
            iterator = ref()
            if iterator is not None:
                iterator._release_clients()

        self._pools = WorkerPools(
            opts.prefetch_batches + 2, opts.max_in_flight, opts.decode_workers, on_idle=when_idle
        )
        self._prefetcher = Prefetcher(self._pools, opts.prefetch_batches)
        self._finalizer = weakref.finalize(self, self._pools.close)
        workers.track(self, opts.use_multiprocessing)  # fork safety of Keras's worker processes

    def _ensure_process(self) -> None:
        """After `fork`, the parent's threads, futures and lock holders do not exist here."""
        if self._pid != os.getpid():
            self._per_process_state()

    _PROCESS_LOCAL = (
        "lock", "_pools", "_prefetcher", "_finalizer", "index_generator", "_pid"
    )  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:
        """Pickles the configuration and data, not threads (for `use_multiprocessing=True`)."""
        return {k: v for k, v in self.__dict__.items() if k not in self._PROCESS_LOCAL}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._read_yet = True  # copies in other processes never claim a backup
        self.index_generator = self._flow_index()
        self._per_process_state()

    # ------------------------------------------------------------------ public state

    def __len__(self) -> int:
        return self._planner.batches()

    @property
    def num_batches(self) -> int:
        """Batches Keras's `fit` reads in this pass: `len(self)`, or what a resumed epoch has left.

        Keras's epoch loop keeps counting `len(self)` steps per epoch (a
        resumed epoch ends early when its batches run out); the generators
        that feed it read this property at the start of every pass.
        """
        self._before_first_read()  # `fit` asks this before reading (JAX reads through a generator)
        pending = self._resume
        if pending is None or pending.epoch != self._epoch or _called_by_epoch_iterator():
            return len(self)
        return len(pending.positions)

    @property
    def epoch(self) -> int:
        """The epoch (from 0) whose batches `iterator[i]` returns now."""
        return self._epoch

    @property
    def stats(self) -> LoaderStats:
        """Running statistics: images, bytes, requests, retries, cache hits, time waiting."""
        return dataclasses.replace(
            self._stats.snapshot(), skipped=len(self.skipped), loader=self.loader_choice
        )

    @property
    def skipped(self) -> list[tuple[str, str]]:
        """`(url, reason)` of every sample dropped with `on_error="skip"`, oldest first.

        Includes those skipped in Keras's worker processes (`use_multiprocessing=True`).
        """
        return self._skips.records()

    @property
    def retries_made(self) -> int:
        """Retries of transient failures so far, in this process."""
        return self._stats.snapshot().retries

    @property
    def lakefs_pins(self) -> list[LakeFSPin]:
        """The lakeFS commits this iterator reads, one per `(repository, ref)` requested."""
        return list(self._pinner.pins.values())

    def set_epoch(self, epoch: int) -> None:
        """Makes `iterator[i]` and `next()` return the batches of `epoch` (from 0).

        For `fit(initial_epoch=k)`: call `iterator.set_epoch(k)` first, and
        epoch `k` reads epoch `k`'s order and augmentation (Keras does not tell
        the iterator which epoch it trains).

        Args:
            epoch: The epoch to read next.
        """
        self._ensure_process()
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._go_to(epoch, 0, None)

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
        with self.lock:
            length = max(len(self), 1)
            if epoch is None:
                epoch = self._epoch
                if batch is None and self._stream_position:
                    epoch, batch = divmod(self._stream_position, length)
            return {
                "format": resume.STATE_FORMAT,
                "epoch": int(epoch),
                "batch": int(batch or 0),
                "seed": self.seed,
                "shuffle": bool(self.shuffle),
                "batch_size": int(self.batch_size),
                "shard": [self.shard.index, self.shard.count],
                "lakefs_pins": [dataclasses.asdict(pin) for pin in self.lakefs_pins],
                "fingerprint": resume.fingerprint(self),
                "directory": errors.redact(str(self.directory)),
            }

    def load_state_dict(self, state: dict[str, Any], fit_random_state: tuple | None = None) -> None:
        """Continues the stream `state` was saved from: same data, epoch and position.

        lakeFS refs are read at the commits of `state` even if a branch moved
        since (a folder is listed again at that commit).

        Args:
            state: A dict from `state_dict()`.
            fit_random_state: When `fit(shuffle=True)` drew the interrupted
                epoch's batch order, Python's `random` state it drew from
                (`random.getstate()`): the remaining batches are then returned
                in the order `fit` asks for them once `random` is set to that
                state again. By default, index `i` of the interrupted epoch
                returns its `state["batch"] + i`-th batch.

        Raises:
            ValueError: The state was saved from different data (another file
                list, seed, batch size or shard), naming what differs.
        """
        self._ensure_process()
        self._repin([LakeFSPin(**pin) for pin in state.get("lakefs_pins", [])])
        resume.check_compatible(self, state)
        epoch, done = int(state["epoch"]), int(state["batch"])
        shuffled = fit_random_state is not None
        pending = resume.fit_resumption(epoch, done, len(self), shuffled, fit_random_state)
        self._go_to(epoch, done, pending if done else None)

    def _go_to(self, epoch: int, done: int, pending: resume.Resumption | None) -> None:
        with self.lock:
            self._epoch = epoch
            self._epoch_begun = False
            self._last_requested = None
            self._peeked.clear()
            self._prefetcher.clear()
            self._resume = pending
            self._stream_position = epoch * max(len(self), 1) + done
            self.batch_index = done
            self.index_array = self._planner.order(epoch)

    def _repin(self, pins: list[LakeFSPin]) -> None:
        """Reads at `pins`' commits where this iterator pinned the same refs elsewhere."""
        moved = [
            pin for pin in pins
            if (found := self._pinner.pins.get((pin.repository, pin.ref))) is not None
            and found.commit_id != pin.commit_id
        ]  # fmt: skip
        if not moved:
            return
        for pin in moved:
            self._pinner.pins[(pin.repository, pin.ref)] = pin
        self._reread_at_pins()

    def _reread_at_pins(self) -> None:
        """Recomputes the paths read after `_pinner` changed (subclasses may list again)."""
        self._known_paths = {}
        self._filepaths = [self._path_of(name) for name in self.filenames]

    def to_tf_dataset(self) -> Any:
        """Returns the batches of one epoch per pass, as a `tf.data.Dataset`.

        See `remote_keras.keras3.tfdata.to_tf_dataset`.

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

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stops the background threads and closes connections; returns at once.

        Requests in flight finish in the background. The iterator cannot load
        batches afterwards.
        """
        with self.lock:
            self._prefetcher.clear()
        self._finalizer()
        presign.close(self.loader)
        workers.untrack(self)
        self._release_clients()

    def _release_clients(self) -> None:
        """Drops the loader's clients, closing their connections (a read opens new ones)."""
        close = getattr(self.loader, "close", None)
        if self.loader_choice != "given" and callable(close):
            close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ Keras entry points

    def __getitem__(self, idx: int):
        asked = time.perf_counter()
        self._ensure_process()
        self._before_first_read()
        # Keras's index `idx` is batch `order[idx]` of the epoch: the same, except in an epoch
        # resumed mid-way, whose indices cover only the batches it has left.
        pending = self._resume
        order: Sequence[int] = range(len(self))
        if pending is not None and pending.epoch == self._epoch:
            order = pending.positions
        if idx == len(order) and order:
            # Keras's TF backend reads indices 0 and 1 to infer the batches' spec: an epoch
            # resumed with one batch left shows that one again (still kept for the epoch).
            with self.lock:
                again = self._peeked.get((self._epoch, order[-1]))
            if again is not None:
                return again
        if idx >= len(order):
            raise ValueError(
                f"Asked to retrieve element {idx}, but the Sequence has length {len(order)}"
            )
        position = order[idx]
        with self.lock:
            self.total_batches_seen += 1
            epoch = self._epoch
            peeked = self._peeked.pop((epoch, position), None)
        if peeked is not None:
            self.handoffs.record(asked, time.perf_counter())
            return peeked
        with self.lock:
            previous, self._last_requested = self._last_requested, idx
            future, prefetched = self._start(epoch, position)
            peek = not self._epoch_begun and _called_by_keras("get_tf_dataset", PyDatasetAdapter)
        in_order = previous is None or 0 < idx - previous <= max(2, self.workers)
        # With `use_multiprocessing`, Keras's worker processes build the epoch's batches: one
        # built ahead here, or in one of them, would mostly be read again by another.
        in_order = in_order and not self.use_multiprocessing and os.getpid() == self._home_pid
        ahead = order[idx + 1 : idx + 1 + self.options.prefetch_batches]
        keys = [(epoch, i) for i in ahead] if in_order else []
        batch = self._result(future, prefetched, keys, asked)
        if peek:
            with self.lock:
                if epoch == self._epoch:
                    self._peeked[(epoch, position)] = batch
        return batch

    def __next__(self):
        asked = time.perf_counter()
        self._ensure_process()
        self._before_first_read()
        with self.lock:
            length = max(len(self), 1)
            epoch, index = divmod(self._stream_position, length)
            self._stream_position += 1
            self.total_batches_seen += 1
            self.batch_index = (index + 1) % length
            future, prefetched = self._start(epoch, index)
            position = self._stream_position
        steps = range(self.options.prefetch_batches)
        keys = [divmod(position + step, length) for step in steps]
        return self._result(future, prefetched, keys, asked)

    def _before_first_read(self) -> None:
        if not self._read_yet:
            self._read_yet = True
            resume.claim(self)

    def reset(self) -> None:
        """Makes the next `next()` call start a new epoch, as Keras does."""
        with self.lock:
            length = max(len(self), 1)
            self._stream_position = -(-self._stream_position // length) * length
            self.batch_index = 0

    def on_epoch_begin(self) -> None:
        """Called by Keras's `fit`; refuses to feed tf.distribute's splitting a shard."""
        self._epoch_begun = True
        if (
            self.shard.count > 1
            and backend.backend() == "tensorflow"
            and sharding.in_tf_multi_worker()
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

        Keras's `fit`, `evaluate` and `predict` also call this when they reset
        their epoch iterator before training (after TensorFlow reads batches 0
        and 1 to infer the tensor spec, or JAX one batch to build the model).
        Those calls do not end the epoch, and the batches read for them are
        handed out again, so the first epoch `fit` trains on is epoch 0 and
        each image is read once per epoch.
        """
        self._ensure_process()
        if _called_by_keras("reset", EpochIterator):
            return
        if self.options.on_error == "skip":
            self._skips.warn_summary()
        with self.lock:
            self._epoch += 1
            self._epoch_begun = False
            self._last_requested = None
            self._resume = None
            self._peeked.clear()
            self._prefetcher.clear()
            self.index_array = self._planner.order(self._epoch)

    def _get_batches_of_transformed_samples(self, index_array):
        """Loads the samples `index_array`, drawing transforms from the global `np.random`."""
        plan = self._planner.draw(np.asarray(index_array), seed=None)
        return self._assemble(*batches.load(self, plan))

    def _assemble(self, plan: BatchPlan, batch_x: np.ndarray) -> batches.Batch:
        return batches.assemble(self, plan, batch_x)

    # ------------------------------------------------------------------ scheduling

    def _start(self, epoch: int, index: int) -> tuple[Future, bool]:
        return self._prefetcher.take((epoch, index), self._task_maker(epoch, index))

    def _task(self, epoch: int, index: int):
        plan = self._planner.plan(epoch, index)
        if epoch == self._epoch:
            self.index_array = self._planner.order(epoch)
        ref = weakref.ref(self)

        def build() -> tuple[BatchPlan, np.ndarray]:
            iterator = ref()
            if iterator is None:
                raise RuntimeError("The iterator was garbage-collected.")
            return batches.load(iterator, plan)

        return build

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
        with self._stats.busy("wait_s"):
            plan, batch_x = future.result()
        self._stats.add(batches=1)
        if not prefetched:
            self._look_ahead(ahead)
        batch = self._assemble(plan, batch_x)
        self.handoffs.record(asked, time.perf_counter())
        return batch


def _called_by_epoch_iterator() -> bool:
    """Whether a Keras `EpochIterator` (counting its steps per epoch) asks, a few frames up."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if isinstance(frame.f_locals.get("self"), EpochIterator):
            return True
        frame = frame.f_back
    return False


def _called_by_keras(method: str, owner: type) -> bool:
    """Whether `owner.method`, a few frames up, is what calls the iterator.

    Tells two calls apart that Keras makes with no argument to say so:
    `PyDatasetAdapter.get_tf_dataset()` reading batches 0 and 1 to infer the
    tensor spec, and `EpochIterator.reset()` calling `on_epoch_end()` before
    the first epoch (and, in `evaluate`, before every pass), which ends no
    epoch.
    """
    frame: FrameType | None = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code.co_name == method and isinstance(frame.f_locals.get("self"), owner):
            return True
        frame = frame.f_back
    return False
