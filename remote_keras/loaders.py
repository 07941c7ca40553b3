"""Loaders read a path into bytes; `decode_image` turns what they return into a PIL image.

A loader is any callable `path -> bytes | file-like | PIL.Image.Image | numpy.ndarray`.
It may also offer `load_many(paths) -> list[bytes | BaseException]` to fetch a
whole batch at once; the default `FsspecLoader` does, so that an async backend
(s3fs, gcsfs, adlfs, HTTP) keeps a batch's requests in flight together on
fsspec's event loop instead of tying up one thread per request.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from keras.src.utils import image_utils
from PIL import Image

from remote_keras import errors, storage

LoaderOutput = Any  # bytes | file-like | PIL.Image.Image | numpy.ndarray
Loader = Callable[[str], LoaderOutput]


@runtime_checkable
class BatchLoader(Protocol):
    """A loader that can also fetch many paths in one call."""

    def __call__(self, path: str) -> LoaderOutput: ...

    def load_many(self, paths: Sequence[str]) -> list[LoaderOutput | BaseException]: ...


class FsspecLoader:
    """The default loader: local paths with `open`, URLs through fsspec.

    Each object is read with a single GET (no HEAD first) on the backends
    listed in `storage.PROTOCOL_DEFAULTS`.

    Args:
        storage_options: Passed to fsspec for every URL (credentials,
            `endpoint_url`, ...). Never shown in reprs or errors.
    """

    def __init__(self, storage_options: dict[str, Any] | None = None) -> None:
        self.filesystems = storage.FileSystems(storage_options)

    def __repr__(self) -> str:
        return "FsspecLoader()"

    def __call__(self, path: str) -> bytes:
        """Reads all bytes of `path`.

        Raises:
            FileNotFoundError, PermissionError, ImageLoadError: naming `path`.
        """
        with errors.reading(path):
            if not storage.is_url(path):
                with open(path, "rb") as f:
                    return f.read()
            fs, inner = self.filesystems.resolve(path)
            return fs.cat_file(inner)

    def load_many(self, paths: Sequence[str]) -> list[bytes | BaseException]:
        """Reads several paths concurrently where the backend allows it.

        Args:
            paths: Paths or URLs, possibly repeated.

        Returns:
            One entry per path, in order: its bytes, or the exception
            (already naming the path) that reading it raised.
        """
        results: list[bytes | BaseException] = [b""] * len(paths)
        local = [i for i, p in enumerate(paths) if not storage.is_url(p)]
        for i in local:
            results[i] = self._capture(paths[i])
        remote = [p for p in paths if storage.is_url(p)]
        positions = [i for i, p in enumerate(paths) if storage.is_url(p)]
        if not remote:
            return results
        try:
            groups = self.filesystems.group(remote)
        except Exception as exc:  # noqa: BLE001 - reported per path
            for i in positions:
                results[i] = errors.translate(paths[i], exc)
            return results
        for fs, members in groups.items():
            where = [positions[j] for j, _ in members]
            inner = [p for _, p in members]
            if storage.is_async(fs):
                fetched = fs.cat_ranges(inner, None, None, on_error="return")
            else:
                fetched = [self._capture_fs(fs, p) for p in inner]
            for i, value in zip(where, fetched):
                results[i] = (
                    errors.translate(paths[i], value) if isinstance(value, BaseException) else value
                )
        return results

    def _capture(self, path: str) -> bytes | BaseException:
        try:
            return self(path)
        except Exception as exc:  # noqa: BLE001 - returned, raised by the caller
            return exc

    @staticmethod
    def _capture_fs(fs: Any, path: str) -> bytes | BaseException:
        try:
            return fs.cat_file(path)
        except Exception as exc:  # noqa: BLE001 - returned, raised by the caller
            return exc


def decode_image(
    data: LoaderOutput,
    url: str,
    color_mode: str = "rgb",
    target_size: tuple[int, int] | None = None,
    interpolation: str = "nearest",
    keep_aspect_ratio: bool = False,
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

    Returns:
        A PIL image.

    Raises:
        ImageDecodeError: `data` is not a decodable image.
        TypeError: the loader returned an unsupported type.
    """
    options = dict(
        color_mode=color_mode,
        target_size=target_size,
        interpolation=interpolation,
        keep_aspect_ratio=keep_aspect_ratio,
    )
    if isinstance(data, (bytes, bytearray, memoryview)):
        stream: io.BytesIO | None = io.BytesIO(data)
    elif isinstance(data, io.BytesIO):
        stream = data
    elif hasattr(data, "read"):
        try:
            stream = io.BytesIO(data.read())
        finally:
            if hasattr(data, "close"):
                data.close()
    else:
        stream = None
    try:
        if stream is not None:
            return image_utils.load_img(stream, **options)
        if isinstance(data, np.ndarray):
            data = image_utils.array_to_img(data, data_format="channels_last", scale=False)
        if isinstance(data, Image.Image):
            return _convert_and_resize(data, **options)
    except (ValueError, TypeError) as exc:
        if "interpolation" in str(exc) or "color_mode" in str(exc):
            raise
        raise errors.ImageDecodeError(
            errors.redact(url), f"Cannot decode image {errors.redact(url)!r}: {exc}"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for bad data
        raise errors.ImageDecodeError(
            errors.redact(url),
            f"Cannot decode image {errors.redact(url)!r}: {type(exc).__name__}: {exc}",
        ) from exc
    raise TypeError(
        "A loader must return bytes, a binary file-like object, a PIL image or a "
        f"numpy array. Received: {type(data).__name__} for {errors.redact(url)!r}"
    )


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
