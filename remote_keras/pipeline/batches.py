"""Building one batch: fetch its files, decode and augment them on threads, pair them with labels.

`load` gets typed values only: the `ReadEngine` that reads the files, the
thread pools, what each image becomes (`ImageSpec`) and how its pixels become
the batch's rows (`Pixels`: Keras's `floatx`, the `ImageDataGenerator`'s
transforms and `standardize`, supplied by the front). `assemble` pairs the
images with their labels, reading the front's label attributes (`class_mode`,
`classes`, `class_indices`, `labels`, `sample_weight`, `save_to_dir`) on the
consumer's thread, as Keras's own `_get_batches_of_transformed_samples` does.
This module imports neither Keras nor TensorFlow.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from remote_keras.pipeline.decoding import array_to_img, decode_image, img_to_array
from remote_keras.pipeline.epochs import BatchPlan
from remote_keras.pipeline.stats import StatsRecorder
from remote_keras.storage import saving

if TYPE_CHECKING:
    from remote_keras.pipeline.engine import ReadEngine
    from remote_keras.pipeline.prefetch import WorkerPools

Batch = Any  # `x`, `(x, y)` or `(x, y, sample_weight)`


@dataclasses.dataclass(frozen=True)
class Pixels:
    """How a decoded image becomes its row of the batch; the front decides it per batch.

    Attributes:
        floatx: The dtype images become arrays in (Keras: `keras.backend.floatx()`).
        augment: `(x, transform) -> x`, run on every sample that has a
            transform (Keras: `apply_transform`, then `standardize`); `None`
            for none.
        direct: Whether a sample whose transform is `identity` (or `None`)
            may skip `augment`: its pixels go into the batch multiplied by
            `rescale` only, which must then be what `augment` would compute.
        rescale: The factor of the direct path, for samples with a transform.
        identity: The transform that changes nothing.
    """

    floatx: Any = "float32"
    augment: Callable[[np.ndarray, Any], np.ndarray] | None = None
    direct: bool = True
    rescale: float | None = None
    identity: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """What each file of a batch becomes; a front builds it from its settings per batch.

    Attributes:
        shape: One image's array shape (`image_shape`).
        dtype: The batch's dtype.
        data_format: `"channels_last"` or `"channels_first"`.
        color_mode: `"grayscale"`, `"rgb"` or `"rgba"`.
        target_size: `(height, width)` images are resized to.
        interpolation: The resampling method's name.
        keep_aspect_ratio: Crop to the target's aspect ratio before resizing.
        jpeg_draft: Let JPEGs decode at a reduced size first (`LoaderOptions`).
    """

    shape: tuple[int, ...]
    dtype: Any
    data_format: str
    color_mode: str
    target_size: tuple[int, int]
    interpolation: str
    keep_aspect_ratio: bool
    jpeg_draft: bool


def load(
    engine: ReadEngine,
    pools: WorkerPools,
    filepaths: Sequence[str],
    spec: ImageSpec,
    pixels: Pixels,
    plan: BatchPlan,
    epoch: int,
) -> tuple[BatchPlan, np.ndarray]:
    """Fetches and decodes the samples of `plan` into one array.

    Args:
        engine: Reads the files (and records skips and statistics).
        pools: The `"fetch"` and `"decode"` threads.
        filepaths: Every sample's path, by index.
        spec: What each image becomes.
        pixels: How decoded pixels become the batch's rows.
        plan: The batch's samples and transforms.
        epoch: The epoch a skip is recorded in when `plan` has no origin.

    Returns:
        `(plan, batch_x)`; with `on_error="skip"`, unreadable samples are
        dropped from both.
    """
    stats = engine.stats
    with stats.busy("load_s"):
        paths = [filepaths[j] for j in plan.indices]
        batch_x = np.empty((len(paths),) + spec.shape, dtype=spec.dtype)  # every row set below
        if not paths:
            return plan, batch_x
        decode_pool = pools.get("decode")
        direct = _writes_direct(spec, pixels)
        futures = []
        for i, data in enumerate(engine.fetcher.fetch(paths, pools.get("fetch"))):
            transform = plan.transforms[i] if plan.transforms is not None else None
            futures.append(
                decode_pool.submit(
                    _sample, spec, stats, data, paths[i], transform, batch_x[i], pixels, direct
                )
            )
        kept = []
        try:
            for i, future in enumerate(futures):
                try:
                    future.result()
                    kept.append(i)
                except (OSError, ValueError) as exc:
                    if engine.options.on_error != "skip" or isinstance(exc, PermissionError):
                        raise  # credentials are configuration, not a bad sample
                    origin, first = plan.origin or (epoch, None)  # a read again: same slot
                    slot = None if first is None else first + i
                    reason = f"{type(exc).__name__}: {exc}"
                    # Warned by the thread that hands the batch out (`warn_pending`).
                    engine.skips.add(paths[i], reason, epoch=origin, slot=slot, hold=True)
        finally:
            for future in futures:
                future.cancel()
    if len(kept) == len(paths):
        return plan, batch_x
    return plan.keep(kept), batch_x[kept]


def _writes_direct(spec: ImageSpec, pixels: Pixels) -> bool:
    """Whether a decoded image may go straight into the batch, with at most a rescale.

    True when the result is provably what the general path computes: channels
    last, the batch in `pixels.floatx` (the dtype `img_to_array` gives), and
    the front allows it (`pixels.direct`).
    """
    return (
        pixels.direct
        and spec.data_format == "channels_last"
        and np.dtype(spec.dtype) == np.dtype(pixels.floatx)
    )


def _sample(
    spec: ImageSpec,
    stats: StatsRecorder,
    data: Any,
    path: str,
    transform: Any,
    out: np.ndarray,
    pixels: Pixels,
    direct: bool,
) -> None:
    """Decodes one image, applies its transform and standardization (`pixels`) into `out`.

    With `direct` (see `_writes_direct`) and an identity transform, the 8-bit pixels
    are converted and rescaled into `out` in one step: the same float32 arithmetic
    as `img_to_array` then `x *= rescale`, without the two intermediate arrays.
    """
    if isinstance(data, BaseException):
        raise data
    start = time.perf_counter()
    try:
        img = decode_image(
            data,
            path,
            color_mode=spec.color_mode,
            target_size=spec.target_size,
            interpolation=spec.interpolation,
            keep_aspect_ratio=spec.keep_aspect_ratio,
            jpeg_draft=spec.jpeg_draft,
        )
        identity = transform is None or transform == pixels.identity
        if direct and identity and img.mode in ("L", "RGB", "RGBA"):
            values = np.asarray(img)
            if values.ndim == 2:
                values = values[..., None]
            rescale = pixels.rescale if transform is not None else None
            if rescale:
                np.multiply(values, rescale, out=out, dtype=out.dtype)
            else:
                np.copyto(out, values)
        else:
            x = img_to_array(img, spec.data_format, pixels.floatx)
            if pixels.augment is not None and transform is not None:
                x = pixels.augment(x, transform)
            out[...] = x
        if hasattr(img, "close"):
            img.close()
    except BaseException:
        stats.add(decode_s=time.perf_counter() - start)
        raise
    stats.add(decode_s=time.perf_counter() - start, images=1)


@dataclasses.dataclass(frozen=True)
class Targets:
    """What a batch's labels are made from: Keras's `class_mode` and the label arrays.

    Attributes:
        class_mode: Keras's `class_mode` (`None`: images only).
        classes: Class index per sample (`"binary"`, `"sparse"`, `"categorical"`).
        num_classes: Columns of a `"categorical"` one-hot label.
        dtype: The labels' dtype.
        labels: Per-sample values (`"raw"`), or one array per output (`"multi_output"`).
        sample_weight: Per-sample weights, or `None`.
    """

    class_mode: str | None
    classes: Any = None
    num_classes: int = 0
    dtype: str = "float32"
    labels: Any = None
    sample_weight: Any = None


@dataclasses.dataclass(frozen=True)
class SaveTo:
    """Where and how `save_to_dir` writes a batch's samples.

    Attributes:
        target: Where files are written (`storage.saving.SaveTarget`).
        prefix: Keras's `save_prefix`.
        data_format: The images' data format.
        floatx: The images' dtype.
    """

    target: saving.SaveTarget
    prefix: str
    data_format: str
    floatx: str


def assemble(
    targets: Targets, plan: BatchPlan, batch_x: np.ndarray, save_to: SaveTo | None = None
) -> Batch:
    """Saves the samples (with `save_to`) and pairs the images with their labels."""
    indices = plan.indices
    batch_y: Any
    if save_to is not None:
        _save(save_to, plan, batch_x)
    mode = targets.class_mode
    if mode == "input":
        batch_y = batch_x.copy()
    elif mode in {"binary", "sparse"}:
        batch_y = np.asarray([targets.classes[j] for j in indices], dtype=targets.dtype)
    elif mode == "categorical":
        batch_y = np.zeros((len(batch_x), targets.num_classes), dtype=targets.dtype)
        for i, j in enumerate(indices):
            batch_y[i, targets.classes[j]] = 1.0
    elif mode == "multi_output":
        batch_y = [output[indices] for output in targets.labels]
    elif mode == "raw":
        batch_y = targets.labels[indices]
    else:
        return batch_x
    if targets.sample_weight is None:
        return batch_x, batch_y
    return batch_x, batch_y, targets.sample_weight[indices]


def _save(save_to: SaveTo, plan: BatchPlan, batch_x: np.ndarray) -> None:
    hashes = plan.save_hashes or [0] * len(plan.indices)
    images = [
        array_to_img(x, save_to.data_format, scale=True, dtype=save_to.floatx) for x in batch_x
    ]
    fmt = save_to.target.format
    names = [f"{save_to.prefix}_{j}_{hashes[i]}.{fmt}" for i, j in enumerate(plan.indices)]
    saving.save(save_to.target, images, names)
