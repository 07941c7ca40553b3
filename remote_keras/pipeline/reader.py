"""`BatchReader`: batches of decoded images and labels from paths or URLs, without Keras.

The core pipeline on its own: epoch plans (`epochs`), fetching with retries
and the disk cache (`fetching`), decoding (`decoding`), batch assembly and
labels (`batches`), look-ahead on thread pools (`prefetch`), statistics and
skipped samples. It imports neither Keras nor TensorFlow. The batches equal
those of a Keras iterator with the same files, order, `seed` and no
`ImageDataGenerator` (Keras's `floatx` being `"float32"`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from typing_extensions import Unpack

from remote_keras import errors
from remote_keras.pipeline import batches, sharding
from remote_keras.pipeline.engine import ReadEngine, engine_attribute
from remote_keras.pipeline.epochs import BatchPlan, EpochPlanner
from remote_keras.pipeline.options import LoaderOptions, LoaderOverrides
from remote_keras.pipeline.prefetch import Prefetcher, WorkerPools
from remote_keras.pipeline.stats import LoaderStats

CLASS_MODES = ("sparse", "binary", "categorical", "raw", None)
_CHANNELS = {"grayscale": 1, "rgb": 3, "rgba": 4}


class BatchReader:
    """Reads batches of images (and labels) from paths or URLs, with the core pipeline alone.

    Batch `i` of epoch `e` is a function of `(seed, e, i)`, as for the Keras
    iterators: with `shuffle`, epoch `e`'s order is the one a Keras iterator
    with the same `seed` draws. `lakefs://` refs are pinned to a commit when
    the reader is made.

    Args:
        paths: The images' paths or URLs, one per sample.
        labels: One per sample: class indices for `class_mode` `"sparse"`,
            `"binary"` or `"categorical"`, any values for `"raw"`; `None`
            for batches of images only.
        batch_size: Samples per batch.
        shuffle: Whether each epoch reads the samples in a new order.
        seed: Seed of the orders; `None` draws from the global `np.random`.
        target_size: `(height, width)` the images are resized to.
        color_mode: `"grayscale"`, `"rgb"` or `"rgba"`.
        interpolation: Resampling method name (see `decoding.INTERPOLATIONS`).
        keep_aspect_ratio: Center-crop to the target aspect ratio first.
        class_mode: How labels are returned: `"sparse"` (the default with
            labels), `"binary"`, `"categorical"` (one-hot), `"raw"`.
        num_classes: Classes for `"categorical"`; by default `max(labels) + 1`.
        dtype: The images' (and numeric labels') dtype.
        data_format: `"channels_last"` or `"channels_first"`.
        options: A `LoaderOptions` to start from; keyword arguments named
            like its fields override it.

    Example:

    ```python
    with BatchReader(urls, labels, batch_size=32, seed=1, target_size=(224, 224)) as reader:
        for x, y in reader.epoch_batches(0):
            ...
    ```
    """

    image_data_generator = None  # no Keras augmentation: `batches` and `epochs` read these
    save_to_dir = None
    sample_weight = None
    loader = engine_attribute("loader")
    loader_choice = engine_attribute("loader_choice")
    cache = engine_attribute("cache")

    def __init__(
        self,
        paths: Sequence[str],
        labels: Sequence[Any] | np.ndarray | None = None,
        batch_size: int = 32,
        shuffle: bool = True,
        seed: int | None = None,
        target_size: tuple[int, int] = (256, 256),
        color_mode: str = "rgb",
        interpolation: str = "nearest",
        keep_aspect_ratio: bool = False,
        class_mode: str | None = "default",
        num_classes: int | None = None,
        dtype: str = "float32",
        data_format: str = "channels_last",
        *,
        options: LoaderOptions | None = None,
        **overrides: Unpack[LoaderOverrides],
    ) -> None:
        if class_mode == "default":
            class_mode = None if labels is None else "sparse"
        if class_mode not in CLASS_MODES or (class_mode is None) != (labels is None):
            raise ValueError(
                f"class_mode={class_mode!r} with labels={'None' if labels is None else '...'}: "
                f"expected one of {CLASS_MODES[:-1]} with labels, or None without"
            )
        if color_mode not in _CHANNELS:
            raise ValueError('color_mode must be "grayscale", "rgb", or "rgba"')
        self.options = opts = (options or LoaderOptions()).merged(overrides)
        self.n = len(paths)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.target_size, self.color_mode = tuple(target_size), color_mode
        self.interpolation, self.keep_aspect_ratio = interpolation, keep_aspect_ratio
        self.dtype, self.data_format = dtype, data_format
        channels = (_CHANNELS[color_mode],)
        last = data_format == "channels_last"
        self.image_shape = self.target_size + channels if last else channels + self.target_size
        self.class_mode = class_mode
        self.labels = None if labels is None else np.asarray(labels)
        self.classes = self.labels
        count = num_classes or (int(self.labels.max()) + 1 if self.labels is not None else 0)
        self.class_indices = {str(i): i for i in range(count)}
        self.shard = sharding.resolve(opts.num_shards, opts.shard_index, opts.shard_remainder)
        self._planner = EpochPlanner(self, self.shard)
        self.engine = ReadEngine(opts, paths[0] if len(paths) else "")
        self.filepaths = [self.engine.pin(path) for path in paths]
        self.engine.expect(self.filepaths)
        self._spec = batches.ImageSpec(
            self.image_shape,
            dtype,
            data_format,
            color_mode,
            (self.target_size[0], self.target_size[1]),
            interpolation,
            keep_aspect_ratio,
            opts.jpeg_draft,
        )
        threads = (opts.prefetch_batches + 2, opts.max_in_flight, opts.decode_workers)
        self._pools = WorkerPools(*threads)
        self._prefetcher = Prefetcher(self._pools, opts.prefetch_batches)
        self._lock = threading.Lock()
        self.epoch = 0

    def batch_pixels(self) -> batches.Pixels:
        """No augmentation or standardization; images become arrays in `dtype`."""
        return batches.Pixels(floatx=self.dtype)

    def __len__(self) -> int:
        """Batches per epoch (in this shard)."""
        return self._planner.batches()

    def order(self, epoch: int) -> np.ndarray:
        """The sample indices epoch `epoch` reads, in order (this shard's)."""
        with self._lock:
            return self._planner.order(epoch)

    def batch(self, epoch: int, index: int) -> batches.Batch:
        """Returns batch `index` of `epoch`: `x`, or `(x, y)` with labels.

        Raises:
            IndexError: `index` is not a batch of an epoch.
            ImageLoadError: a file could not be read (after retries), unless
                `on_error="skip"`.
            ImageDecodeError: a file is not an image, unless `on_error="skip"`.
        """
        return self._read(epoch, index, (), stacklevel=2)  # warnings name your line

    def epoch_batches(self, epoch: int) -> Iterator[batches.Batch]:
        """Yields the batches of `epoch` in order, `prefetch_batches` of them built ahead.

        Batches built ahead and not taken (the loop stopped early) are dropped when the
        generator is closed, so that later epochs read ahead again.
        """
        depth = self.options.prefetch_batches
        try:
            for index in range(len(self)):
                ahead = range(index + 1, min(index + 1 + depth, len(self)))
                yield self._read(epoch, index, ahead, stacklevel=2)  # your loop's line
        finally:
            with self._lock:
                self._prefetcher.clear(epoch)

    def _read(self, epoch: int, index: int, ahead: Sequence[int], stacklevel: int) -> batches.Batch:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of an epoch of {len(self)} batches")
        with self._lock:
            self.epoch = epoch
            prefetcher = self._prefetcher
            future = prefetcher.claim((epoch, index)) or prefetcher.start(self._task(epoch, index))
            for later in ahead:
                if prefetcher.wants((epoch, later)):
                    prefetcher.ahead((epoch, later), self._task(epoch, later))
        with self.engine.stats.busy("wait_s"):
            plan, batch_x = future.result()
        self.engine.stats.add(batches=1)
        # This batch's skips (and those read ahead of it), at `stacklevel` above `_read`'s call.
        self.engine.skips.warn_pending(stacklevel + 1)
        targets = batches.Targets(
            self.class_mode, self.classes, len(self.class_indices), self.dtype, self.labels
        )
        return batches.assemble(targets, plan, batch_x)

    def _task(self, epoch: int, index: int) -> Callable[[], tuple[BatchPlan, np.ndarray]]:
        plan = self._planner.plan(epoch, index)  # under the lock, held by `_read`
        engine, pools, paths, spec, pixels = (
            self.engine,
            self._pools,
            self.filepaths,
            self._spec,
            self.batch_pixels(),
        )
        return lambda: batches.load(engine, pools, paths, spec, pixels, plan, epoch)

    @property
    def stats(self) -> LoaderStats:
        """Running statistics: images, bytes, requests, retries, cache hits, time waiting."""
        return dataclasses.replace(self.engine.stats.snapshot(), skipped=len(self.skipped))

    @property
    def skipped(self) -> list[tuple[str, str]]:
        """`(url, reason)` of every sample dropped with `on_error="skip"`, oldest first."""
        return self.engine.skips.records()

    def close(self) -> None:
        """Stops the threads and closes the loader's connections; returns at once."""
        with self._lock:
            self._prefetcher.clear()
        self._pools.close()
        self.engine.close()

    def __enter__(self) -> BatchReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = errors.redact(self.filepaths[0]) if self.filepaths else "no files"
        return f"<BatchReader samples={self.n} batch_size={self.batch_size} first={where!r}>"
