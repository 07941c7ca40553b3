"""What Keras adds to a batch's pixels, and what the iterator cores ask of a front's Keras.

The Keras layer's side of `remote_keras.pipeline.batches.Pixels`: the core builds
batches without importing Keras, and asks the iterator, once per batch, for
these settings through `batch_pixels()`, which `KerasHooks` answers with
`keras_pixels` and its front's Keras's `floatx` and stock `ImageDataGenerator`.
`KerasHooks` also gives the cores that Keras's data format, printer and
`Iterator.__init__`; each front names its Keras in `keras_api`.
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


class KerasHooks:
    """Mixin for a front's iterators: its Keras's `floatx`, data format, printer and `Iterator`.

    Each front sets `keras_api` on its iterators: an object or module with
    `floatx()`, `image_data_format()`, `print_msg(message)`, and its Keras's
    `Iterator` and `ImageDataGenerator` classes.
    """

    keras_api: Any
    image_data_generator: Any

    def batch_pixels(self) -> Pixels:
        """Keras's `floatx` and the generator's transform and standardization, as they are now.

        Returns:
            The `Pixels` of the next batch (see `keras_pixels`).
        """
        api = self.keras_api
        return keras_pixels(self.image_data_generator, api.floatx(), api.ImageDataGenerator)

    def _keras_floatx(self) -> str:
        return self.keras_api.floatx()

    def _keras_image_data_format(self) -> str:
        return self.keras_api.image_data_format()

    def _keras_print(self, message: str) -> None:
        self.keras_api.print_msg(message)

    def _keras_iterator_init(self, n: int, batch_size: int, shuffle: bool, seed: Any) -> None:
        self.keras_api.Iterator.__init__(self, n, batch_size, shuffle, seed)
