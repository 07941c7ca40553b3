"""The grain pipeline of `image_dataset_from_directory(format="grain")`: no TensorFlow.

Keras's grain path (Keras 3.13 and later) makes a `grain.MapDataset` of the
file paths (zipped with the labels), shuffles it once with `seed`, maps each
element to its decoded image, and batches the `IterDataset` it becomes. Here
the elements are the sample indices, shuffled with the same
`MapDataset.shuffle`, so the order is Keras's; each element is fetched through
the package's `ReadEngine` (retries, cache, checksums, lakeFS pins), decoded by
Pillow with Keras's colour conversion (`pipeline.decoding`) and resized by the
front's `GrainArithmetic`, Keras's own ops. grain's read threads
(`ReadOptions`) give the concurrency and the look-ahead: `max_in_flight`
elements at once, `prefetch_batches` batches ahead. With `on_error="skip"` a
file that cannot be read or decoded becomes `None`, which grain's iterator
leaves out (later samples fill the batch).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from remote_keras import errors
from remote_keras.image_dataset.arguments import COLOR_MODES
from remote_keras.image_dataset.reads import SKIP_FATE, body_of
from remote_keras.pipeline.decoding import decode_image
from remote_keras.pipeline.engine import ReadEngine
from remote_keras.pipeline.executors import InlineExecutor
from remote_keras.pipeline.skips import SkipLog

_COLOR_MODES = {channels: mode for mode, channels in COLOR_MODES.items()}
# Batches a pass may hand out and still be one Keras abandons (to build the model, or to
# learn the batch's spec) rather than an epoch.
BUILD_BATCHES = 2


class GrainArithmetic(Protocol):
    """What the Keras front computes with Keras's ops, as its grain path does."""

    def image(self, pixels: np.ndarray) -> Any:
        """The decoded `(height, width[, channels])` array to the resized image tensor."""

    def label(self, value: Any, label_mode: str, num_classes: int) -> Any:
        """One label (class index or given label) to its tensor for `label_mode`."""

    def batch(self, values: Sequence[Any]) -> Any:
        """Elements stacked into a batch."""


class GrainSamples:
    """Reads and decodes one subset's samples, one element at a time (grain calls it).

    Args:
        files: The dataset's engine.
        urls: The URLs read (pinned), one per sample.
        shown: The paths named in errors and `skipped`.
        labels: One label per sample, or `None`.
        label_mode: `"int"`, `"categorical"`, `"binary"` or `None`.
        num_classes: Classes, for `"categorical"`.
        channels: 1, 3 or 4.
        arithmetic: The front's Keras ops.
    """

    def __init__(
        self,
        files: ReadEngine,
        urls: list[str],
        shown: list[str],
        labels: np.ndarray | None,
        label_mode: str | None,
        num_classes: int,
        channels: int,
        arithmetic: GrainArithmetic,
    ) -> None:
        self.files, self.urls, self.shown, self.labels = files, urls, shown, labels
        self.label_mode, self.num_classes = label_mode or "int", num_classes
        self.color_mode = _COLOR_MODES[channels]
        self.arithmetic = arithmetic
        self.requests = InlineExecutor()  # grain's read threads are the concurrency
        self.skips = SkipLog()
        self.pass_start = PassStart(frozenset(), 0)  # set by `build`, which knows the order

    def __call__(self, index: int) -> Any:
        """The element of sample `file_index`: its image, or `(image, label)`; `None` if skipped.

        Raises:
            ImageLoadError: (or the read's own error) with `on_error="raise"`.
            ImageDecodeError: Pillow cannot decode the file, with `on_error="raise"`.
        """
        index = int(index)
        url = self.urls[index]
        try:
            body = self.pass_start.take(index)
            if body is None:
                [result] = self.files.fetcher.fetch([url], self.requests)
                read = body_of(url, result)
                if isinstance(read, BaseException):
                    raise read
                self.pass_start.keep(index, read)
                body = read
            pixels = np.array(decode_image(body, self.shown[index], self.color_mode))
        except Exception as exc:
            if self.files.options.on_error == "raise":
                raise
            reason = f"{type(exc).__name__}: {exc}"
            self.skips.add(errors.redact(self.shown[index]), reason, fate=SKIP_FATE)
            return None
        image = self.arithmetic.image(pixels)
        if self.labels is None:
            return image
        return image, self.arithmetic.label(self.labels[index], self.label_mode, self.num_classes)


class PassStart:
    """The bytes of the first elements of every pass, kept while no pass has gone on.

    Every pass reads the same order. Keras's JAX and PyTorch trainers build the
    model from the first batch of a pass they abandon (with several JAX
    processes, two such passes), and TensorFlow's adapter reads one to learn
    the spec: grain's threads have read up to `window` elements by then. Those
    bytes are kept, and the next pass takes them instead of reading them again.
    A pass has gone on once it has read more than `window` elements past them,
    or handed out more than `BUILD_BATCHES` batches by the time the next pass
    begins (a dataset shorter than two windows); then they are dropped: each
    later pass reads them once. Memory is bounded by `window` files.
    Thread-safe (grain's threads call it).

    Args:
        first: The samples at the start of the order (the first `window`).
        window: How many elements a pass has read when its first batch is out:
            two batches (the one handed out, the one grain assembles next) and
            grain's read-ahead.
    """

    def __init__(self, first: frozenset[int], window: int) -> None:
        self.first, self.window = first, window
        self._lock = threading.Lock()
        self._kept: dict[int, bytes] = {}
        self._beyond = 0  # elements read past `first` since the kept bytes were dropped
        self._batches = 0  # batches handed out by the pass in progress

    def new_pass(self) -> None:
        """A pass begins: the last one's kept bytes are dropped if it went on."""
        with self._lock:
            if self._batches > BUILD_BATCHES:
                self._kept.clear()
                self._beyond = 0
            self._batches = 0

    def batched(self) -> None:
        """The pass in progress hands out a batch."""
        with self._lock:
            self._batches += 1

    def take(self, index: int) -> bytes | None:
        """Sample `file_index`'s kept bytes, or `None` (then read it, and `keep` it)."""
        with self._lock:
            if index in self.first:
                return self._kept.get(index)
            self._beyond += 1
            if self._beyond > self.window:  # the pass went on: its start was taken already
                self._kept.clear()
                self._beyond = 0
            return None

    def keep(self, index: int, body: bytes) -> None:
        """Keeps what was read for a sample at the start of the order."""
        if index in self.first:
            with self._lock:
                self._kept[index] = body


def require() -> None:
    """Checks that grain is installed.

    Raises:
        MissingBackendError: it is not, naming the extra that installs it.
    """
    try:
        import grain  # noqa: F401
    except ImportError as exc:
        raise errors.MissingBackendError(
            f'format="grain" needs the grain package ({exc}). Fix: pip install ".[grain]" in a '
            "clone of remote_keras, which installs grain"
        ) from exc


def build(
    samples: GrainSamples,
    batch_size: int | None,
    shuffle: bool,
    seed: int,
    make_batch: Callable[[Sequence[Any]], Any],
) -> Any:
    """The `grain.IterDataset` of one subset: Keras's order, fetched ahead, batched.

    Args:
        samples: Reads each element.
        batch_size: Samples per batch; `None` for single samples.
        shuffle: Whether to shuffle the elements once with `seed` (Keras's
            `MapDataset.shuffle`; every pass has the same order, as there).
        seed: The shuffle's seed.
        make_batch: Stacks a batch's elements.
    """
    import grain

    options = samples.files.options
    elements = grain.MapDataset.range(len(samples.urls))
    if shuffle:
        elements = elements.shuffle(seed=seed)
    ahead = max(1, options.prefetch_batches) * (batch_size or 32)
    read = grain.ReadOptions(
        num_threads=max(1, min(options.max_in_flight, ahead)), prefetch_buffer_size=ahead
    )
    window = ahead + 2 * (batch_size or 1)  # read by the time the first batch is out
    if batch_size is None and len(elements) <= 2 * window:
        return elements.map(samples).to_iter_dataset(read)  # passes are told by batches
    first = frozenset(int(elements[position]) for position in range(min(window, len(elements))))
    start = samples.pass_start = PassStart(first, window)
    dataset = elements.map(samples).to_iter_dataset(read)
    if batch_size is None:
        return dataset

    def batch(values: Sequence[Any]) -> Any:
        start.batched()  # on the consumer's thread, as it asks (grain batches lazily)
        return make_batch(values)

    return _telling_passes(grain, dataset.batch(batch_size, batch_fn=batch), start)


def _telling_passes(grain: Any, dataset: Any, start: PassStart) -> Any:
    """`dataset`, telling `start` when a pass begins (each `iter()` of it)."""

    class Passes(grain.IterDataset):
        def __iter__(self) -> Any:
            start.new_pass()
            return self._parent.__iter__()

    return Passes(dataset)
