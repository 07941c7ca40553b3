"""On Keras 2: `BackupAndRestore` resumes `fit` on the same data stream.

Its training iterator (`train_iterator=`), its validation iterator (`validation_iterator=`),
and the datasets of `rk.image_dataset_from_directory` `fit` reads.
"""

from __future__ import annotations

import os
import random
import warnings

import numpy as np
import pytest

import remote_keras as rk
from remote_keras.keras_lines.backup_hooks import Keras2BackupHooks

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


@pytest.mark.slow
@pytest.mark.parametrize("save_freq", ["epoch", 4])
def test_the_validation_iterator_is_restored(tfk, image_dir, tmp_path, save_freq):
    """Validation after a restore reads the uninterrupted run's epochs of `validation_iterator`.

    With 4 steps an epoch, `save_freq=4` backs up at each epoch's last step, before its
    validation pass: the record counts that pass, which the resumed run skips.
    """
    directory, df = image_dir
    df = df.assign(row=np.arange(len(df), dtype="float32"))
    kwargs = dict(y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4, seed=9)
    gen = rk.ImageDataGenerator(rotation_range=20)
    train_df, val_df = df.iloc[:16], df.iloc[16:]

    def run(backup=None, stop=None):
        with gen.flow_from_dataframe(train_df, directory, **kwargs) as train, \
                gen.flow_from_dataframe(val_df, directory, **kwargs) as val:  # fmt: skip
            model = _recording_model(tfk)
            model.validated = []
            test_step = model.test_step

            def recording_test_step(data):
                model.validated.append(np.asarray(data[0]).sum(axis=(1, 2, 3)).round(3).tolist())
                return test_step(data)

            model.test_step = recording_test_step
            callbacks = [] if stop is None else [_stop_at(tfk, *stop)]
            if backup is not None:
                callbacks.insert(0, rk.BackupAndRestore(
                    backup, train_iterator=train, validation_iterator=val, save_freq=save_freq
                ))  # fmt: skip
            try:
                model.fit(train, validation_data=val, epochs=4, verbose=0, shuffle=False,
                          callbacks=callbacks)  # fmt: skip
            except Interrupted:
                pass
            return model

    whole = run()
    backup = str(tmp_path / "backup")
    run(backup, stop=(2, 1))
    second = run(backup)
    assert len(second.validated) == 2 * 2  # epochs 2 and 3, two batches each
    # Augmented with `rotation_range`: each epoch of the validation iterator has its pixels.
    assert whole.validated[4:6] != whole.validated[6:8]
    assert second.validated == whole.validated[4:]


# ---------------------------------------------------------------------------- datasets
# Keras 2's `fit` makes a new iterator over its dataset each epoch, and each one draws the
# next shuffle order: a resumed run's epochs have the uninterrupted run's orders only if the
# dataset made again is moved to the passes the first run had drawn
# (`keras_lines.dataset_passes.Keras2Fit`). Every file has its own label, so the labels a
# model trains on tell the files and their order.

DATASET_EPOCHS = 4


def _labels_model(tfk):
    class RecordingModel(tfk.Sequential):
        def train_step(self, data):
            self.seen.append([int(v) for v in np.asarray(data[1])])
            return super().train_step(data)

        def test_step(self, data):
            self.validated.append([int(v) for v in np.asarray(data[1])])
            return super().test_step(data)

    model = RecordingModel([tfk.layers.Flatten(input_shape=(8, 8, 3)), tfk.layers.Dense(1)])
    model.seen, model.validated = [], []
    model.compile("sgd", "mse", run_eagerly=True)
    return model


def _fit_dataset(tfk, image_dir, backup=None, stop=None, save_freq="epoch"):
    """One run, in effect a process: the datasets made again, a new model."""
    root, df = image_dir
    train, validation = rk.image_dataset_from_directory(
        root, labels=list(range(len(df))), image_size=(8, 8), batch_size=4, seed=5,
        validation_split=0.3, subset="both",
    )  # fmt: skip
    model = _labels_model(tfk)
    callbacks = [] if backup is None else [rk.BackupAndRestore(backup, save_freq=save_freq)]
    callbacks += [] if stop is None else [_stop_at(tfk, *stop)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model.fit(train, validation_data=validation, epochs=DATASET_EPOCHS, verbose=0,
                      callbacks=callbacks)  # fmt: skip
        except Interrupted:
            pass
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    return model, said


@pytest.mark.slow
def test_a_resumed_fit_reads_the_uninterrupted_runs_orders(tfk, image_dir, tmp_path):
    whole, _ = _fit_dataset(tfk, image_dir)
    steps = len(whole.seen) // DATASET_EPOCHS
    epochs = [tuple(map(tuple, whole.seen[e * steps :][:steps])) for e in range(DATASET_EPOCHS)]
    assert len(set(epochs)) == DATASET_EPOCHS  # each epoch its own order
    backup = str(tmp_path / "backup")
    first, _ = _fit_dataset(tfk, image_dir, backup, stop=(2, 1))
    second, said = _fit_dataset(tfk, image_dir, backup)
    assert len(second.seen) == 2 * steps  # Keras 2 resumed at epoch 2, after the last backup
    assert first.seen[: 2 * steps] + second.seen == whole.seen
    # Validation after the restore reads the uninterrupted run's passes too.
    assert second.validated == whole.validated[-len(second.validated) :]
    assert not said, said


@pytest.mark.slow
def test_the_backup_keras_restored_gives_the_datasets_passes(tfk, image_dir, tmp_path, monkeypatch):
    """Killed between the records and Keras's backup: Keras resumes at the backup before."""
    whole, _ = _fit_dataset(tfk, image_dir)
    steps = len(whole.seen) // DATASET_EPOCHS
    backups = []
    keras_backup = Keras2BackupHooks.keras_backup

    def interrupted_backup(self, epoch, batch):
        backups.append(epoch)
        if len(backups) == 2:
            raise Interrupted  # the records of epoch 1's end are written, Keras's backup not
        keras_backup(self, epoch, batch)

    backup = str(tmp_path / "backup")
    monkeypatch.setattr(Keras2BackupHooks, "keras_backup", interrupted_backup)
    first, _ = _fit_dataset(tfk, image_dir, backup)
    monkeypatch.undo()
    assert backups == [0, 1] and len(first.seen) == 2 * steps
    second, said = _fit_dataset(tfk, image_dir, backup)
    assert second.seen == whole.seen[steps:]  # epochs 1 to 3, in their orders
    assert second.validated == whole.validated[-len(second.validated) :]
    assert not said, said


@pytest.mark.slow
def test_a_backup_mid_epoch_says_what_a_dataset_resumes(tfk, image_dir, tmp_path):
    whole, _ = _fit_dataset(tfk, image_dir)
    steps = len(whole.seen) // DATASET_EPOCHS
    backup = str(tmp_path / "backup")
    _fit_dataset(tfk, image_dir, backup, stop=(2, 3), save_freq=2)
    second, said = _fit_dataset(tfk, image_dir, backup, save_freq=2)
    assert [m for m in said if 'save_freq="epoch"' in m and "epoch 2 at step 2" in m], said
    # Keras 2 trains epoch 2's last steps from a new pass of that epoch's order...
    assert second.seen[: steps - 2] == whole.seen[2 * steps : 3 * steps - 2]
    # ...and the later epochs as the uninterrupted run did.
    assert second.seen[steps - 2 :] == whole.seen[3 * steps :]


def test_without_an_iterator_or_a_dataset_fit_is_refused(tfk, image_dir, tmp_path):
    directory, df = image_dir
    df = df.assign(row=np.arange(len(df), dtype="float32"))
    gen = rk.ImageDataGenerator()
    kwargs = dict(y_col="row", class_mode="raw", target_size=(8, 8), batch_size=4)
    with gen.flow_from_dataframe(df, directory, **kwargs) as it:
        model = _labels_model(tfk)
        callback = rk.BackupAndRestore(str(tmp_path / "backup"))
        with pytest.raises(ValueError, match="train_iterator=train"):
            model.fit(it, epochs=1, verbose=0, callbacks=[callback])
        assert model.seen == []
    train = rk.image_dataset_from_directory(directory, image_size=(8, 8), seed=5)
    derived = train.map(lambda x, y: (x, y))  # its iterators draw the dataset's orders uncounted
    with pytest.raises(ValueError, match="image_dataset_from_directory` itself"):
        model.fit(derived, epochs=1, verbose=0, callbacks=[callback])
    assert model.seen == []
