"""Helpers shared by the test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

# Every augmentation Keras's ImageDataGenerator offers, at values that change pixels.
AUGMENT = dict(
    rotation_range=25,
    width_shift_range=0.2,
    height_shift_range=0.1,
    shear_range=5,
    zoom_range=0.2,
    channel_shift_range=10.0,
    brightness_range=(0.7, 1.3),
    horizontal_flip=True,
    vertical_flip=True,
    rescale=1 / 255,
)


def assert_same_batch(stock, ours) -> None:
    """Asserts two batches (`x`, `(x, y)`, `(x, y, w)`, multi-output lists) are array-equal."""
    if isinstance(stock, tuple):
        assert isinstance(ours, tuple) and len(stock) == len(ours)
        for a, b in zip(stock, ours):
            assert_same_batch(a, b)
    elif isinstance(stock, list):
        assert len(stock) == len(ours)
        for a, b in zip(stock, ours):
            np.testing.assert_array_equal(a, b)
    else:
        assert stock.dtype == ours.dtype
        np.testing.assert_array_equal(stock, ours)


def png_bytes(pixels: np.ndarray) -> bytes:
    """Encodes a `uint8` array (height, width[, channels]) as PNG."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def noise_png(seed: int, size: int = 6) -> bytes:
    """A `size` x `size` RGB PNG of random pixels, the same for the same `seed`."""
    rng = np.random.default_rng(seed)
    return png_bytes(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
