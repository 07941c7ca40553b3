"""On Keras 2: input-stall reports from `fit`, and shards that split the data between workers."""

from __future__ import annotations

import time

import numpy as np
import pytest

import remote_keras as rk


class SlowLoader:
    """Local reads that take `delay` seconds each (an overloaded store)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __call__(self, path: str) -> bytes:
        time.sleep(self.delay)
        with open(path, "rb") as f:
            return f.read()


@pytest.mark.slow
def test_input_stall_callback_reports_each_epoch_of_fit(tfk, image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator(loader=SlowLoader(0.02), max_in_flight=1, decode_workers=1)
    with gen.flow_from_dataframe(df, directory, target_size=(8, 8), batch_size=4, seed=1) as it:
        stall = rk.InputStallCallback(it, verbose=0)
        model = tfk.Sequential([tfk.layers.Flatten(input_shape=(8, 8, 3)), tfk.layers.Dense(3)])
        model.compile("sgd", "mse")
        history = model.fit(it, epochs=2, verbose=0, callbacks=[stall])
    assert [r.epoch for r in stall.reports] == [0, 1]
    for report in stall.reports:
        assert report.steps == len(it)
        assert report.loader.images > 0
        assert report.input_wait_s is not None and report.input_wait_s > 0  # reads are slow
        assert 0 < report.wait_fraction <= 1
    assert len(history.history["input_wait_s"]) == 2


def test_shards_are_disjoint_and_cover_the_data(image_dir):
    directory, df = image_dir
    df = df.assign(row=np.arange(len(df), dtype="float32"))
    gen = rk.ImageDataGenerator()
    seen = []
    for index in range(3):
        with gen.flow_from_dataframe(
            df, directory, y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4,
            seed=5, num_shards=3, shard_index=index,
        ) as it:  # fmt: skip
            rows = [int(v) for i in range(len(it)) for v in it[i][1]]
            seen.append(set(rows))
            assert len(rows) == len(set(rows))
    assert set.union(*seen) == set(range(len(df)))
    assert sum(len(s) for s in seen) == len(df)


def test_tf_config_shards_on_keras_2(monkeypatch, image_dir):
    directory, df = image_dir
    cluster = {"worker": ["a:1", "b:2"]}
    monkeypatch.setenv(
        "TF_CONFIG",
        f'{{"cluster": {cluster!r}, "task": {{"type": "worker", "index": 1}}}}'.replace("'", '"'),
    )
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, seed=1) as it:
        assert (it.shard.index, it.shard.count, it.shard.source) == (1, 2, "TF_CONFIG")
