"""Images to arrays without Keras: `decode_image`, `img_to_array`, `array_to_img`.

`decode_image` decodes what a loader returned exactly as `keras.utils.load_img`
does (colour modes, `target_size`, interpolation names, `keep_aspect_ratio`'s
center crop), and `img_to_array` / `array_to_img` do the arithmetic of
Keras's functions of the same names. Keras's global settings (`floatx`,
`image_data_format`) are arguments here: the Keras layer passes them in.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from remote_keras import errors

if TYPE_CHECKING:  # an alias of Any; importing it would run all of `remote_keras.storage.loaders`
    from remote_keras.storage.loaders.protocol import LoaderOutput


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

    Bytes and file-like objects are opened with Pillow; colour mode, resizing
    and `keep_aspect_ratio` are then exactly `load_img`'s. PIL images and
    numpy arrays (height, width, channels; values 0-255, made an image as
    `array_to_img(x, scale=False)` makes it) get the same conversion and
    resizing.

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
        data = array_to_img(data, "channels_last", scale=False, dtype="float32")
    if not isinstance(data, (io.BytesIO, Image.Image)):
        raise TypeError(
            "A loader must return bytes, a binary file-like object, a PIL image or a "
            f"numpy array. Received: {type(data).__name__} for {errors.redact(url)!r}"
        )
    try:
        if isinstance(data, Image.Image):
            img = data
        else:
            img = Image.open(data)
            if jpeg_draft and target_size is not None and img.format == "JPEG":
                img.draft("L" if color_mode == "grayscale" else "RGB", target_size[::-1])
        # Pillow decodes lazily: without this, a truncated file that needs no conversion or
        # resizing would fail later, at `np.asarray`, without its URL.
        img.load()
        return _convert_and_resize(img, **options)
    except Exception as exc:  # PIL raises many types for bad data
        if isinstance(exc, ValueError) and str(exc).startswith(_CONFIGURATION_ERRORS):
            raise
        shown = errors.redact(url)
        raise errors.ImageDecodeError(
            shown, f"Cannot decode image {shown!r}: {type(exc).__name__}: {_without_buffer(exc)}"
        ) from exc


# `load_img`'s interpolation names and the Pillow filters they select.
INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "hamming": Image.Resampling.HAMMING,
    "box": Image.Resampling.BOX,
    "lanczos": Image.Resampling.LANCZOS,
}
DATA_FORMATS = ("channels_last", "channels_first")


def img_to_array(img: Any, data_format: str, dtype: Any) -> np.ndarray:
    """A PIL image as a 3D array, as `keras.utils.img_to_array` computes it.

    Args:
        img: A PIL image (or anything `np.asarray` turns into a 2D or 3D array).
        data_format: `"channels_last"` or `"channels_first"`.
        dtype: The array's dtype (Keras's default is `floatx()`).

    Returns:
        A `(height, width, channels)` array, or `(channels, height, width)`.

    Raises:
        ValueError: an unknown `data_format`, or an image that is not 2D or 3D.
    """
    data_format = _check_data_format(data_format)
    x = np.asarray(img, dtype=dtype)
    if x.ndim == 3:
        return x.transpose(2, 0, 1) if data_format == "channels_first" else x
    if x.ndim == 2:
        shape = (1,) + x.shape if data_format == "channels_first" else x.shape + (1,)
        return x.reshape(shape)
    raise ValueError(f"Unsupported image shape: {x.shape}")


def array_to_img(x: Any, data_format: str, scale: bool = True, dtype: Any = "float32") -> Any:
    """A 3D array as a PIL image, as `keras.utils.array_to_img` computes it.

    Args:
        x: The array (or anything `np.asarray` accepts).
        data_format: `"channels_last"` or `"channels_first"`.
        scale: Stretch the values to 0-255 first.
        dtype: The dtype the arithmetic runs in (Keras's default is `floatx()`).

    Returns:
        An `"L"`, `"I"` (one channel above 255), `"RGB"` or `"RGBA"` image.

    Raises:
        ValueError: an unknown `data_format`, not 3 dimensions, or not 1, 3 or
            4 channels.
    """
    data_format = _check_data_format(data_format)
    x = np.asarray(x, dtype=dtype)
    if x.ndim != 3:
        raise ValueError(
            f"Expected image array to have rank 3 (single image). Got array with shape: {x.shape}"
        )
    if data_format == "channels_first":
        x = x.transpose(1, 2, 0)
    if scale:
        x = x - np.min(x)
        x_max = np.max(x)
        if x_max != 0:
            x /= x_max
        x *= 255
    channels = x.shape[2]
    if channels in (3, 4):
        return Image.fromarray(x.astype("uint8"), "RGB" if channels == 3 else "RGBA")
    if channels == 1:
        if np.max(x) > 255:  # 32-bit signed integers
            return Image.fromarray(x[:, :, 0].astype("int32"), "I")
        return Image.fromarray(x[:, :, 0].astype("uint8"), "L")
    raise ValueError(f"Unsupported channel number: {channels}")


def _check_data_format(data_format: str) -> str:
    """`data_format` in lower case, as Keras accepts it."""
    data_format = str(data_format).lower()
    if data_format not in DATA_FORMATS:
        raise ValueError(
            "The `data_format` argument must be one of {'channels_first', 'channels_last'}. "
            f"Received: data_format={data_format}"
        )
    return data_format


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
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"Invalid interpolation method {interpolation} specified. Supported methods "
            f"are {', '.join(INTERPOLATIONS)}"
        )
    resample = INTERPOLATIONS[interpolation]
    if not keep_aspect_ratio:
        return img.resize(size, resample)
    width, height = img.size
    crop_w = min(width, height * size[0] // size[1])
    crop_h = min(height, width * size[1] // size[0])
    left, top = (width - crop_w) // 2, (height - crop_h) // 2
    return img.resize(size, resample, box=(left, top, left + crop_w, top + crop_h))
