"""Keras's arithmetic of `image_dataset_from_directory(format="grain")`, with public `keras.ops`.

Keras's grain path (Keras 3.13 and later) turns each decoded image into a
`float32` tensor on the CPU, adds a channel axis to a 2-D (grayscale) array,
moves the channels first for `"channels_first"`, and resizes with
`keras.ops.image.resize` (`crop_to_aspect_ratio`, `pad_to_aspect_ratio`);
labels become `int32` (`"int"`), `float32` of shape `(1,)` (`"binary"`) or
one-hot (`"categorical"`) tensors, and batches are each structure's
elements stacked with `keras.ops.stack`. The same ops here, through Keras's
public API, give the same tensors on every backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np


class KerasGrainArithmetic:
    """Keras's ops for one dataset's images, labels and batches (a `GrainArithmetic`).

    Args:
        image_size: `(height, width)`.
        interpolation: `keras.ops.image.resize`'s method.
        data_format: `"channels_last"` or `"channels_first"`.
        crop_to_aspect_ratio: Resize the central window of the target's ratio.
        pad_to_aspect_ratio: Resize the whole image and pad it.
    """

    def __init__(
        self,
        image_size: tuple[int, int],
        interpolation: str,
        data_format: str,
        crop_to_aspect_ratio: bool,
        pad_to_aspect_ratio: bool,
    ) -> None:
        if crop_to_aspect_ratio and pad_to_aspect_ratio:
            raise ValueError(
                "Only one of `pad_to_aspect_ratio`, `crop_to_aspect_ratio` can be set to `True`."
            )
        self.data_format = data_format
        self.resize_options = {  # `keras.ops.image.resize`'s, the same for every image
            "size": image_size,
            "interpolation": interpolation,
            "crop_to_aspect_ratio": crop_to_aspect_ratio,
            "pad_to_aspect_ratio": pad_to_aspect_ratio,
            "data_format": data_format,
        }
        self.cpu = _this_process_cpu()

    def image(self, pixels: np.ndarray) -> Any:
        """The decoded array to the resized `float32` image tensor."""
        with keras.device(self.cpu):
            image = keras.ops.convert_to_tensor(pixels, dtype="float32")
            if len(image.shape) == 2:
                image = keras.ops.expand_dims(image, axis=-1)
            if self.data_format == "channels_first":
                image = keras.ops.transpose(image, (2, 0, 1))
            return keras.ops.image.resize(image, **self.resize_options)

    def label(self, value: Any, label_mode: str, num_classes: int) -> Any:
        """One label to its tensor for `label_mode`."""
        with keras.device(self.cpu):
            if label_mode == "binary":
                return keras.ops.expand_dims(
                    keras.ops.convert_to_tensor(value, dtype="float32"), axis=-1
                )
            if label_mode == "categorical":
                return keras.ops.one_hot(
                    keras.ops.convert_to_tensor(value, dtype="int32"), num_classes
                )
            return keras.ops.convert_to_tensor(value, dtype="int32")

    def batch(self, values: Sequence[Any]) -> Any:
        """The elements stacked, structure by structure."""
        with keras.device(self.cpu):
            return keras.tree.map_structure(lambda *xs: keras.ops.stack(xs), *values)


def _this_process_cpu() -> Any:
    """The CPU Keras's grain path computes on: `"cpu"`, or this process's own on several JAX ones.

    With several JAX processes (`jax.distributed.initialize`), `"cpu"` names
    the first process's CPU: a batch made there is not this process's, and
    Keras's JAX `fit` cannot place it ("Cross-host transfers are not
    supported"; Keras's own `image_dataset_from_directory(format="grain")`
    fails so too, Keras 3.15.1).
    """
    if keras.backend.backend() != "jax":
        return "cpu"
    import jax

    return jax.local_devices(backend="cpu")[0] if jax.process_count() > 1 else "cpu"
