"""Keras's names with no public home, where the installed Keras keeps them."""

from __future__ import annotations

import sys
import types

import pytest

from remote_keras.keras_lines import private_homes


def test_the_installed_keras3_keeps_each_name_where_the_layer_reads_it():
    keras = pytest.importorskip("keras")
    if not keras.__version__.startswith("3."):
        pytest.skip("Keras 2 here: test_the_installed_keras2s_dataframe_iterator checks it")
    image = private_homes.keras3_legacy_image()
    for name in ("ImageDataGenerator", "Iterator", "DataFrameIterator", "DirectoryIterator"):
        assert isinstance(getattr(image, name), type), name
    assert callable(private_homes.keras3_print_msg())
    file_utils = private_homes.keras3_file_utils()
    assert all(callable(getattr(file_utils, name)) for name in ("exists", "File", "copy"))


def test_the_keras2_dataframe_iterator_is_beside_its_public_iterator(monkeypatch):
    home = types.ModuleType("keras2_image_stand_in")  # Keras 2's `preprocessing/image.py`

    class Iterator:
        pass

    class DataFrameIterator(Iterator):
        pass

    Iterator.__module__ = home.__name__
    home.DataFrameIterator = DataFrameIterator  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, home.__name__, home)
    assert private_homes.keras2_dataframe_iterator(Iterator) is DataFrameIterator


def test_the_installed_keras2s_dataframe_iterator():
    """Run by `make test-keras2` (TensorFlow 2.15's Keras 2)."""
    keras = pytest.importorskip("keras")
    if not keras.__version__.startswith("2."):
        pytest.skip("Keras 3 here: `make test-keras2` runs this on Keras 2.15")
    public = keras.preprocessing.image
    found = private_homes.keras2_dataframe_iterator(public.Iterator)
    assert issubclass(found, public.Iterator) and found.__name__ == "DataFrameIterator"
