"""On Keras 2: `BackupAndRestore(train_iterator=...)` resumes `fit` on the same data stream."""

from __future__ import annotations

import numpy as np
import pytest

import remote_keras as rk


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

    def by_epoch(seen: list[list[int]], steps: int) -> list[set[frozenset[int]]]:
        return [{frozenset(b) for b in seen[i : i + steps]} for i in range(0, len(seen), steps)]

    with gen.flow_from_dataframe(df, directory, **kwargs) as it:
        steps = len(it)
        whole = _recording_model(tfk)
        whole.fit(it, epochs=4, verbose=0)
    backup = tmp_path / "backup"
    with gen.flow_from_dataframe(df, directory, **kwargs) as it:
        first = _recording_model(tfk)
        callback = rk.BackupAndRestore(str(backup), train_iterator=it, save_freq=save_freq)
        with pytest.raises(Interrupted):
            first.fit(it, epochs=4, verbose=0, callbacks=[callback, _stop_at(tfk, 2, 1)])
    with gen.flow_from_dataframe(df, directory, **kwargs) as it:  # a new process, in effect
        second = _recording_model(tfk)
        callback = rk.BackupAndRestore(str(backup), train_iterator=it, save_freq=save_freq)
        second.fit(it, epochs=4, verbose=0, callbacks=[callback])
        assert it.epoch == 4
    expected = by_epoch(whole.seen, steps)
    assert by_epoch(first.seen[: 2 * steps], steps) == expected[:2]
    # Keras 2 runs the interrupted epoch again from its start (with `save_freq` in steps too:
    # it restores the model at that step, then trains the whole epoch), then epoch 3.
    assert by_epoch(second.seen, steps) == expected[2:]
    assert not (backup / "remote_keras_iterator.json").exists()  # removed with the backup
