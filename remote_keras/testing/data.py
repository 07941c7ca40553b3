"""Synthetic, photo-like images for the demo, benchmark and notebooks."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageFilter


def photo_like(rng: np.random.Generator, width: int = 500, height: int = 375) -> Image.Image:
    """An RGB image that compresses like a photo: smooth shapes, edges and fine texture.

    Args:
        rng: Source of randomness; the same seed gives the same image.
        width: Width in pixels.
        height: Height in pixels.

    Returns:
        A PIL image in mode `"RGB"`.
    """
    small = rng.integers(0, 256, (max(2, height // 40), max(2, width // 40), 3), dtype=np.uint8)
    base = Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC)
    shapes = np.asarray(base, dtype=np.float32)
    yy, xx = np.mgrid[0:height, 0:width]
    for _ in range(4):  # a few hard-edged regions, like objects
        cy, cx, r = rng.integers(0, height), rng.integers(0, width), rng.integers(20, 120)
        mask = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        shapes[mask] = shapes[mask] * 0.5 + rng.integers(0, 256, 3) * 0.5
    texture = rng.normal(0, 26, (height, width, 3)).astype(np.float32)
    image = Image.fromarray(np.clip(shapes + texture, 0, 255).astype(np.uint8))
    return image.filter(ImageFilter.GaussianBlur(0.5))


def photo_like_jpeg(
    rng: np.random.Generator, width: int = 500, height: int = 375, quality: int = 90
) -> bytes:
    """Encodes `photo_like(rng, width, height)` as a JPEG (about 100 KB at 500x375)."""
    buffer = io.BytesIO()
    photo_like(rng, width, height).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()
