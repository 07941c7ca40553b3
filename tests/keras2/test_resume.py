"""On Keras 2: `BackupAndRestore(train_iterator=...)` resumes `fit` on the same data stream."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

import remote_keras as rk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Interrupted(Exception):
    pass


def _recording_model(tfk):
    class RecordingModel(tfk.Model):
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


def _stop_at(tfk, epoch_to_stop: int, batch: int):
    class Stop(tfk.callbacks.Callback):
        def on_train_batch_begin(self, b, logs=None):
            if self.epoch == epoch_to_stop and b == batch:
                raise Interrupted(f"epoch {epoch_to_stop}, batch {batch}")

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

    return Stop()


@pytest.mark.slow
@pytest.mark.parametrize("save_freq", ["epoch", 2])
def test_a_resumed_fit_trains_the_epochs_it_would_have(tfk, image_dir, tmp_path, save_freq):
    directory, df = image_dir
    df = df.assign(row=np.arange(len(df), dtype="float32"))
    kwargs = dict(y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4, seed=9)
    gen = rk.ImageDataGenerator(rotation_range=20)

    with gen.flow_from_dataframe(df, directory, **kwargs) as it:
        steps = len(it)
        whole = _recording_model(tfk)
        random.seed(1)  # `fit(shuffle=True)` draws its batch orders from `random`
        whole.fit(it, epochs=4, verbose=0)
    backup = tmp_path / "backup"
    with gen.flow_from_dataframe(df, directory, **kwargs) as it:
        first = _recording_model(tfk)
        callback = rk.BackupAndRestore(str(backup), train_iterator=it, save_freq=save_freq)
        random.seed(1)
        with pytest.raises(Interrupted):
            first.fit(it, epochs=4, verbose=0, callbacks=[callback, _stop_at(tfk, 2, 1)])
    with gen.flow_from_dataframe(df, directory, **kwargs) as it:  # a new process, in effect
        second = _recording_model(tfk)
        callback = rk.BackupAndRestore(str(backup), train_iterator=it, save_freq=save_freq)
        random.seed(2)  # another process: the callback sets what `fit` draws from
        second.fit(it, epochs=4, verbose=0, callbacks=[callback])
        assert it.epoch == 4
    # Keras 2 resumes after its last backup, inside the epoch with `save_freq` in steps: the
    # two runs together train the uninterrupted run's stream, batch for batch, in its order.
    resumed = len(second.seen)
    assert resumed >= steps + 1  # epoch 3, and what epoch 2 had left
    assert first.seen[: len(whole.seen) - resumed] + second.seen == whole.seen
    assert not (backup / "remote_keras_iterator.json").exists()  # removed with the backup


def test_keras2_backup_refuses_to_run_without_the_iterator(tmp_path):
    with pytest.raises(ValueError, match="train_iterator=train"):
        rk.BackupAndRestore(str(tmp_path / "backup"), save_freq=100)
