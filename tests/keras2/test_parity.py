"""On Keras 2, batches equal stock `tf.keras.preprocessing.image`'s on the same local files."""

from __future__ import annotations

import numpy as np
import pytest

import remote_keras as rk
from tests.helpers import AUGMENT, assert_same_batch

SIZE = dict(target_size=(6, 6), batch_size=5)


def _both(stock_image, kwargs=None):
    kwargs = kwargs or {}
    return rk.ImageDataGenerator(**kwargs), stock_image.ImageDataGenerator(**kwargs)


def test_the_front_is_keras_2_and_subclasses_its_classes(stock_image, tfk, image_dir):
    directory, df = image_dir
    assert rk._front() == "keras2"
    assert issubclass(rk.ImageDataGenerator, tfk.preprocessing.image.ImageDataGenerator)
    ours = rk.ImageDataGenerator().flow_from_directory(directory, **SIZE)
    with ours:
        assert isinstance(ours, tfk.preprocessing.image.DirectoryIterator)
        assert isinstance(ours, tfk.utils.Sequence)
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, **SIZE) as ours:
        assert isinstance(ours, stock_image.DataFrameIterator)
    assert rk.NumpyArrayIterator is tfk.preprocessing.image.NumpyArrayIterator


@pytest.mark.parametrize(
    "class_mode, subset",
    [
        ("categorical", None),
        ("binary", "training"),
        ("sparse", "validation"),
        ("input", "training"),
        (None, "validation"),
    ],
)
def test_directory_batches_equal_stock(stock_image, image_dir, class_mode, subset):
    directory, _ = image_dir
    two = sorted(set(image_dir[1]["class"]))[:2] if class_mode == "binary" else None
    gens = _both(stock_image, dict(AUGMENT, validation_split=0.3))
    kwargs = dict(SIZE, class_mode=class_mode, classes=two, seed=11, subset=subset)
    ours, stock = (g.flow_from_directory(directory, **kwargs) for g in gens)
    with ours:
        assert ours.filenames == stock.filenames
        for i in range(len(stock)):
            assert_same_batch(ours[i], stock[i])
    ours, stock = (g.flow_from_directory(directory, **kwargs) for g in gens)
    with ours:  # next(): the stream, three epochs, permutations and seeds rolling over
        for _ in range(3 * len(stock)):
            assert_same_batch(next(ours), next(stock))


@pytest.mark.parametrize("class_mode", ["categorical", "binary", "sparse", "raw", "input", None])
def test_dataframe_batches_equal_stock(stock_image, image_dir, class_mode):
    directory, df = image_dir
    df = df.assign(weight=np.linspace(0.5, 2, len(df)), value=np.arange(len(df), dtype="float32"))
    if class_mode == "binary":
        df = df[df["class"].isin(sorted(set(df["class"]))[:2])]
    y_col = "value" if class_mode == "raw" else "class"
    gens = _both(stock_image, dict(AUGMENT, validation_split=0.25))
    for subset in ("training", "validation"):
        kwargs = dict(SIZE, class_mode=class_mode, y_col=y_col, weight_col="weight", seed=4)
        ours, stock = (g.flow_from_dataframe(df, directory, subset=subset, **kwargs) for g in gens)
        with ours:
            for i in range(len(stock)):
                assert_same_batch(ours[i], stock[i])
        ours, stock = (g.flow_from_dataframe(df, directory, subset=subset, **kwargs) for g in gens)
        with ours:  # next(): two epochs of the stream
            for _ in range(2 * len(stock)):
                assert_same_batch(next(ours), next(stock))


def test_dataframe_of_urls_from_s3_equals_stock_on_local_files(
    stock_image, image_dir, s3_images, s3_options
):
    directory, df = image_dir
    url, _ = s3_images
    ours = rk.ImageDataGenerator(**AUGMENT, storage_options=s3_options)
    stock = stock_image.ImageDataGenerator(**AUGMENT)
    remote = df.assign(filename=[f"{url}/{name}" for name in df["filename"]])
    with ours.flow_from_dataframe(remote, seed=2, **SIZE) as it:
        local = stock.flow_from_dataframe(df, directory, seed=2, **SIZE)
        for i in range(len(local)):
            assert_same_batch(it[i], local[i])
