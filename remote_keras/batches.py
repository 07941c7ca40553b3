"""Building one batch: fetch its files, decode and augment them on threads, pair them with labels.

The functions take the iterator, whose Keras attributes (`color_mode`,
`target_size`, `class_mode`, `classes`, `save_to_dir`, ...) they read at
each call, as Keras's own `_get_batches_of_transformed_samples` does.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from keras import backend
from keras.src.legacy.preprocessing import image as keras_image
from keras.src.utils import image_utils

from remote_keras import saving
from remote_keras.epochs import BatchPlan
from remote_keras.loaders import decode_image

Batch = Any  # `x`, `(x, y)` or `(x, y, sample_weight)`


def load(it: Any, plan: BatchPlan) -> tuple[BatchPlan, np.ndarray]:
    """Fetches and decodes the samples of `plan` into one array.

    Args:
        it: The iterator.
        plan: The batch's samples and transforms.

    Returns:
        `(plan, batch_x)`; with `on_error="skip"`, unreadable samples are
        dropped from both.
    """
    with it._stats.busy("load_s"):
        filepaths = it.filepaths
        paths = [filepaths[j] for j in plan.indices]
        batch_x = np.empty((len(paths),) + it.image_shape, dtype=it.dtype)  # every row set below
        if not paths:
            return plan, batch_x
        decode_pool = it._pools.get("decode")
        direct = _writes_direct(it)
        futures = []
        for i, data in enumerate(it._fetcher.fetch(paths, it._pools.get("fetch"))):
            transform = plan.transforms[i] if plan.transforms is not None else None
            futures.append(
                decode_pool.submit(_sample, it, data, paths[i], transform, batch_x[i], direct)
            )
        kept = []
        try:
            for i, future in enumerate(futures):
                try:
                    future.result()
                    kept.append(i)
                except (OSError, ValueError) as exc:
                    if it.options.on_error != "skip" or isinstance(exc, PermissionError):
                        raise  # credentials are configuration, not a bad sample
                    it._skips.add(paths[i], f"{type(exc).__name__}: {exc}", epoch=it.epoch)
        finally:
            for future in futures:
                future.cancel()
    if len(kept) == len(paths):
        return plan, batch_x
    return plan.keep(kept), batch_x[kept]


# What `ImageDataGenerator.get_random_transform` draws when the generator has no random
# augmentation: `apply_transform` then returns its input unchanged.
_IDENTITY = {
    "theta": 0, "tx": 0, "ty": 0, "shear": 0, "zx": 1, "zy": 1,
    "flip_horizontal": False, "flip_vertical": False,
    "channel_shift_intensity": None, "brightness": None,
}  # fmt: skip
_STANDARDIZE_STEPS = (
    "preprocessing_function", "samplewise_center", "samplewise_std_normalization",
    "featurewise_center", "featurewise_std_normalization", "zca_whitening",
)  # fmt: skip


def _writes_direct(it: Any) -> bool:
    """Whether a decoded image may go straight into the batch, with at most a rescale.

    True when the result is provably what stock Keras computes: channels last, the
    batch in `floatx` (the dtype `img_to_array` gives), and a generator whose
    `standardize` would only multiply by a Python number and whose `apply_transform`
    is Keras's own (an identity transform is then skipped per sample).
    """
    if it.data_format != "channels_last" or np.dtype(it.dtype) != np.dtype(backend.floatx()):
        return False
    generator = it.image_data_generator
    if generator is None:
        return True
    stock = keras_image.ImageDataGenerator
    return (
        type(generator).standardize is stock.standardize
        and type(generator).apply_transform is stock.apply_transform
        and not any(getattr(generator, step, None) for step in _STANDARDIZE_STEPS)
        and type(generator.rescale) in (int, float, type(None))
    )


def _sample(
    it: Any, data: Any, path: str, transform: dict | None, out: np.ndarray, direct: bool
) -> None:
    """Decodes one image, applies the generator's transform and standardization into `out`.

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
            color_mode=it.color_mode,
            target_size=it.target_size,
            interpolation=it.interpolation,
            keep_aspect_ratio=it.keep_aspect_ratio,
            jpeg_draft=it.options.jpeg_draft,
        )
        generator = it.image_data_generator
        identity = transform is None or transform == _IDENTITY
        if direct and identity and img.mode in ("L", "RGB", "RGBA"):
            pixels = np.asarray(img)
            if pixels.ndim == 2:
                pixels = pixels[..., None]
            rescale = generator.rescale if generator and transform is not None else None
            if rescale:
                np.multiply(pixels, rescale, out=out, dtype=out.dtype)
            else:
                np.copyto(out, pixels)
        else:
            x = image_utils.img_to_array(img, data_format=it.data_format)
            if generator and transform is not None:
                x = generator.apply_transform(x, transform)
                x = generator.standardize(x)
            out[...] = x
        if hasattr(img, "close"):
            img.close()
    except BaseException:
        it._stats.add(decode_s=time.perf_counter() - start)
        raise
    it._stats.add(decode_s=time.perf_counter() - start, images=1)


def assemble(it: Any, plan: BatchPlan, batch_x: np.ndarray) -> Batch:
    """Saves the samples if `save_to_dir` is set and pairs the images with their labels."""
    indices = plan.indices
    batch_y: Any
    if it.save_to_dir:
        _save(it, plan, batch_x)
    if it.class_mode == "input":
        batch_y = batch_x.copy()
    elif it.class_mode in {"binary", "sparse"}:
        batch_y = np.asarray([it.classes[j] for j in indices], dtype=it.dtype)
    elif it.class_mode == "categorical":
        batch_y = np.zeros((len(batch_x), len(it.class_indices)), dtype=it.dtype)
        for i, j in enumerate(indices):
            batch_y[i, it.classes[j]] = 1.0
    elif it.class_mode == "multi_output":
        batch_y = [output[indices] for output in it.labels]
    elif it.class_mode == "raw":
        batch_y = it.labels[indices]
    else:
        return batch_x
    if it.sample_weight is None:
        return batch_x, batch_y
    return batch_x, batch_y, it.sample_weight[indices]


def _save(it: Any, plan: BatchPlan, batch_x: np.ndarray) -> None:
    hashes = plan.save_hashes or [0] * len(plan.indices)
    images = [image_utils.array_to_img(x, it.data_format, scale=True) for x in batch_x]
    names = [
        f"{it.save_prefix}_{j}_{hashes[i]}.{it.save_format}" for i, j in enumerate(plan.indices)
    ]
    saving.save(it, images, names)
