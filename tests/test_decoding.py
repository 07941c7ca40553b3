"""The core's decoding (no Keras) equals Keras's `load_img` and `img_to_array`."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest
from keras.src.utils import image_utils
from PIL import Image

from remote_keras.pipeline import decoding

INTERPOLATIONS = ["nearest", "bilinear", "bicubic", "hamming", "box", "lanczos"]
COLOR_MODES = ["grayscale", "rgb", "rgba"]
SIZES = [None, (7, 11), (13, 5)]  # None, wider and taller than the images' aspect ratio


def _encoded(img: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, format=fmt)
    return buffer.getvalue()


def _images() -> dict[str, bytes]:
    rng = np.random.default_rng(7)
    rgba = Image.fromarray(rng.integers(0, 256, (17, 23, 4), dtype=np.uint8), "RGBA")
    rgb = Image.fromarray(rng.integers(0, 256, (19, 14, 3), dtype=np.uint8), "RGB")
    gray = Image.fromarray(rng.integers(0, 256, (15, 21), dtype=np.uint8), "L")
    palette = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    deep = Image.fromarray(rng.integers(0, 65536, (12, 16), dtype=np.uint16))
    assert deep.mode.startswith("I;16")
    return {
        "png-rgba": _encoded(rgba, "PNG"),
        "png-gray": _encoded(gray, "PNG"),
        "png-palette": _encoded(palette, "PNG"),
        "png-16bit": _encoded(deep, "PNG"),
        "jpeg": _encoded(rgb, "JPEG"),
    }


IMAGES = _images()


def _stock(data: bytes, **options):
    img = image_utils.load_img(io.BytesIO(data), **options)
    return image_utils.img_to_array(img, data_format="channels_last", dtype="float32"), img.mode


@pytest.mark.parametrize("name", list(IMAGES))
@pytest.mark.parametrize("color_mode", COLOR_MODES)
def test_decode_equals_load_img_over_every_option(name, color_mode):
    data = IMAGES[name]
    cases = itertools.product(SIZES, INTERPOLATIONS, [False, True])
    for target_size, interpolation, keep in cases:
        options = dict(
            color_mode=color_mode,
            target_size=target_size,
            interpolation=interpolation,
            keep_aspect_ratio=keep,
        )
        expected, mode = _stock(data, **options)
        img = decoding.decode_image(data, "mem://x.png", **options)
        assert img.mode == mode, options
        ours = decoding.img_to_array(img, "channels_last", "float32")
        assert ours.dtype == expected.dtype, options
        np.testing.assert_array_equal(ours, expected, err_msg=str(options))


def test_sixteen_bit_grayscale_keeps_its_depth():
    img = decoding.decode_image(IMAGES["png-16bit"], "mem://x.png", color_mode="grayscale")
    assert img.mode.startswith("I")
    assert decoding.img_to_array(img, "channels_last", "float32").max() > 255


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first", "Channels_First"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "uint8", "int32"])
@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "I"])
def test_img_to_array_equals_keras(data_format, dtype, mode):
    rng = np.random.default_rng(3)
    if mode == "I":
        img = Image.fromarray(rng.integers(0, 70000, (5, 6), dtype=np.int32))
    else:
        channels = {"L": (), "RGB": (3,), "RGBA": (4,)}[mode]
        img = Image.fromarray(rng.integers(0, 256, (5, 6) + channels, dtype=np.uint8), mode)
    expected = image_utils.img_to_array(img, data_format=data_format, dtype=dtype)
    ours = decoding.img_to_array(img, data_format, dtype)
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_array_to_img_equals_keras(data_format, scale, channels, dtype):
    rng = np.random.default_rng(channels)
    shape = (6, 5, channels) if data_format == "channels_last" else (channels, 6, 5)
    x = rng.uniform(-3, 300, shape)
    expected = image_utils.array_to_img(x, data_format=data_format, scale=scale, dtype=dtype)
    ours = decoding.array_to_img(x, data_format, scale=scale, dtype=dtype)
    assert ours.mode == expected.mode  # `I` for one channel above 255 without scaling
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(expected))


def test_bad_arguments_raise_as_keras():
    with pytest.raises(ValueError, match="data_format"):
        decoding.img_to_array(Image.new("RGB", (2, 2)), "channels_middle", "float32")
    with pytest.raises(ValueError, match="Unsupported channel number: 2"):
        decoding.array_to_img(np.zeros((2, 2, 2)), "channels_last")
    with pytest.raises(ValueError, match="Invalid interpolation method cubic"):
        decoding.decode_image(IMAGES["jpeg"], "mem://x", target_size=(3, 3), interpolation="cubic")
    with pytest.raises(ValueError, match="color_mode must be"):
        decoding.decode_image(IMAGES["jpeg"], "mem://x", color_mode="cmyk")
