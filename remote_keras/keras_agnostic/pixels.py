"""What Keras adds to a batch's pixels.

The Keras layer's side of `remote_keras.pipeline.batches.Pixels`: the core builds
batches without importing Keras, and asks the iterator, once per batch, for
these settings through `batch_pixels()`, which answers with `keras_pixels` and
its front's Keras's `floatx` and stock `ImageDataGenerator` (each front names
its Keras in `keras_api`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from remote_keras.pipeline.batches import Pixels

# What `ImageDataGenerator.get_random_transform` draws when the generator has no random
# augmentation: `apply_transform` then returns its input unchanged.
IDENTITY = {
    "theta": 0, "tx": 0, "ty": 0, "shear": 0, "zx": 1, "zy": 1,
    "flip_horizontal": False, "flip_vertical": False,
    "channel_shift_intensity": None, "brightness": None,
}  # fmt: skip
_STANDARDIZE_STEPS = (
    "preprocessing_function", "samplewise_center", "samplewise_std_normalization",
    "featurewise_center", "featurewise_std_normalization", "zca_whitening",
)  # fmt: skip


def keras_pixels(generator: Any, floatx: str, stock: Any) -> Pixels:
    """The `Pixels` of an iterator reading through `generator` (an `ImageDataGenerator` or `None`).

    `floatx` is Keras's default float type, `stock` its own `ImageDataGenerator` class.

    The direct path is allowed only when it provably computes what stock
    Keras computes: a generator whose `standardize` would only multiply by a
    Python number and whose `apply_transform` is Keras's own (which returns
    an identity transform's input unchanged).
    """
    if generator is None:
        return Pixels(floatx=floatx)
    direct = (
        type(generator).standardize is stock.standardize
        and type(generator).apply_transform is stock.apply_transform
        and not any(getattr(generator, step, None) for step in _STANDARDIZE_STEPS)
        and type(generator.rescale) in (int, float, type(None))
    )

    def augment(x: np.ndarray, transform: Any) -> np.ndarray:
        return generator.standardize(generator.apply_transform(x, transform))

    return Pixels(
        floatx=floatx,
        augment=augment if generator else None,
        direct=direct,
        rescale=generator.rescale,
        identity=IDENTITY,
    )
