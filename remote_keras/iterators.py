"""Keras's file iterators, reading through a pluggable loader on thread pools.

`DataFrameIterator` and `DirectoryIterator` subclass Keras 3's own classes and
keep their arguments, defaults, attributes and messages. What changes:

- every read goes through `loader` (default: fsspec), so URLs work;
- files are fetched and decoded concurrently, and batches asked for in order
  are built ahead of time (`remote_keras.prefetch`);
- `__getitem__` and `__next__` are thread-safe: the lock covers only choosing
  the samples and drawing their random transforms;
- with a `seed`, the sample order and augmentation of batch `b` in epoch `e`
  depend only on `(seed, e, b)`. They equal stock Keras's when batches are
  read in order (`it[0], it[1], ...` in the first epoch, or `next(it)`).
"""

from __future__ import annotations

import dataclasses
import io
import os
import posixpath
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import fsspec
import numpy as np
from keras.src import backend
from keras.src.legacy.preprocessing import image as keras_image
from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter
from keras.src.trainers.epoch_iterator import EpochIterator
from keras.src.utils import image_utils, io_utils

from remote_keras import errors, options, sharding, storage
from remote_keras.cache import DiskCache
from remote_keras.lakefs import LakeFSPin, Pinner
from remote_keras.loaders import FsspecLoader, Loader, ObstoreLoader, decode_image, make_loader
from remote_keras.prefetch import Prefetcher, WorkerPools
from remote_keras.progress import progress_bar
from remote_keras.retry import RetryPolicy, as_policy, fetch_with_retries
from remote_keras.skips import SkipLog
from remote_keras.stats import HandoffLog, LoaderStats, StatsRecorder

# Global `np.random` is shared by every thread; Keras's augmentation draws from it.
_NUMPY_RANDOM_LOCK = threading.Lock()

DEFAULT_WORKERS = 4
DEFAULT_PREFETCH_BATCHES = 4
DEFAULT_MAX_IN_FLIGHT = 128
DEFAULT_CACHE_MAX_BYTES = 10 * 2**30


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """What one batch holds, decided under the iterator's lock before loading."""

    indices: np.ndarray
    transforms: list[dict] | None
    save_hashes: list[int] | None


class RemoteBatchMixin:
    """Batch loading through a loader and thread pools, for file-based iterators.

    Mixed into `DataFrameIterator` and `DirectoryIterator` ahead of Keras's
    classes; it replaces `__getitem__`, `__next__`, `on_epoch_end` and
    `_get_batches_of_transformed_samples`.
    """

    def _init_remote(
        self,
        loader: Loader | None,
        storage_options: dict[str, Any] | None,
        workers: int,
        use_multiprocessing: bool,
        max_queue_size: int,
        prefetch_batches: int,
        max_in_flight: int,
        decode_workers: int | None,
        jpeg_draft: bool = False,
        cache_dir: str | os.PathLike | None = None,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
        retries: RetryPolicy | int | None = None,
        on_error: str = "raise",
        num_shards: int | None = None,
        shard_index: int | None = None,
        shard_remainder: str = "pad",
        progress: bool = True,
    ) -> None:
        self.shard = sharding.resolve(num_shards, shard_index, shard_remainder)
        self.progress = bool(progress)
        options.check(
            loader=loader,
            storage_options=storage_options,
            workers=workers,
            max_queue_size=max_queue_size,
            prefetch_batches=prefetch_batches,
            max_in_flight=max_in_flight,
            decode_workers=decode_workers,
            cache_dir=cache_dir,
            cache_max_bytes=cache_max_bytes,
            retries=retries,
            on_error=on_error,
        )
        self.filesystems = storage.FileSystems(storage_options)
        self.loader = make_loader(loader, storage_options)
        self._pinner = Pinner(self.filesystems)
        self._known_paths: dict[str, str] = {}  # filename -> path, filled by validation
        self._knobs = dict(
            workers=workers, use_multiprocessing=use_multiprocessing, max_queue_size=max_queue_size
        )
        self.prefetch_batches = prefetch_batches
        self.max_in_flight = max_in_flight
        self.jpeg_draft = bool(jpeg_draft)
        self.cache = DiskCache(cache_dir, cache_max_bytes) if cache_dir is not None else None
        self.retries = as_policy(retries)
        self.on_error = on_error
        self._skips = SkipLog()
        self._stats = StatsRecorder()
        self._handoffs = HandoffLog()
        self._skips_warned: set[int] = set()
        self._skips_reported = 0  # skips counted in the last end-of-epoch summary
        self._decode_workers = decode_workers
        self._per_process_state()
        self._epoch = 0
        self._epoch_begun = False  # `on_epoch_begin()` seen since the epoch started
        # Batches Keras read to infer the tensor spec before the epoch began, handed out again
        # when the epoch asks for them; copies in worker processes get them too.
        self._peeked: dict[tuple[int, int], Any] = {}
        self._stream_position = 0
        self._orders: dict[int, np.ndarray] = {}
        self._last_requested: int | None = None
        self._home_pid = os.getpid()  # pickled: a copy knows it runs in another process

    # ------------------------------------------------------------------ processes

    def _per_process_state(self) -> None:
        """Fresh lock, pools and look-ahead: for a new iterator, a fork, or an unpickled copy."""
        self.lock = threading.Lock()
        self._pid = os.getpid()
        self._pools = WorkerPools(
            self.prefetch_batches + 2, self.max_in_flight, self._decode_workers
        )
        self._prefetcher = Prefetcher(self._pools, self.prefetch_batches)
        self._finalizer = weakref.finalize(self, self._pools.close)
        # Batches asked for, by epoch: never built ahead again (`fit(shuffle=True)` asks
        # out of order, and a look-ahead would otherwise re-read batches already consumed).
        self._asked: dict[int, set[int]] = {}

    def _ensure_process(self) -> None:
        """After `fork`, the parent's threads, futures and lock holders do not exist here."""
        if self._pid != os.getpid():
            self._per_process_state()

    _PROCESS_LOCAL = (
        "lock", "_pools", "_prefetcher", "_finalizer", "index_generator", "_pid", "_asked"
    )  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:
        """Pickles the configuration and data, not threads (for `use_multiprocessing=True`)."""
        state = {k: v for k, v in self.__dict__.items() if k not in self._PROCESS_LOCAL}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.index_generator = self._flow_index()
        self._per_process_state()

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
        # Keras's iterators do not forward these to `PyDataset.__init__`.
        self.workers = self._knobs["workers"]
        self.use_multiprocessing = self._knobs["use_multiprocessing"]
        self.max_queue_size = self._knobs["max_queue_size"]

    def _path_of(self, filename: str) -> str:
        """The path or URL read for `filename`; lakeFS refs pinned to their commit."""
        path = self._known_paths.get(filename)
        if path is None:
            path = self._pinner.pin(storage.join(self.directory, filename))
        return path

    def __len__(self) -> int:
        return -(-self.shard.size(self.n) // self.batch_size)

    @property
    def stats(self) -> LoaderStats:
        """Running statistics: images, bytes, requests, retries, cache hits, time waiting."""
        return dataclasses.replace(self._stats.snapshot(), skipped=len(self.skipped))

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

    def to_tf_dataset(self):
        """Returns the batches of one epoch per pass, as a `tf.data.Dataset`.

        For mixing with other `tf.data` pipelines or `tf.distribute` input
        functions. The element spec (`(x, y)`, `(x, y, sample_weight)` or
        `x`, with an unknown batch dimension) is read from batch 0. A
        sharded iterator's dataset has tf.data auto-sharding turned off,
        so under `MultiWorkerMirroredStrategy` every worker trains on its
        own shard, `batch_size` being the global batch.

        Returns:
            A `tf.data.Dataset`; each complete pass ends the iterator's
            epoch, so the next pass is the next epoch's order.
        """
        import tensorflow as tf

        def as_tuple(batch):
            if isinstance(batch, tuple):
                return tuple(tuple(b) if isinstance(b, list) else b for b in batch)
            return batch

        def spec(value):
            if isinstance(value, tuple):
                return tuple(spec(v) for v in value)
            value = np.asarray(value)
            return tf.TensorSpec((None,) + value.shape[1:], tf.as_dtype(value.dtype))

        first = [as_tuple(self[0])]  # read once: for the spec, then as batch 0
        signature = spec(first[0])

        def batches():
            for i in range(len(self)):
                if i == 0 and first:
                    now = time.perf_counter()
                    self._handoffs.record(now, now)
                    yield first.pop()
                else:
                    yield as_tuple(self[i])
            self.on_epoch_end()  # the next pass is the next epoch

        dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
        if self.shard.count == 1:
            return dataset.apply(tf.data.experimental.assert_cardinality(len(self)))
        # The files are split already: tf.distribute must not split the batches again. Its
        # steps per epoch then depend on the replicas, so the cardinality stays unknown.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return dataset.with_options(options)

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

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stops the background threads; the iterator cannot load batches afterwards."""
        with self.lock:
            self._prefetcher.clear()
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ order and plans

    def _epoch_order(self, epoch: int) -> np.ndarray:
        """This shard's sample order in `epoch` (caller holds `self.lock`)."""
        order = self._orders.get(epoch)
        if order is None:
            if not self.shuffle:
                order = np.arange(self.n)
            elif self.seed is not None:
                # Same draw as Keras: `np.random.seed(seed + batches seen); permutation(n)`.
                rng = np.random.RandomState(self.seed + epoch * len(self))
                order = rng.permutation(self.n)
            else:
                with _NUMPY_RANDOM_LOCK:
                    order = np.random.permutation(self.n)
            order = self.shard.select(order)
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = order
        return order

    def _plan(self, epoch: int, index: int) -> BatchPlan:
        """Chooses the samples of batch `index` of `epoch` and draws their transforms."""
        order = self._epoch_order(epoch)
        if epoch == self._epoch:
            self.index_array = order
        indices = order[self.batch_size * index : self.batch_size * (index + 1)]
        seed = None
        if self.seed is not None:  # distinct per shard; `seed + epoch * len + index` unsharded
            seed = self.seed + (epoch * len(self) + index) * self.shard.count + self.shard.index
        # Keras draws the epoch's permutation and then batch 0's transforms from one seed.
        skip_permutation = self.shuffle and index == 0
        return self._draw_plan(indices, seed, skip_permutation)

    def _draw_plan(
        self, indices: np.ndarray, seed: int | None, skip_permutation: bool = False
    ) -> BatchPlan:
        generator = self.image_data_generator
        if not generator and not self.save_to_dir:
            return BatchPlan(indices, None, None)
        with _NUMPY_RANDOM_LOCK:
            saved = np.random.get_state() if seed is not None else None
            try:
                if seed is not None:
                    np.random.seed(seed)
                    if skip_permutation:
                        np.random.permutation(self.n)
                transforms = (
                    [generator.get_random_transform(self.image_shape) for _ in indices]
                    if generator
                    else None
                )
                hashes = [np.random.randint(1e7) for _ in indices] if self.save_to_dir else None
            finally:
                if saved is not None:
                    np.random.set_state(saved)
        return BatchPlan(indices, transforms, hashes)

    # ------------------------------------------------------------------ Keras entry points

    def __getitem__(self, idx: int):
        asked = time.perf_counter()
        if idx >= len(self):
            raise ValueError(
                f"Asked to retrieve element {idx}, but the Sequence has length {len(self)}"
            )
        self._ensure_process()
        with self.lock:
            self.total_batches_seen += 1
            epoch = self._epoch
            peeked = self._peeked.pop((epoch, idx), None)
        if peeked is not None:
            self._handoffs.record(asked, time.perf_counter())
            return peeked
        with self.lock:
            previous, self._last_requested = self._last_requested, idx
            future, prefetched = self._start(epoch, idx)
            peek = not self._epoch_begun and _called_by_keras("get_tf_dataset", PyDatasetAdapter)
        in_order = previous is None or 0 < idx - previous <= max(2, self.workers)
        # With `use_multiprocessing`, Keras's worker processes build the epoch's batches: one
        # built ahead here, or in one of them, would mostly be read again by another.
        in_order = in_order and not self.use_multiprocessing and os.getpid() == self._home_pid
        ahead = range(idx + 1, min(idx + 1 + self.prefetch_batches, len(self)))
        keys = [(epoch, i) for i in ahead] if in_order else []
        batch = self._result(future, prefetched, epoch, idx, keys, asked)
        if peek:
            with self.lock:
                if epoch == self._epoch:
                    self._peeked[(epoch, idx)] = batch
        return batch

    def __next__(self):
        asked = time.perf_counter()
        self._ensure_process()
        with self.lock:
            length = max(len(self), 1)
            epoch, index = divmod(self._stream_position, length)
            self._stream_position += 1
            self.total_batches_seen += 1
            self.batch_index = (index + 1) % length
            future, prefetched = self._start(epoch, index)
            position = self._stream_position
        keys = [divmod(position + step, length) for step in range(self.prefetch_batches)]
        return self._result(future, prefetched, epoch, index, keys, asked)

    def reset(self) -> None:
        """Makes the next `next()` call start a new epoch, as Keras does."""
        with self.lock:
            length = max(len(self), 1)
            self._stream_position = -(-self._stream_position // length) * length
            self.batch_index = 0

    @property
    def epoch(self) -> int:
        """The epoch (from 0) whose batches `iterator[i]` returns now."""
        return self._epoch

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
        with self.lock:
            skipped = self.skipped if self.on_error == "skip" else []
            if len(skipped) > self._skips_reported:
                self._skips_reported = len(skipped)
                warnings.warn(
                    f"{len(skipped)} sample(s) skipped so far (on_error='skip'), "
                    f"last: {skipped[-1][0]}; see `iterator.skipped`.",
                    stacklevel=2,
                )
            self._epoch += 1
            self._epoch_begun = False
            self._last_requested = None
            self._peeked.clear()
            self._prefetcher.clear()
            self.index_array = self._epoch_order(self._epoch)

    def _get_batches_of_transformed_samples(self, index_array):
        """Loads the samples `index_array`, drawing transforms from the global `np.random`."""
        plan = self._draw_plan(np.asarray(index_array), seed=None)
        return self._assemble(*self._load(plan))

    # ------------------------------------------------------------------ loading

    def _start(self, epoch: int, index: int):
        if epoch not in self._asked:
            self._asked = {e: s for e, s in self._asked.items() if e >= epoch - 1}
        self._asked.setdefault(epoch, set()).add(index)
        return self._prefetcher.take((epoch, index), lambda: self._task(epoch, index))

    def _start_ahead(self, epoch: int, index: int) -> None:
        if index in self._asked.get(epoch, ()):
            return
        self._prefetcher.ahead((epoch, index), lambda: self._task(epoch, index))

    def _task(self, epoch: int, index: int):
        plan = self._plan(epoch, index)
        ref = weakref.ref(self)

        def build():
            iterator = ref()
            if iterator is None:
                raise RuntimeError("The iterator was garbage-collected.")
            return iterator._load(plan)

        return build

    def _look_ahead(self, keys: list[tuple[int, int]]) -> None:
        with self.lock:
            for epoch, index in keys:
                self._start_ahead(epoch, index)

    def _result(self, future, prefetched: bool, epoch: int, index: int, ahead: list, asked: float):
        """Waits for a batch, starting the `ahead` batches meanwhile (or after, if it is cold).

        A batch that was not started ahead of time goes first, so that the
        look-ahead does not compete with it (time to first batch).
        """
        if prefetched:
            self._look_ahead(ahead)
        with self._stats.busy("wait_s"):
            try:
                plan, batch_x = future.result()
            except Exception:
                if not prefetched:
                    raise
                # A batch built ahead failed: try once more now, and raise from that attempt.
                with self.lock:
                    build = self._task(epoch, index)
                plan, batch_x = build()
        self._stats.add(batches=1)
        if not prefetched:
            self._look_ahead(ahead)
        batch = self._assemble(plan, batch_x)
        self._handoffs.record(asked, time.perf_counter())
        return batch

    def _load(self, plan: BatchPlan) -> tuple[BatchPlan, np.ndarray]:
        """Fetches and decodes the samples of `plan` into one array.

        Returns:
            `(plan, batch_x)`; with `on_error="skip"`, unreadable samples are
            dropped from both.
        """
        with self._stats.busy("load_s"):
            return self._load_samples(plan)

    def _load_samples(self, plan: BatchPlan) -> tuple[BatchPlan, np.ndarray]:
        filepaths = self.filepaths
        paths = [filepaths[j] for j in plan.indices]
        batch_x = np.empty((len(paths),) + self.image_shape, dtype=self.dtype)  # all rows set below
        if not paths:
            return plan, batch_x
        decode_pool = self._pools.get("decode")
        futures = []
        for i, data in enumerate(self._fetch(paths)):
            transform = plan.transforms[i] if plan.transforms is not None else None
            futures.append(decode_pool.submit(self._sample, data, paths[i], transform))
        kept = []
        try:
            for i, future in enumerate(futures):
                try:
                    batch_x[i] = future.result()
                    kept.append(i)
                except (OSError, ValueError) as exc:
                    if self.on_error != "skip" or isinstance(exc, PermissionError):
                        raise  # credentials are configuration, not a bad sample
                    self._record_skip(paths[i], exc)
        finally:
            for future in futures:
                future.cancel()
        if len(kept) == len(paths):
            return plan, batch_x
        transforms = [plan.transforms[i] for i in kept] if plan.transforms is not None else None
        hashes = [plan.save_hashes[i] for i in kept] if plan.save_hashes is not None else None
        return BatchPlan(plan.indices[kept], transforms, hashes), batch_x[kept]

    def _record_skip(self, path: str, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        self._skips.add(path, reason)
        with self.lock:
            first_in_epoch = self._epoch not in self._skips_warned
            self._skips_warned.add(self._epoch)
        if first_in_epoch:
            warnings.warn(
                f"Skipped an unreadable sample (on_error='skip'): {reason}. Skipped samples "
                "are dropped from their batch and listed in `iterator.skipped`.",
                stacklevel=2,
            )

    def _fetch(self, paths: Sequence[str]) -> list[Any]:
        """Reads `paths` from the disk cache or the loader; exceptions are returned in place."""
        start = time.perf_counter()
        results = self._fetch_cached(paths)
        read = sum(len(r) for r in results if isinstance(r, (bytes, bytearray, memoryview)))
        self._stats.add(fetch_s=time.perf_counter() - start, bytes=read)
        return results

    def _fetch_cached(self, paths: Sequence[str]) -> list[Any]:
        if self.cache is None:
            return self._fetch_uncached(paths)
        results = [self.cache.get(path) for path in paths]
        self._stats.add(cache_hits=sum(r is not None for r in results))
        missing = [i for i, data in enumerate(results) if data is None]
        if missing:
            fetched = self._fetch_uncached([paths[i] for i in missing])
            for i, data in zip(missing, fetched):
                results[i] = data
                if isinstance(data, (bytes, bytearray, memoryview)):
                    self.cache.put(paths[i], data)
        return results

    def _fetch_uncached(self, paths: Sequence[str]) -> list[Any]:
        results, retries = fetch_with_retries(self._fetch_once, paths, self.retries)
        self._stats.add(retries=retries)
        return results

    def _fetch_once(self, paths: list[str]) -> list[Any]:
        """One attempt at every path; failures (and requests past the timeout) returned in place."""
        self._stats.add(requests=len(paths))
        loader = self.loader
        fetch_pool = self._pools.get("fetch")
        if hasattr(loader, "load_many"):
            return loader.load_many(paths, executor=fetch_pool)
        futures = [fetch_pool.submit(loader, path) for path in paths]
        deadline = time.monotonic() + self.retries.timeout_s
        results = []
        for path, future in zip(paths, futures):
            try:
                results.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                future.cancel()
                stalled = TimeoutError(f"no answer within {self.retries.timeout_s} s")
                results.append(errors.translate(path, stalled))
            except Exception as exc:  # noqa: BLE001 - raised by `_sample`, in order
                results.append(errors.translate(path, exc))
        return results

    def _sample(self, data: Any, path: str, transform: dict | None) -> np.ndarray:
        """Decodes one image and applies the generator's transform and standardization."""
        if isinstance(data, BaseException):
            raise data
        start = time.perf_counter()
        try:
            x = self._decode(data, path, transform)
        except BaseException:
            self._stats.add(decode_s=time.perf_counter() - start)
            raise
        self._stats.add(decode_s=time.perf_counter() - start, images=1)
        return x

    def _decode(self, data: Any, path: str, transform: dict | None) -> np.ndarray:
        img = decode_image(
            data,
            path,
            color_mode=self.color_mode,
            target_size=self.target_size,
            interpolation=self.interpolation,
            keep_aspect_ratio=self.keep_aspect_ratio,
            jpeg_draft=self.jpeg_draft,
        )
        x = image_utils.img_to_array(img, data_format=self.data_format)
        if hasattr(img, "close"):
            img.close()
        generator = self.image_data_generator
        if generator and transform is not None:
            x = generator.apply_transform(x, transform)
            x = generator.standardize(x)
        return x

    def _assemble(self, plan: BatchPlan, batch_x: np.ndarray):
        """Saves samples if asked and pairs the images with their labels."""
        indices = plan.indices
        if self.save_to_dir:
            for i, j in enumerate(indices):
                img = image_utils.array_to_img(batch_x[i], self.data_format, scale=True)
                name = f"{self.save_prefix}_{j}_{plan.save_hashes[i]}.{self.save_format}"
                target = storage.join(self.save_to_dir, name)
                if storage.is_url(target):
                    buffer = io.BytesIO()
                    img.save(buffer, format=self.save_format)
                    storage.write_bytes(target, buffer.getvalue(), self.filesystems)
                else:
                    img.save(target)
        if self.class_mode == "input":
            batch_y = batch_x.copy()
        elif self.class_mode in {"binary", "sparse"}:
            batch_y = np.asarray([self.classes[j] for j in indices], dtype=self.dtype)
        elif self.class_mode == "categorical":
            batch_y = np.zeros((len(batch_x), len(self.class_indices)), dtype=self.dtype)
            for i, j in enumerate(indices):
                batch_y[i, self.classes[j]] = 1.0
        elif self.class_mode == "multi_output":
            batch_y = [output[indices] for output in self.labels]
        elif self.class_mode == "raw":
            batch_y = self.labels[indices]
        else:
            return batch_x
        if self.sample_weight is None:
            return batch_x, batch_y
        return batch_x, batch_y, self.sample_weight[indices]

    # ------------------------------------------------------------------ pickling

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} samples={self.n} batch_size={self.batch_size} "
            f"directory={errors.redact(str(self.directory))!r} loader={self.loader!r}>"
        )


class DataFrameIterator(RemoteBatchMixin, keras_image.DataFrameIterator):
    """Iterator over images named in a pandas dataframe, local or remote.

    Takes every argument of Keras's `DataFrameIterator`, with the same
    defaults, plus the keyword-only arguments below. `directory` may be a
    URL prefix (`"s3://bucket/images"`) and `x_col` may hold full URLs.

    Args:
        loader: Callable `path -> bytes | file-like | PIL.Image | ndarray`
            that does all reading, or `"fsspec"` (`FsspecLoader`, the
            default) or `"obstore"` (`ObstoreLoader`, faster on S3/GCS/Azure).
        storage_options: Passed to fsspec (credentials, `endpoint_url`, ...).
        workers: Threads (or processes) Keras's `fit` uses to request
            batches; each builds a different batch. Defaults to 4.
        use_multiprocessing: Passed to `keras.utils.PyDataset`.
        max_queue_size: Passed to `keras.utils.PyDataset`. Defaults to 10.
        prefetch_batches: Batches built ahead when they are asked for in
            order. Defaults to 4.
        max_in_flight: Requests in flight for loaders without `load_many`
            (custom loaders, `"obstore"`). Defaults to 128.
        decode_workers: Decoding threads; defaults to one per core.
        jpeg_draft: Decode large JPEGs at reduced scale (`PIL.Image.draft`)
            when that still covers `target_size`: about 3x faster on
            2-megapixel photos, but pixels differ from stock Keras's.
            Defaults to `False`.
        cache_dir: Local folder caching fetched files, so later epochs make
            no requests for them; off when `None` (the default). Safe to
            share between processes; assumes objects do not change.
        cache_max_bytes: Size limit of `cache_dir`; least recently used
            files are evicted. Defaults to 10 GiB.
        retries: How transient failures (resets, timeouts, 5xx, 429) are
            retried: a `RetryPolicy`, or a number of attempts per file.
            Defaults to `RetryPolicy()`: 5 attempts, 64 retries per batch,
            capped exponential backoff with jitter, 60 s per request.
        on_error: `"raise"` (default) raises for an unreadable sample;
            `"skip"` drops it from its batch, warns once per epoch and
            records it in `iterator.skipped`.
        num_shards: Number of workers sharing the data; each reads only its
            own shard (see `remote_keras.sharding`). Detected from
            `tf.distribute`, `TF_CONFIG` or `keras.distribution` when
            neither this nor `shard_index` is given; `1` turns it off.
        shard_index: This worker's shard, `0 <= shard_index < num_shards`.
        shard_remainder: `"pad"` (default) repeats a few samples so that
            every shard has `ceil(n / num_shards)` samples per epoch;
            `"drop"` leaves out `n % num_shards` samples per epoch instead.
        progress: Show a progress bar (`tqdm`) when listing or checking files
            takes more than 2 seconds. Defaults to `True`.
    """

    def __init__(
        self,
        dataframe,
        directory=None,
        image_data_generator=None,
        x_col="filename",
        y_col="class",
        weight_col=None,
        target_size=(256, 256),
        color_mode="rgb",
        classes=None,
        class_mode="categorical",
        batch_size=32,
        shuffle=True,
        seed=None,
        data_format="channels_last",
        save_to_dir=None,
        save_prefix="",
        save_format="png",
        subset=None,
        interpolation="nearest",
        keep_aspect_ratio=False,
        dtype="float32",
        validate_filenames=True,
        *,
        loader: Loader | str | None = None,
        storage_options: dict[str, Any] | None = None,
        workers: int = DEFAULT_WORKERS,
        use_multiprocessing: bool = False,
        max_queue_size: int = 10,
        prefetch_batches: int = DEFAULT_PREFETCH_BATCHES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        decode_workers: int | None = None,
        jpeg_draft: bool = False,
        cache_dir: str | os.PathLike | None = None,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
        retries: RetryPolicy | int | None = None,
        on_error: str = "raise",
        num_shards: int | None = None,
        shard_index: int | None = None,
        shard_remainder: str = "pad",
        progress: bool = True,
    ):
        self._init_remote(
            loader=loader,
            storage_options=storage_options,
            workers=workers,
            use_multiprocessing=use_multiprocessing,
            max_queue_size=max_queue_size,
            prefetch_batches=prefetch_batches,
            max_in_flight=max_in_flight,
            decode_workers=decode_workers,
            jpeg_draft=jpeg_draft,
            cache_dir=cache_dir,
            cache_max_bytes=cache_max_bytes,
            retries=retries,
            on_error=on_error,
            num_shards=num_shards,
            shard_index=shard_index,
            shard_remainder=shard_remainder,
            progress=progress,
        )
        _check_path_column(dataframe, x_col)
        super().__init__(
            dataframe,
            directory=directory,
            image_data_generator=image_data_generator,
            x_col=x_col,
            y_col=y_col,
            weight_col=weight_col,
            target_size=target_size,
            color_mode=color_mode,
            classes=classes,
            class_mode=class_mode,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            data_format=data_format,
            save_to_dir=save_to_dir,
            save_prefix=save_prefix,
            save_format=save_format,
            subset=subset,
            interpolation=interpolation,
            keep_aspect_ratio=keep_aspect_ratio,
            dtype=dtype,
            validate_filenames=validate_filenames,
        )
        self._finish_init()

    def _filter_valid_filepaths(self, df, x_col):
        """Keeps rows whose file exists, listing remote prefixes instead of one request per row."""
        names = df[x_col].tolist()
        paths = [self._path_of(name) for name in names]
        if not any(storage.is_url(path) for path in paths):
            return super()._filter_valid_filepaths(df, x_col)
        self._known_paths = dict(zip(names, paths))
        with progress_bar(
            f"Checking {len(paths)} files", self.progress, "files", total=len(paths)
        ) as bar:
            exists = self._existing(paths, bar)
        formats = self.white_list_formats
        mask = np.array(
            [ok and path.lower().endswith(formats) for path, ok in zip(paths, exists)], dtype=bool
        )
        n_invalid = int((~mask).sum())
        if n_invalid:
            warnings.warn(
                f'Found {n_invalid} invalid image filename(s) in x_col="{x_col}". '
                "These filename(s) will be ignored.",
                stacklevel=2,
            )
        return df[mask]

    def _existing(self, paths: list[str], bar: Any) -> list[bool]:
        """Which of `paths` exist: asked of a custom loader's `exists`, else listed by fsspec.

        Raises:
            FileNotFoundError: `directory`, or a bucket or prefix that rows point
                into, does not exist.
            ValueError: a protocol fsspec does not know, with the default loader.
        """
        exists = getattr(self.loader, "exists", None)
        custom = not isinstance(self.loader, (FsspecLoader, ObstoreLoader))
        if callable(exists) and custom:
            return list(self._pools.get("fetch").map(_exists_by(exists, bar), paths))
        unknown = sorted(
            {storage.protocol_of(p) for p in paths if storage.is_url(p)}
            - set(fsspec.available_protocols())
        )
        if unknown and custom:
            warnings.warn(
                f"Cannot check that the {len(paths)} files exist: fsspec does not know the "
                f"protocol(s) {unknown} and the loader has no `exists(path) -> bool` method. "
                "Every row is kept (only its file extension is checked); pass "
                "`validate_filenames=False` to skip the check without this warning, or give "
                "the loader an `exists` method.",
                stacklevel=4,
            )
            return [True] * len(paths)
        if storage.is_url(str(self.directory)):
            directory = self._pinner.pin(str(self.directory))
            fs, root = self.filesystems.resolve(directory)
            with errors.reading(directory):
                there = fs.exists(root)
            if not there:
                raise FileNotFoundError(f"No such directory: {errors.redact(directory)!r}")
        found, missing = storage.existing(paths, self.filesystems, bar)
        if missing:
            shown = ", ".join(repr(errors.redact(url)) for url in missing[:5])
            raise FileNotFoundError(
                f"No such bucket or prefix: {shown}: nothing is stored there, yet rows of the "
                "dataframe point into it. Check the URLs (and `directory`)."
            )
        return found


def _exists_by(exists: Any, bar: Any) -> Any:
    """Wraps a loader's `exists(path)` to translate its errors and count on `bar`."""

    def check(path: str) -> bool:
        with errors.reading(path):
            result = bool(exists(path))
        if bar is not None:
            bar.update(1)
        return result

    return check


class DirectoryIterator(RemoteBatchMixin, keras_image.DirectoryIterator):
    """Iterator over a folder of class sub-folders, local or remote.

    Takes every argument of Keras's `DirectoryIterator`, with the same
    defaults, plus the keyword-only arguments of `DataFrameIterator`. A
    remote `directory` (`"s3://bucket/train"`) is listed once, recursively;
    classes, file order and `subset` splits are as for a local folder.
    """

    def __init__(
        self,
        directory,
        image_data_generator,
        target_size=(256, 256),
        color_mode="rgb",
        classes=None,
        class_mode="categorical",
        batch_size=32,
        shuffle=True,
        seed=None,
        data_format=None,
        save_to_dir=None,
        save_prefix="",
        save_format="png",
        follow_links=False,
        subset=None,
        interpolation="nearest",
        keep_aspect_ratio=False,
        dtype=None,
        *,
        loader: Loader | str | None = None,
        storage_options: dict[str, Any] | None = None,
        workers: int = DEFAULT_WORKERS,
        use_multiprocessing: bool = False,
        max_queue_size: int = 10,
        prefetch_batches: int = DEFAULT_PREFETCH_BATCHES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        decode_workers: int | None = None,
        jpeg_draft: bool = False,
        cache_dir: str | os.PathLike | None = None,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
        retries: RetryPolicy | int | None = None,
        on_error: str = "raise",
        num_shards: int | None = None,
        shard_index: int | None = None,
        shard_remainder: str = "pad",
        progress: bool = True,
    ):
        self._init_remote(
            loader=loader,
            storage_options=storage_options,
            workers=workers,
            use_multiprocessing=use_multiprocessing,
            max_queue_size=max_queue_size,
            prefetch_batches=prefetch_batches,
            max_in_flight=max_in_flight,
            decode_workers=decode_workers,
            jpeg_draft=jpeg_draft,
            cache_dir=cache_dir,
            cache_max_bytes=cache_max_bytes,
            retries=retries,
            on_error=on_error,
            num_shards=num_shards,
            shard_index=shard_index,
            shard_remainder=shard_remainder,
            progress=progress,
        )
        arguments = dict(
            target_size=target_size,
            color_mode=color_mode,
            classes=classes,
            class_mode=class_mode,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            data_format=data_format,
            save_to_dir=save_to_dir,
            save_prefix=save_prefix,
            save_format=save_format,
            follow_links=follow_links,
            subset=subset,
            interpolation=interpolation,
            keep_aspect_ratio=keep_aspect_ratio,
            dtype=dtype,
        )
        if storage.is_url(os.fspath(directory)):
            self._init_from_listing(os.fspath(directory), image_data_generator, **arguments)
        else:
            super().__init__(directory, image_data_generator, **arguments)
        self._finish_init()

    def _init_from_listing(self, directory: str, image_data_generator, **kw) -> None:
        """Keras's `DirectoryIterator.__init__`, fed by one recursive listing."""
        data_format = kw["data_format"] or backend.image_data_format()
        self.set_processing_attrs(
            image_data_generator,
            kw["target_size"],
            kw["color_mode"],
            data_format,
            kw["save_to_dir"],
            kw["save_prefix"],
            kw["save_format"],
            kw["subset"],
            kw["interpolation"],
            kw["keep_aspect_ratio"],
        )
        self.directory = directory
        if kw["class_mode"] not in self.allowed_class_modes:
            raise ValueError(
                f"Invalid class_mode: {kw['class_mode']}; expected one of: "
                f"{self.allowed_class_modes}"
            )
        self.class_mode = kw["class_mode"]
        self.dtype = kw["dtype"] or backend.floatx()

        with progress_bar(f"Listing {errors.redact(directory)}", self.progress, "objects") as bar:
            entries = storage.walk_files(self._pinner.pin(directory), self.filesystems, bar)
        by_class: dict[str, list[str]] = {}
        for entry in entries:
            top, _, rest = entry.partition("/")
            if rest or entry.endswith("/"):
                by_class.setdefault(top, [])
                if rest and not rest.endswith("/"):
                    by_class[top].append(entry)
        classes = list(kw["classes"] or sorted(by_class))
        self.num_classes = len(classes)
        self.class_indices = dict(zip(classes, range(len(classes))))

        self.filenames = []
        labels: list[int] = []
        for name in classes:
            files = _ordered_like_os_walk(by_class.get(name, []), self.white_list_formats)
            if self.split:
                start, stop = int(self.split[0] * len(files)), int(self.split[1] * len(files))
                files = files[start:stop]
            self.filenames += files
            labels += [self.class_indices[name]] * len(files)
        self.samples = len(self.filenames)
        self.classes = np.asarray(labels, dtype="int32")
        io_utils.print_msg(f"Found {self.samples} images belonging to {self.num_classes} classes.")
        keras_image.Iterator.__init__(
            self, self.samples, kw["batch_size"], kw["shuffle"], kw["seed"]
        )


def _called_by_keras(method: str, owner: type) -> bool:
    """Whether `owner.method`, a few frames up, is what calls the iterator.

    Tells two calls apart that Keras makes with no argument to say so:
    `PyDatasetAdapter.get_tf_dataset()` reading batches 0 and 1 to infer the
    tensor spec, and `EpochIterator.reset()` calling `on_epoch_end()` before
    the first epoch (and, in `evaluate`, before every pass), which ends no
    epoch.
    """
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code.co_name == method and isinstance(frame.f_locals.get("self"), owner):
            return True
        frame = frame.f_back
    return False


def _check_path_column(df, x_col: str) -> None:
    """Raises `InvalidRowsError` naming rows whose path is NaN, empty or not a string."""
    if x_col not in df.columns:
        return  # Keras raises its own KeyError
    bad = [(i, v) for i, v in df[x_col].items() if not isinstance(v, str) or not v.strip()]
    if bad:
        shown = ", ".join(f"{i!r}: {v!r}" for i, v in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise errors.InvalidRowsError(
            f'Column x_col="{x_col}" must hold non-empty strings (paths or URLs). '
            f"Received in {len(bad)} row(s): {shown}{more}",
            [i for i, _ in bad],
        )


def _ordered_like_os_walk(files: list[str], formats: tuple[str, ...]) -> list[str]:
    """Sorts and filters files as Keras's sorted `os.walk` does: by folder, then name."""
    ordered = []
    for path in sorted(files, key=lambda p: (posixpath.dirname(p), posixpath.basename(p))):
        name = posixpath.basename(path)
        if name.lower().endswith(".tiff"):
            warnings.warn(
                'Using ".tiff" files with multiple bands will cause distortion. '
                "Please verify your output.",
                stacklevel=3,
            )
        if name.lower().endswith(formats):
            ordered.append(path)
    return ordered
