"""Keras 2's `fit` over the iterator: each image read once per epoch, with and without
`fit(workers=..., use_multiprocessing=...)`, and the batches stock Keras 2 trains on."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

import remote_keras as rk
from tests.helpers import assert_same_batch


def _recording_model(tfk):
    class RecordingModel(tfk.Model):
        """A tiny model that records the `y` of every batch it trains on (eagerly)."""

        def __init__(self) -> None:
            super().__init__()
            self.flatten = tfk.layers.Flatten()
            self.dense = tfk.layers.Dense(1)
            self.seen: list[list[int]] = []

        def call(self, x):
            return self.dense(self.flatten(x))

        def train_step(self, data):
            self.seen.append([int(v) for v in np.asarray(data[1])])
            return super().train_step(data)

    model = RecordingModel()
    model.compile("sgd", "mse", run_eagerly=True)
    return model


def _indexed(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(row=np.arange(len(df), dtype="float32"))


def _epoch_batches(it, epoch: int) -> set[frozenset[int]]:
    order = it._planner.order(epoch)
    return {frozenset(int(v) for v in it.labels[order[i : i + 4]]) for i in range(0, it.n, 4)}


@pytest.fixture
def rows_iterator(s3_images, s3_options, s3_proxy):
    """A shuffling, seeded iterator on S3 whose labels are the row numbers; proxy counts reset."""
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_dataframe(
        _indexed(df), url, y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4, seed=7
    ) as it:
        s3_proxy.reset()
        yield it


FIT_KWARGS = {
    "default": {},
    "threads": {"workers": 3},
    "processes": {"workers": 2, "use_multiprocessing": True},
}


def _assert_trained_each_epoch(model, it, epochs: int) -> None:
    assert it.epoch == epochs
    for epoch in range(epochs):
        trained = {frozenset(b) for b in model.seen[epoch * len(it) : (epoch + 1) * len(it)]}
        assert trained == _epoch_batches(it, epoch), epoch


@pytest.mark.slow
def test_fit_reads_each_image_once_per_epoch_and_trains_each_epochs_batches(
    tfk, rows_iterator, s3_proxy
):
    it = rows_iterator
    model = _recording_model(tfk)
    model.fit(it, epochs=3, verbose=0)
    counts = s3_proxy.reset()
    _assert_trained_each_epoch(model, it, 3)
    assert counts == {"GET": 3 * it.n}, counts


@pytest.mark.slow
def test_fit_with_worker_threads_trains_each_epochs_batches(tfk, rows_iterator, s3_proxy):
    it = rows_iterator
    model = _recording_model(tfk)
    model.fit(it, epochs=3, verbose=0, **FIT_KWARGS["threads"])
    gets = s3_proxy.reset()["GET"]
    _assert_trained_each_epoch(model, it, 3)
    # Once per epoch, plus what Keras 2's enqueuer may read ahead after the last epoch (it
    # reads up to `max_queue_size` batches of a next epoch before `fit` stops it).
    assert 3 * it.n <= gets <= 4 * it.n, gets


def _wait_for(condition, what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def test_an_enqueuers_epoch_end_and_fits_end_one_epoch_and_its_reads_ahead_are_kept(tfk, image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator()
    kwargs = dict(target_size=(4, 4), batch_size=4, seed=2)
    with gen.flow_from_dataframe(df, directory, **kwargs) as it:
        enqueuer = tfk.utils.OrderedEnqueuer(it, use_multiprocessing=False, shuffle=False)
        enqueuer.start(workers=2, max_queue_size=len(it))
        batches = enqueuer.get()
        for _ in range(len(it)):
            next(batches)
        # Its thread ends the epoch once the queue is drained, then reads the next one ahead.
        _wait_for(lambda: it.epoch == 1, "the enqueuer's on_epoch_end()")
        _wait_for(lambda: it.stats.images == 2 * it.n, "the enqueuer's reads ahead")
        enqueuer.stop()
        it.on_epoch_end()  # what fit calls after stopping the enqueuer
        assert it.epoch == 1  # one epoch end, not two
        epoch_1 = [it[i] for i in range(len(it))]
        assert it.stats.images == 2 * it.n  # the reads ahead were kept for epoch 1
    with gen.flow_from_dataframe(df, directory, **kwargs) as fresh:
        fresh.set_epoch(1)
        for i, batch in enumerate(epoch_1):
            assert_same_batch(batch, fresh[i])


@pytest.mark.slow
def test_multiprocessing_fit_trains_each_epochs_batches(tfk, s3_images, s3_options, s3_proxy):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    kwargs = dict(y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4, seed=3)
    with gen.flow_from_dataframe(_indexed(df), url, **kwargs) as it:
        model = tfk.Sequential([tfk.layers.Flatten(input_shape=(4, 4, 3)), tfk.layers.Dense(1)])
        model.compile("sgd", "mse")
        s3_proxy.reset()
        model.fit(it, epochs=2, verbose=0, **FIT_KWARGS["processes"])
        assert it.epoch == 2
    # Each epoch reads every image; Keras 2's enqueuer may also read up to `max_queue_size`
    # batches of the next epoch in processes it then stops (stock Keras 2 does the same).
    gets = s3_proxy.reset()["GET"]
    assert 2 * len(df) <= gets <= 2 * len(df) + 2 * 10 * 4, gets


@pytest.mark.slow
@pytest.mark.parametrize("how", ["default", "threads"])
def test_validation_iterator_reads_once_per_epoch(tfk, s3_images, s3_options, s3_proxy, how):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    kwargs = dict(y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4)
    with (
        gen.flow_from_dataframe(_indexed(df), url, seed=1, **kwargs) as train,
        gen.flow_from_dataframe(_indexed(df), url, shuffle=False, **kwargs) as val,
    ):
        model = tfk.Sequential([tfk.layers.Flatten(input_shape=(4, 4, 3)), tfk.layers.Dense(1)])
        model.compile("sgd", "mse")
        s3_proxy.reset()
        model.fit(train, validation_data=val, epochs=2, verbose=0, **FIT_KWARGS[how])
        assert (train.epoch, val.epoch) == (2, 2)
    gets = s3_proxy.reset()["GET"]
    if how == "default":
        assert gets == 4 * len(df)
    else:  # each iterator's enqueuer may read a next epoch ahead after the last one
        assert 4 * len(df) <= gets <= 6 * len(df), gets


@pytest.mark.slow
def test_fit_trains_on_the_same_batches_as_stock_keras_2(tfk, stock_image, image_dir):
    directory, df = image_dir
    kwargs = dict(y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4, shuffle=False)
    stock = stock_image.ImageDataGenerator().flow_from_dataframe(_indexed(df), directory, **kwargs)
    with rk.ImageDataGenerator().flow_from_dataframe(_indexed(df), directory, **kwargs) as ours:
        seen = []
        for it in (ours, stock):
            model = _recording_model(tfk)
            model.fit(it, epochs=2, shuffle=False, verbose=0)
            seen.append(model.seen)
    assert seen[0] == seen[1]


def test_epoch_end_by_hand_advances_at_once(image_dir):
    directory, df = image_dir
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, seed=3, batch_size=4) as it:
        first = it[0][1]
        it.on_epoch_end()
        assert it.epoch == 1
        assert not np.array_equal(first, it[0][1])


def test_use_multiprocessing_given_to_the_iterator_says_where_keras_2_takes_it(image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator()
    with pytest.warns(UserWarning, match=r"model\.fit\(iterator, workers=4"):
        it = gen.flow_from_dataframe(df, directory, use_multiprocessing=True)
    it.close()
