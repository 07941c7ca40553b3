"""How `model.fit` drives an iterator: each image read once per epoch, epoch 0 first.

TensorFlow's `fit` reads batches 0 and 1 to infer the tensor spec, then resets
its epoch iterator (`on_epoch_end()`) before epoch 0; `evaluate` resets before
every pass. Neither may shift the epoch numbering or cost extra reads.
"""

from __future__ import annotations

import keras
import numpy as np
import pandas as pd
import pytest
from keras.src.legacy.preprocessing import image as keras_image

import remote_keras as rk
from tests.helpers import fit_record


def _fit_record(iterator, epochs: int, shuffle: bool = True) -> list[list[int]]:
    """The labels of every batch `fit` trained on, step by step."""
    return [list(labels) for _, labels in fit_record(iterator, epochs, shuffle)]


def _indexed(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(row=np.arange(len(df), dtype="float32"))


def _epoch_batches(it, epoch: int) -> set[frozenset[int]]:
    """The batches of `epoch` read by hand from a fresh copy of the iterator's configuration."""
    return {frozenset(int(v) for v in it.labels[it._planner.order(epoch)[i : i + 4]]) for i in
            range(0, it.n, 4)}  # fmt: skip


@pytest.fixture
def rows_iterator(s3_images, s3_options, s3_proxy):
    """A shuffling, seeded iterator on S3 whose labels are the row numbers; proxy counts reset."""
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_dataframe(
        _indexed(df), url, y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4,
        seed=7,
    ) as it:  # fmt: skip
        s3_proxy.reset()
        yield it


@pytest.mark.slow
def test_fit_reads_each_image_once_per_epoch_and_starts_at_epoch_0(rows_iterator, s3_proxy):
    it = rows_iterator
    seen = _fit_record(it, epochs=3)
    counts = s3_proxy.reset()
    assert it.epoch == 3
    for epoch in range(3):
        trained = {frozenset(b) for b in seen[epoch * len(it) : (epoch + 1) * len(it)]}
        assert trained == _epoch_batches(it, epoch), epoch
    assert counts == {"GET": 3 * it.n}, counts


@pytest.mark.slow
def test_a_second_fit_continues_the_stream(rows_iterator, s3_proxy):
    it = rows_iterator
    _fit_record(it, epochs=1)
    second = _fit_record(it, epochs=1)
    assert {frozenset(b) for b in second} == _epoch_batches(it, 1)
    assert s3_proxy.reset() == {"GET": 2 * it.n}


@pytest.mark.slow
def test_validation_iterator_reads_once_per_epoch(s3_images, s3_options, s3_proxy):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    kwargs = dict(y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4)
    with (
        gen.flow_from_dataframe(_indexed(df), url, seed=1, **kwargs) as train,
        gen.flow_from_dataframe(_indexed(df), url, shuffle=False, **kwargs) as val,
    ):
        model = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(1)])  # fmt: skip
        model.compile("sgd", "mse")
        s3_proxy.reset()
        model.fit(train, validation_data=val, epochs=2, verbose=0)
        assert val.epoch == 2
    assert s3_proxy.reset() == {"GET": 4 * len(df)}


@pytest.mark.slow
def test_fit_trains_on_the_same_batches_as_stock_keras(image_dir):
    directory, df = image_dir
    kwargs = dict(y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4, shuffle=False)
    stock = keras_image.ImageDataGenerator().flow_from_dataframe(_indexed(df), directory, **kwargs)
    with rk.ImageDataGenerator().flow_from_dataframe(_indexed(df), directory, **kwargs) as ours:
        assert _fit_record(ours, 2, shuffle=False) == _fit_record(stock, 2, shuffle=False)


@pytest.mark.slow
def test_multiprocessing_fit_reads_each_image_once_per_epoch(s3_images, s3_options, s3_proxy):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_dataframe(
        df, url, target_size=(4, 4), batch_size=4, seed=0, workers=2, use_multiprocessing=True
    ) as it:
        model = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(3, activation="softmax")])  # fmt: skip
        model.compile("sgd", "categorical_crossentropy")
        s3_proxy.reset()
        model.fit(it, epochs=2, verbose=0)
    # Every image once per epoch, also when Keras's worker processes read batches before
    # `on_epoch_begin()` (they once pushed out the kept spec batches, which were read again).
    assert s3_proxy.reset() == {"GET": 2 * len(df)}


@pytest.mark.slow
def test_epoch_end_by_hand_still_advances(image_dir):
    directory, df = image_dir
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, seed=3, batch_size=4) as it:
        first = it[0][1]
        it.on_epoch_end()
        assert it.epoch == 1
        assert not np.array_equal(first, it[0][1])
