"""Each behaviour Keras's own tests check of `image_dataset_from_directory`, through S3.

Keras's test file (`keras/src/utils/image_dataset_utils_test.py`, 3.15) checks, for
`format="tf"` and `"grain"`: images without labels (also files beside the class folders),
each `label_mode`'s shapes and dtypes, the static shape inside a `tf.function`, sample
counts, colour modes, the three subsets, explicit labels (and their count), nested folders
with `follow_links`, no images, crop and pad, unbatched samples, and shuffling (passes
differ for `"tf"`, repeat for `"grain"`; the same seed repeats). Here the same folders are
uploaded to the S3 server and read with `rk.image_dataset_from_directory`; every case must
give stock Keras's elements (array-equal, two passes) on the local copy, or its error.
"""

from __future__ import annotations

import os
import uuid

import keras
import numpy as np
import pytest
from packaging.version import Version

import remote_keras as rk
from tests.helpers import put_folder

FORMATS = ["tf", "grain"] if Version(keras.__version__) >= Version("3.13") else ["tf"]


def _images(root, classes: int, count: int, mode: str = "RGB", nested: bool = False) -> None:
    """`count` random 20x20 images spread over `classes` class folders (and sub-folders)."""
    rng = np.random.default_rng(classes * 100 + count)
    folders = []
    for c in range(classes):
        base = os.path.join(root, f"class_{c}")
        folders.append(base)
        if nested:
            folders += [os.path.join(base, "sub_1"), os.path.join(base, "sub_1", "deeper")]
    for folder in folders:
        os.makedirs(folder, exist_ok=True)
    for i in range(count):
        channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
        array = rng.integers(0, 256, (20, 20, channels), dtype=np.uint8)
        image = keras.utils.array_to_img(array, scale=False)
        image.save(
            os.path.join(folders[i % len(folders)], f"im_{i}.{'jpg' if mode == 'RGB' else 'png'}")
        )


def _layout(root, name: str) -> str:
    """The folder of layout `name` under `root`, made once."""
    where = os.path.join(root, name)
    if os.path.isdir(where):
        return where
    if name == "two":
        _images(where, 2, 16)
    elif name == "four":
        _images(where, 4, 15)
    elif name == "rgba":
        _images(where, 3, 12, "RGBA")
    elif name == "gray":
        _images(where, 3, 12, "L")
    elif name == "ten":
        _images(where, 2, 10)
    elif name == "nested":
        _images(where, 2, 25, nested=True)
    elif name == "loose":  # files beside the class folders too
        _images(where, 2, 7)
        rng = np.random.default_rng(9)
        for i in range(3):
            array = rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)
            keras.utils.array_to_img(array, scale=False).save(os.path.join(where, f"top_{i}.jpg"))
    elif name == "one":
        _images(where, 1, 4)
    elif name == "three":
        _images(where, 3, 6)
    elif name == "empty":  # class folders without images (a store has no empty folders)
        for c in range(2):
            os.makedirs(os.path.join(where, f"class_{c}"))
            with open(os.path.join(where, f"class_{c}", "notes.txt"), "w") as f:
                f.write("not an image")
    return where


@pytest.fixture(scope="module")
def folders(tmp_path_factory, s3_server):
    """The local folders, made on demand, and their copies on S3 (`url_of`)."""
    import s3fs

    from tests.conftest import SETUP_CLIENT

    root = str(tmp_path_factory.mktemp("keras_cases"))
    fs = s3fs.S3FileSystem(**s3_server.storage_options, **SETUP_CLIENT)
    prefix = f"data/keras-cases-{uuid.uuid4().hex[:8]}"
    uploaded: dict[str, str] = {}

    def local_and_url(name: str) -> tuple[str, str]:
        local = _layout(root, name)
        if name not in uploaded:
            put_folder(fs, local, f"{prefix}/{name}")
            uploaded[name] = f"s3://{prefix}/{name}"
        return local, uploaded[name]

    return local_and_url


def _numpy(element):
    return [keras.ops.convert_to_numpy(x) for x in keras.tree.flatten(element)]


def _passes(dataset, count: int = 2) -> list[list]:
    return [[_numpy(element) for element in dataset] for _ in range(count)]


def _assert_same(stock, ours) -> None:
    assert ours.class_names == stock.class_names
    expected, got = _passes(stock), _passes(ours)
    for a_pass, b_pass in zip(expected, got):
        assert len(a_pass) == len(b_pass)
        for a, b in zip(a_pass, b_pass):
            assert [(x.dtype, x.shape) for x in a] == [(y.dtype, y.shape) for y in b]
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)


CASES = [
    ("loose", dict(labels=None, batch_size=5)),
    ("two", dict(label_mode="int", batch_size=8)),
    ("two", dict(label_mode="binary", batch_size=8)),
    ("two", dict(label_mode="categorical", batch_size=8)),
    ("four", dict(label_mode=None, batch_size=8)),
    ("four", dict(label_mode="categorical", batch_size=8)),
    ("rgba", dict(color_mode="rgba", batch_size=8)),
    ("gray", dict(color_mode="grayscale", batch_size=8)),
    ("ten", dict(validation_split=0.2, subset="training", seed=1337, batch_size=10)),
    ("ten", dict(validation_split=0.2, subset="validation", seed=1337, batch_size=10)),
    ("ten", dict(validation_split=0.2, subset="both", seed=1337, batch_size=10)),
    ("one", dict(labels=[0, 1, 0, 1], shuffle=False, batch_size=8)),
    ("three", dict(labels=[0, 1, 0, 1, 1, 1], shuffle=False, batch_size=8)),
    ("nested", dict(label_mode=None, follow_links=True, batch_size=8)),
    ("two", dict(crop_to_aspect_ratio=True, batch_size=5)),
    ("two", dict(pad_to_aspect_ratio=True, batch_size=5)),
    ("two", dict(batch_size=None, label_mode=None, shuffle=False)),
    ("nested", dict(label_mode=None, follow_links=True, shuffle=False, batch_size=8)),
    ("nested", dict(label_mode=None, shuffle=True, seed=1337, batch_size=8)),
    ("nested", dict(label_mode=None, shuffle=False, validation_split=0.2, subset="both", seed=1)),
    ("nested", dict(label_mode=None, validation_split=0.2, subset="both", seed=1337)),
]


@pytest.mark.slow
@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize(
    ("layout", "kwargs"), CASES, ids=[f"{n}-{'-'.join(map(str, k.values()))}" for n, k in CASES]
)
def test_keras_case_through_s3_equals_keras_locally(folders, s3_options, layout, kwargs, format):
    local, url = folders(layout)
    kwargs = dict(dict(image_size=(18, 18), format=format, seed=7), **kwargs)
    stock = keras.utils.image_dataset_from_directory(local, **kwargs)
    ours = rk.image_dataset_from_directory(url, storage_options=s3_options, **kwargs)
    if kwargs.get("subset") == "both":
        for s, o in zip(stock, ours):
            _assert_same(s, o)
    else:
        _assert_same(stock, ours)


@pytest.mark.slow
@pytest.mark.parametrize("format", FORMATS)
def test_passes_reshuffle_for_tf_and_repeat_for_grain_through_s3(folders, s3_options, format):
    _, url = folders("nested")
    kwargs = dict(image_size=(18, 18), label_mode=None, seed=1337, batch_size=8, format=format)
    ours = rk.image_dataset_from_directory(url, storage_options=s3_options, **kwargs)
    first, second = (np.concatenate([b[0] for b in p]) for p in _passes(ours))
    again = rk.image_dataset_from_directory(url, storage_options=s3_options, **kwargs)
    np.testing.assert_array_equal(np.concatenate([b[0] for b in _passes(again, 1)[0]]), first)
    assert np.array_equal(first, second) == (format == "grain")


@pytest.mark.slow
def test_static_shape_inside_a_tf_function_through_s3(folders, s3_options):
    import tensorflow as tf

    _, url = folders("two")
    ours = rk.image_dataset_from_directory(
        url, storage_options=s3_options, batch_size=8, image_size=(18, 18)
    )
    shapes = []

    @tf.function
    def first_shape(dataset):
        for images, _ in dataset.take(1):
            shapes.append(images.shape.as_list())

    first_shape(ours)
    assert shapes == [[None, 18, 18, 3]]


@pytest.mark.slow
@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize(
    ("layout", "kwargs", "phrase"),
    [
        ("one", dict(labels=[0, 1, 0], shuffle=False), "match the number of files"),
        ("empty", dict(), "No images found"),
    ],
)
def test_keras_errors_through_s3(folders, s3_options, layout, kwargs, phrase, format):
    local, url = folders(layout)
    with pytest.raises(ValueError, match=phrase):
        keras.utils.image_dataset_from_directory(local, format=format, **kwargs)
    with pytest.raises(ValueError, match=phrase):
        rk.image_dataset_from_directory(url, storage_options=s3_options, format=format, **kwargs)
