"""`KerasHooks`: what the shared iterator cores ask of Keras 3 (defaults, messages, pixels)."""

from __future__ import annotations

from typing import Any

import keras

from remote_keras.keras3.keras_src import legacy_image, print_msg
from remote_keras.keras_agnostic.pixels import keras_pixels
from remote_keras.pipeline.batches import Pixels


class KerasHooks:
    """Mixin for Keras 3's iterators: its `floatx`, data format, printer and `Iterator.__init__`."""

    image_data_generator: Any

    def batch_pixels(self) -> Pixels:
        """Keras's `floatx` and the generator's transform and standardization, as they are now.

        Returns:
            The `Pixels` of the next batch (`remote_keras.keras_agnostic.pixels`).
        """
        stock = legacy_image.ImageDataGenerator
        return keras_pixels(self.image_data_generator, keras.config.floatx(), stock)

    def _keras_floatx(self) -> str:
        return keras.config.floatx()

    def _keras_image_data_format(self) -> str:
        return keras.config.image_data_format()

    def _keras_print(self, message: str) -> None:
        print_msg(message)

    def _keras_iterator_init(self, n: int, batch_size: int, shuffle: bool, seed: Any) -> None:
        legacy_image.Iterator.__init__(self, n, batch_size, shuffle, seed)
