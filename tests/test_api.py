"""The public surface: exports, subclassing of Keras's own classes, the one-line swap."""

from __future__ import annotations

import inspect
import typing

import keras
import pytest
from keras.src.legacy.preprocessing import image as keras_image

import remote_keras as rk
from remote_keras.keras_agnostic.generator import GeneratorArguments
from remote_keras.pipeline.options import NAMES, LoaderOverrides

# The public API, pinned: a name added or dropped is a decision, made here too.
PUBLIC = [
    "BackupAndRestore",
    "ChecksumMismatchError",
    "DataFrameIterator",
    "DataVersionCallback",
    "DirectoryIterator",
    "EpochInputReport",
    "FsspecLoader",
    "ImageDataGenerator",
    "ImageDecodeError",
    "ImageLoadError",
    "InputStallCallback",
    "InvalidRowsError",
    "Iterator",
    "LoaderOptions",
    "LoaderStats",
    "MissingBackendError",
    "NumpyArrayIterator",
    "ObstoreLoader",
    "RetryPolicy",
    "Shard",
    "WorkerDiedError",
    "decode_image",
    "image_dataset_from_directory",
    "pin_url",
    "pinned_urls",
    "read_lakefs_ref",
    "read_table",
    "write_data_version",
]


def test_all_is_the_pinned_public_api_and_every_name_resolves():
    assert rk.__all__ == PUBLIC
    for name in rk.__all__:
        assert getattr(rk, name).__module__.startswith(("remote_keras.", "keras.")), name
    assert set(rk.__all__) <= set(dir(rk))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        rk.Nope  # noqa: B018


def test_what_users_pass_or_catch_is_exported(image_dir):
    import pandas as pd

    from remote_keras.errors import InvalidRowsError
    from remote_keras.pipeline.options import LoaderOptions

    assert rk.LoaderOptions is LoaderOptions and rk.InvalidRowsError is InvalidRowsError
    # `options=` in the generator's signature takes the exported class.
    assert inspect.signature(rk.ImageDataGenerator).parameters["options"].annotation == (
        "LoaderOptions | None"
    )
    gen = rk.ImageDataGenerator(options=rk.LoaderOptions(workers=2))
    assert gen.options.workers == 2
    directory, _ = image_dir
    with pytest.raises(rk.InvalidRowsError):  # what a dataframe with a missing path raises
        gen.flow_from_dataframe(pd.DataFrame({"filename": [None], "class": ["cat"]}), directory)


def test_generator_keywords_are_kerass_and_the_loader_options():
    """One typed keyword set: Keras's `ImageDataGenerator` arguments plus `LoaderOverrides`."""
    keras_names = [
        name
        for name, p in inspect.signature(keras_image.ImageDataGenerator.__init__).parameters.items()
        if name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD
    ]
    typed = typing.get_type_hints(GeneratorArguments)
    assert list(typed) == [*NAMES, *keras_names]
    assert set(typing.get_type_hints(LoaderOverrides)) == set(NAMES)
    kwargs = inspect.signature(rk.ImageDataGenerator.__init__).parameters["kwargs"]
    assert kwargs.annotation == "Unpack[GeneratorArguments]"
    for method in (rk.ImageDataGenerator.flow_from_directory,
                   rk.ImageDataGenerator.flow_from_dataframe):  # fmt: skip
        overrides = inspect.signature(method).parameters["overrides"]
        assert overrides.annotation == "Unpack[LoaderOverrides]"


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
