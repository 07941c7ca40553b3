"""`decode_image`: what a loader returned, decoded with stock `keras.utils.load_img` semantics."""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np
from keras.src.utils import image_utils
from PIL import Image

from remote_keras import errors
from remote_keras.loaders.protocol import LoaderOutput


def decode_image(
    data: LoaderOutput,
    url: str,
    color_mode: str = "rgb",
    target_size: tuple[int, int] | None = None,
    interpolation: str = "nearest",
    keep_aspect_ratio: bool = False,
    jpeg_draft: bool = False,
) -> Image.Image:
    """Decodes what a loader returned, with stock `keras.utils.load_img` semantics.

    Bytes and file-like objects go through Keras's own `load_img`, so colour
    mode, resizing and `keep_aspect_ratio` are exactly stock. PIL images and
    numpy arrays (height, width[, channels], values 0-255) get the same
    conversion and resizing.

    Args:
        data: Bytes, a binary file-like object, a PIL image or a numpy array.
        url: Where `data` came from, for error messages.
        color_mode: One of `"grayscale"`, `"rgb"`, `"rgba"`.
        target_size: `(height, width)`, or `None` to keep the size.
        interpolation: Resampling method name, as in `load_img`.
        keep_aspect_ratio: Center-crop to the target aspect ratio first.
        jpeg_draft: Let Pillow decode a JPEG at 1/2, 1/4 or 1/8 scale when
            that is still at least `target_size` (`Image.draft`). About 3x
            faster on 2-megapixel photos; pixels differ from stock Keras's.

    Returns:
        A PIL image.

    Raises:
        ImageDecodeError: `data` is not a decodable image.
        TypeError: the loader returned an unsupported type.
    """
    options: dict[str, Any] = dict(
        color_mode=color_mode,
        target_size=target_size,
        interpolation=interpolation,
        keep_aspect_ratio=keep_aspect_ratio,
    )
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = io.BytesIO(data)
    elif hasattr(data, "read") and not isinstance(data, io.BytesIO):
        source = data
        try:
            data = io.BytesIO(source.read())
        finally:
            if hasattr(source, "close"):
                source.close()
    if isinstance(data, np.ndarray):
        data = image_utils.array_to_img(data, data_format="channels_last", scale=False)
    if not isinstance(data, (io.BytesIO, Image.Image)):
        raise TypeError(
            "A loader must return bytes, a binary file-like object, a PIL image or a "
            f"numpy array. Received: {type(data).__name__} for {errors.redact(url)!r}"
        )
    try:
        if isinstance(data, Image.Image):
            return _convert_and_resize(data, **options)
        if jpeg_draft and target_size is not None:
            img = Image.open(data)
            if img.format == "JPEG":
                img.draft("L" if color_mode == "grayscale" else "RGB", target_size[::-1])
                return _convert_and_resize(img, **options)
            data.seek(0)
        return image_utils.load_img(data, **options)
    except Exception as exc:  # PIL raises many types for bad data
        if isinstance(exc, ValueError) and str(exc).startswith(_CONFIGURATION_ERRORS):
            raise
        shown = errors.redact(url)
        raise errors.ImageDecodeError(
            shown, f"Cannot decode image {shown!r}: {type(exc).__name__}: {_without_buffer(exc)}"
        ) from exc


def _without_buffer(exc: BaseException) -> str:
    """Pillow's message without the in-memory buffer's repr (`<_io.BytesIO object at 0x...>`)."""
    return re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-f]+>", "", str(exc))


# `load_img`'s own messages for bad arguments, which are not data errors.
_CONFIGURATION_ERRORS = ("Invalid interpolation", "color_mode must be")


def _convert_and_resize(
    img: Image.Image,
    color_mode: str,
    target_size: tuple[int, int] | None,
    interpolation: str,
    keep_aspect_ratio: bool,
) -> Image.Image:
    """Colour conversion and resizing of an already decoded image, as `load_img` does."""
    wanted = {
        "grayscale": ("L", ("L", "I;16", "I")),
        "rgb": ("RGB", ("RGB",)),
        "rgba": ("RGBA", ("RGBA",)),
    }
    if color_mode not in wanted:
        raise ValueError('color_mode must be "grayscale", "rgb", or "rgba"')
    mode, accepted = wanted[color_mode]
    if img.mode not in accepted:
        img = img.convert(mode)
    if target_size is None:
        return img
    size = (target_size[1], target_size[0])
    if img.size == size:
        return img
    if interpolation not in image_utils.PIL_INTERPOLATION_METHODS:
        raise ValueError(
            f"Invalid interpolation method {interpolation} specified. Supported methods "
            f"are {', '.join(image_utils.PIL_INTERPOLATION_METHODS)}"
        )
    resample = image_utils.PIL_INTERPOLATION_METHODS[interpolation]
    if not keep_aspect_ratio:
        return img.resize(size, resample)
    width, height = img.size
    crop_w = min(width, height * size[0] // size[1])
    crop_h = min(height, width * size[1] // size[0])
    left, top = (width - crop_w) // 2, (height - crop_h) // 2
    return img.resize(size, resample, box=(left, top, left + crop_w, top + crop_h))
