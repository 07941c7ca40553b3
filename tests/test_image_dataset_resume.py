"""`rk.BackupAndRestore` continues an `image_dataset_from_directory` dataset's epochs.

Each pass of the dataset has its own order (the shuffle's seed and the pass), so a
run resumed with a dataset made again must read, epoch by epoch, the files the
uninterrupted run read. The streams are compared as file paths: every image is
identified by its pixels, looked up in the unshuffled dataset.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings

import keras
import numpy as np
import pytest

import remote_keras as rk
from tests.resume_run import StopAt

EPOCHS = 4
ARGS = dict(image_size=(8, 8), batch_size=4, seed=5, verbose=False)


class Recorder(keras.Sequential):
    """Records the pixels' digest of every image of every training step."""

    def __init__(self) -> None:
        super().__init__([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(1)])
        self.seen: list[list[str]] = []

    def train_step(self, data):
        self.seen.append([_digest(image) for image in np.asarray(data[0])])
        return super().train_step(data)


def _digest(image: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(image, dtype="float32").tobytes()).hexdigest()


def _paths_by_digest(local: str) -> dict[str, str]:
    plain = rk.image_dataset_from_directory(local, shuffle=False, **{**ARGS, "batch_size": None})
    found = {_digest(image): path for (image, _), path in zip(plain, plain.file_paths)}
    assert len(found) == len(plain.file_paths)  # every image tells its file apart
    return found


def _interrupt() -> None:
    raise KeyboardInterrupt("interrupted for the test")


def _fit(local, backup=None, interrupt=None, callback=rk.BackupAndRestore, save_freq="epoch"):
    """Fits on the training subset, validating on the other; the file paths of each epoch."""
    keras.utils.set_random_seed(3)
    train, validation = rk.image_dataset_from_directory(
        local, validation_split=0.25, subset="both", **ARGS
    )
    model = Recorder()
    model.compile(keras.optimizers.Adam(1e-3), "mse", run_eagerly=True)
    callbacks = [] if backup is None else [callback(backup, save_freq=save_freq)]
    if interrupt is not None:
        callbacks.append(StopAt(*interrupt, _interrupt))
    try:
        model.fit(train, validation_data=validation, epochs=EPOCHS, verbose=0, callbacks=callbacks)
    except KeyboardInterrupt:
        pass
    per_epoch = int(train.cardinality())
    steps = [model.seen[i : i + per_epoch] for i in range(0, len(model.seen), per_epoch)]
    by_digest = _paths_by_digest(local)
    return [[by_digest[d] for batch in epoch for d in batch] for epoch in steps]


@pytest.mark.slow
@pytest.mark.parametrize(("save_freq", "interrupt"), [("epoch", (2, 1)), (3, (2, 2))])
def test_a_restored_fit_reads_each_epoch_of_the_uninterrupted_run(
    image_dir, tmp_path, save_freq, interrupt
):
    local, _ = image_dir
    reference = _fit(local)
    assert len(reference) == EPOCHS and reference[0] != reference[2]  # passes differ
    backup = str(tmp_path / "backup")
    first = _fit(local, backup, interrupt, save_freq=save_freq)
    saved = json.load(open(os.path.join(backup, "training_metadata.json")))
    epoch = saved["remote_keras"]["records"][-1]["epoch"]
    assert epoch == 2  # the backup at the end of epoch 1 (or during epoch 2, read again)
    assert first[:epoch] == reference[:epoch]
    resumed = _fit(local, backup, save_freq=save_freq)
    assert resumed == reference[epoch:]


@pytest.mark.slow
def test_keras_own_callback_restarts_the_order_at_the_first_pass(image_dir, tmp_path):
    # What the docs say of keras.callbacks.BackupAndRestore with such a dataset: the
    # weights and epoch come back, but the dataset is new, so the resumed epochs read the
    # first passes' orders again.
    local, _ = image_dir
    reference = _fit(local)
    backup = str(tmp_path / "keras-backup")
    _fit(local, backup, (2, 1), callback=keras.callbacks.BackupAndRestore)
    resumed = _fit(local, backup, callback=keras.callbacks.BackupAndRestore)
    assert resumed == reference[: EPOCHS - 2]


@pytest.mark.slow
def test_a_dataset_read_through_a_derived_one_warns_on_restore(image_dir, tmp_path):
    # Iterators made over `dataset.map(...)` draw from the dataset's shuffle unseen: the
    # restore cannot place the order, and says so.
    local, _ = image_dir
    backup = str(tmp_path / "derived")

    def fit(interrupt=None):
        keras.utils.set_random_seed(3)
        train = rk.image_dataset_from_directory(local, **ARGS)
        model = Recorder()
        model.compile(keras.optimizers.Adam(1e-3), "mse", run_eagerly=True)
        callbacks = [rk.BackupAndRestore(backup)]
        if interrupt is not None:
            callbacks.append(StopAt(*interrupt, _interrupt))
        try:
            model.fit(train.map(lambda x, y: (x, y)), epochs=3, verbose=0, callbacks=callbacks)
        except KeyboardInterrupt:
            pass

    fit((1, 1))
    with pytest.warns(UserWarning, match="derived from it"):
        fit()


@pytest.mark.parametrize("derive", [False, True], ids=["itself", "cache-prefetch"])
@pytest.mark.slow
def test_reading_through_a_derived_dataset_is_said_when_fit_starts(image_dir, tmp_path, derive):
    # The tutorial's `.cache().prefetch(...)`: said at the first step, not only on restore,
    # when the resume guarantee is already lost.
    local, _ = image_dir
    train = rk.image_dataset_from_directory(local, **ARGS)
    model = Recorder()
    model.compile(keras.optimizers.Adam(1e-3), "mse", run_eagerly=True)
    data = train.cache().prefetch(2) if derive else train
    steps: list[int] = []
    callbacks = [
        rk.BackupAndRestore(str(tmp_path / "backup")),
        keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: steps.append(batch)),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(data, epochs=1, verbose=0, callbacks=callbacks)
    derived = [w for w in caught if "through a dataset derived from it" in str(w.message)]
    assert len(derived) == (1 if derive else 0), [str(w.message) for w in caught]
    if derive:
        assert local in str(derived[0].message) and steps  # once, at the first step
