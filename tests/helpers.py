"""Helpers shared by the test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np
from fsspec.exceptions import FSTimeoutError
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


def put_objects(fs, objects: Mapping[str, bytes], timeout_s: float = 30, attempts: int = 3) -> None:
    """Writes test objects one at a time through an fsspec filesystem, each bounded in time.

    Concurrent PUTs of odd keys to `rclone serve s3` have twice gone unanswered in CI, once
    hanging the whole run; one at a time, with a write that gets no answer in `timeout_s`
    sent again, test setup cannot hang.
    """
    for path, data in objects.items():
        for attempt in range(attempts):
            try:
                fs.pipe_file(path, data, timeout=timeout_s)
                break
            except FSTimeoutError:
                if attempt == attempts - 1:
                    raise
