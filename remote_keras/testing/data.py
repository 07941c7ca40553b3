"""Synthetic images for the tests, the demo, the benchmark and the notebooks.

- `photo_like` / `photo_like_jpeg`: one image that compresses like a photo.
- `write_photo_dataset`: `count` photo-like JPEGs in class folders (the demo, the
  benchmark); `photo_dataset_frame` names them without writing.
- `smooth_image` / `write_class_tree`: the test suite's small class-folder tree (PNG and
  JPEG, odd sizes, a nested folder), compared batch for batch with stock Keras.
- `write_linked_jpegs`: many tiny valid JPEGs fast, as hard links to a few seed files
  (for scale tests of listings and uploads).
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, ImageFilter

if TYPE_CHECKING:
    import pandas as pd

TEST_CLASSES = ("cat", "dog", "bird")
MAX_LINKS_PER_FILE = 60_000  # ext4 allows at most 65,000 hard links to one file


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


def photo_dataset_frame(
    count: int, classes: Sequence[str] = ("cats", "dogs"), digits: int = 5
) -> pd.DataFrame:
    """The `filename` / `class` dataframe of `write_photo_dataset` (nothing is written).

    Image `i` is `<classes[i % len(classes)]>/<i, zero-padded to digits>.jpg`.
    """
    import pandas as pd

    labels = [classes[i % len(classes)] for i in range(count)]
    names = [f"{label}/{i:0{digits}d}.jpg" for i, label in enumerate(labels)]
    return pd.DataFrame({"filename": names, "class": labels})


def write_photo_dataset(
    root: str | os.PathLike,
    count: int,
    *,
    classes: Sequence[str] = ("cats", "dogs"),
    digits: int = 5,
    width: int = 500,
    height: int = 375,
    seed: int = 0,
) -> pd.DataFrame:
    """Writes `count` photo-like JPEGs under `root/<class>/` and returns their dataframe.

    Args:
        root: Folder to write into (created if needed).
        count: Number of images; they take turns over `classes`.
        classes: Class folder names.
        digits: Zero-padding of the file names.
        width: Width of each image in pixels.
        height: Height of each image in pixels.
        seed: Seed of the generator drawing every image in turn.

    Returns:
        `photo_dataset_frame(count, classes, digits)`: `filename` (relative) and `class`.
    """
    frame = photo_dataset_frame(count, classes, digits)
    rng = np.random.default_rng(seed)
    for name in frame["filename"]:
        path = Path(root, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(photo_like_jpeg(rng, width, height))
    return frame


def smooth_image(
    rng: np.random.Generator, height: int, width: int, mode: str = "RGB"
) -> Image.Image:
    """A small image with smooth structure plus noise, so that resizing matters."""
    yy, xx = np.mgrid[0:height, 0:width]
    base = (np.sin(xx / 3.0 + rng.random() * 6) + np.cos(yy / 4.0)) * 60 + 128
    channels = [base + rng.normal(0, 20, base.shape) for _ in range(3)]
    array = np.clip(np.stack(channels, -1), 0, 255).astype("uint8")
    return Image.fromarray(array).convert(mode)


def write_class_tree(
    root: str | os.PathLike,
    per_class: int = 7,
    seed: int = 0,
    classes: Sequence[str] = TEST_CLASSES,
) -> pd.DataFrame:
    """Writes the test suite's tree: `root/<class>/[nested/]<class>_<i>.(png|jpg)`.

    Image `i` of a class is `smooth_image` of 20 + i by 24 + 2i pixels, a JPEG for odd
    `i` and a PNG for even, in `nested/` when `i % 5 == 4`.

    Returns:
        A dataframe: `filename` (relative), `class`, `weight` (i + 1) and `value` (i).
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for label in classes:
        for i in range(per_class):
            sub = "nested/" if i % 5 == 4 else ""
            name = f"{label}/{sub}{label}_{i}.{'jpg' if i % 2 else 'png'}"
            path = Path(root, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            smooth_image(rng, 20 + i, 24 + 2 * i).save(path)
            rows.append({"filename": name, "class": label, "weight": float(i + 1), "value": i})
    return pd.DataFrame(rows)


def write_linked_jpegs(
    root: str | os.PathLike,
    count: int,
    *,
    classes: Sequence[str] = ("a", "b"),
    seed_files: int = 4,
    size: tuple[int, int] = (8, 8),
    digits: int = 6,
    seed: int = 0,
) -> pd.DataFrame:
    """Writes `count` tiny valid JPEGs fast: a few seed files, the rest hard links to them.

    Image `i` is `<classes[i % len(classes)]>/<i>.jpg` (as `photo_dataset_frame`); the
    first files are distinct JPEGs (`seed_files`, or more so that no file gets over
    60,000 links, under ext4's limit of 65,000), every other file is a hard link to one
    of them. Where hard links fail (another file system), the bytes are copied instead.

    Args:
        root: Folder to write into (created if needed).
        count: Number of files.
        classes: Class folder names.
        seed_files: Number of distinct images (at least).
        size: `(width, height)` of the images.
        digits: Zero-padding of the file names.
        seed: Seed of the generator drawing the seed images.

    Returns:
        The `filename` / `class` dataframe.
    """
    frame = photo_dataset_frame(count, classes, digits)
    names = list(frame["filename"])
    seeds = min(count, max(seed_files, -(-count // MAX_LINKS_PER_FILE)))
    rng = np.random.default_rng(seed)
    for label in classes:
        Path(root, label).mkdir(parents=True, exist_ok=True)
    seed_bytes = [photo_like_jpeg(rng, *size) for _ in range(seeds)]
    for i, name in enumerate(names):
        path = Path(root, name)
        path.unlink(missing_ok=True)
        if i < seeds:
            path.write_bytes(seed_bytes[i])
            continue
        try:
            os.link(Path(root, names[i % seeds]), path)
        except OSError:  # no hard links here (or too many): a copy will do
            path.write_bytes(seed_bytes[i % seeds])
    return frame
