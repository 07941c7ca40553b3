"""The public surface: exports, subclassing of Keras's own classes, the one-line swap."""

from __future__ import annotations

import keras
from keras.src.legacy.preprocessing import image as keras_image

import remote_keras as rk


def test_exports_match_all():
    assert len(set(rk.__all__)) == len(rk.__all__)
    for name in rk.__all__:
        assert hasattr(rk, name), name
    for name in ("ImageDataGenerator", "DataFrameIterator", "DirectoryIterator", "Iterator",
                 "NumpyArrayIterator"):  # fmt: skip
        assert name in rk.__all__ and hasattr(rk, name)


def test_classes_subclass_keras_own(image_dir):
    directory, df = image_dir
    assert issubclass(rk.ImageDataGenerator, keras_image.ImageDataGenerator)
    assert rk.Iterator is keras_image.Iterator
    assert rk.NumpyArrayIterator is keras_image.NumpyArrayIterator
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory) as it:
        assert isinstance(it, keras_image.DataFrameIterator)
        assert isinstance(it, keras_image.Iterator)
        assert isinstance(it, keras.utils.PyDataset)
    with rk.ImageDataGenerator().flow_from_directory(directory) as it:
        assert isinstance(it, keras_image.DirectoryIterator)


def test_flow_on_arrays_is_stock():
    import numpy as np

    x = np.random.default_rng(0).random((8, 4, 4, 3))
    it = rk.ImageDataGenerator().flow(x, batch_size=4, shuffle=False)
    assert isinstance(it, keras_image.NumpyArrayIterator)
    np.testing.assert_array_equal(it[0], x[:4].astype("float32"))


def test_version_is_the_installed_distributions():
    import re
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    declared = re.search(r'^version = "([^"]+)"', pyproject, re.M)
    assert declared and rk.__version__ == declared.group(1)
