"""On Keras 2: `BackupAndRestore(train_iterator=...)` with `fit(iterator.to_tf_dataset())`.

Keras draws no batch order there (it never asks the iterator's `len()`): the callback
neither warns that something else drew from Python's `random`, nor needs that order to
resume. Reading the iterator itself, Keras 2 draws each epoch's order from `random`, and a
draw of someone else's after that order was drawn is still reported.
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

import remote_keras as rk

OTHER_DRAW = "Something other than Keras drew"


class Interrupted(Exception):
    pass


def _model(tfk):
    class RecordingModel(tfk.Sequential):
        seen: list

        def train_step(self, data):
            self.seen.append([int(v) for v in np.asarray(data[1])])
            return super().train_step(data)

    model = RecordingModel([tfk.layers.Flatten(input_shape=(4, 4, 3)), tfk.layers.Dense(1)])
    model.seen = []
    model.compile("sgd", "mse", run_eagerly=True)
    return model


def _callback(tfk, *, draw_at_first_step=False, stop_at=None):
    class UserCode(tfk.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if stop_at == (self.epoch, batch):
                raise Interrupted

        def on_train_batch_end(self, batch, logs=None):
            if draw_at_first_step and batch == 0:
                random.random()  # after Keras drew the epoch's order, before the backup looks

    return UserCode()


def _iterator(image_dir):
    directory, df = image_dir
    df = df.assign(row=np.arange(len(df), dtype="float32"))
    gen = rk.ImageDataGenerator()
    return gen.flow_from_dataframe(
        df, directory, y_col="row", class_mode="raw", target_size=(4, 4), batch_size=4, seed=9
    )


def _fit(tfk, image_dir, backup, through_dataset, **user):
    with _iterator(image_dir) as it, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _model(tfk)
        callbacks = [_callback(tfk, **user)]  # before the backup: its draw comes first
        if backup is not None:
            callbacks.append(rk.BackupAndRestore(backup, train_iterator=it, save_freq=2))
        data = it.to_tf_dataset() if through_dataset else it
        try:
            model.fit(data, epochs=3, verbose=0, callbacks=callbacks)
        except Interrupted:
            pass
        return model.seen, [str(w.message) for w in caught], len(it)


@pytest.mark.slow
@pytest.mark.parametrize("draw", [False, True], ids=["nothing-else-draws", "user-draws"])
def test_no_random_warning_through_to_tf_dataset(tfk, image_dir, tmp_path, draw):
    _, messages, _ = _fit(tfk, image_dir, str(tmp_path / "b"), True, draw_at_first_step=draw)
    assert not [m for m in messages if OTHER_DRAW in m], messages


@pytest.mark.slow
def test_a_draw_after_keras_drew_the_order_is_still_reported(tfk, image_dir, tmp_path):
    random.seed(0)
    _, messages, _ = _fit(tfk, image_dir, str(tmp_path / "b"), False, draw_at_first_step=True)
    others = [m for m in messages if OTHER_DRAW in m]
    assert len(others) == 3 and "epoch 0" in others[0], messages  # every epoch


@pytest.mark.slow
def test_to_tf_dataset_resumes_mid_epoch(tfk, image_dir, tmp_path):
    """Restored once `fit` has begun (the dataset built before), the next pass holds the rest."""
    whole, _, per_epoch = _fit(tfk, image_dir, None, True)
    backup = str(tmp_path / "backup")
    first, _, _ = _fit(tfk, image_dir, backup, True, stop_at=(1, 3))
    second, messages, _ = _fit(tfk, image_dir, backup, True)
    assert len(second) == 2 * per_epoch - 2  # saved after step 1 of epoch 1
    assert first[: len(whole) - len(second)] + second == whole
    assert not messages, messages


def test_a_backup_of_another_worker_count_is_refused(tfk, image_dir, tmp_path):
    """Written by 2 workers (their shards), resumed by 1: refused before a step, naming both."""
    from remote_keras.keras2.backup import RECORDS_FILE
    from remote_keras.keras_agnostic import backup_record

    backup = tmp_path / "backup"
    state = {"epoch": 1, "batch": 0, "shard": [0, 2]}
    record = backup_record.Record(epoch=1, batch=0, reads="dataset", train=state)
    backup_record.write(str(backup / RECORDS_FILE), [record], shards=2)
    with _iterator(image_dir) as it:
        model = _model(tfk)
        callback = rk.BackupAndRestore(str(backup), train_iterator=it, save_freq=2)
        with pytest.raises(ValueError, match=r"run of 2 worker\(s\).*this run has 1"):
            model.fit(it.to_tf_dataset(), epochs=1, verbose=0, callbacks=[callback])
        assert model.seen == []


def test_steps_in_backups_need_fits_steps_per_epoch(tfk, image_dir, tmp_path):
    """A dataset of unknown size: Keras 2 could not resume mid-epoch (TypeError on restart)."""
    with _iterator(image_dir) as it:
        model = _model(tfk)
        callback = rk.BackupAndRestore(str(tmp_path / "b"), train_iterator=it, save_freq=2)
        unknown = it.to_tf_dataset().filter(lambda x, y: True)  # cardinality unknown
        with pytest.raises(ValueError, match=r"steps_per_epoch=len\(iterator\)"):
            model.fit(unknown, epochs=1, verbose=0, callbacks=[callback])
        assert model.seen == []
        model.fit(unknown, epochs=1, steps_per_epoch=len(it), verbose=0, callbacks=[callback])


def test_stale_temporary_records_are_removed_at_the_next_start(tfk, image_dir, tmp_path):
    backup = tmp_path / "backup"
    backup.mkdir()
    stale = [backup / "remote_keras_iterator.json.4242-0123456789ab.tmp",
             backup / "remote_keras_iterator.json.tmp"]  # fmt: skip
    for path in stale:
        path.write_text("{")  # a killed write
    (backup / "someone-elses.tmp").write_text("kept")
    with _iterator(image_dir) as it:
        callback = rk.BackupAndRestore(str(backup), train_iterator=it, save_freq=2)
        _model(tfk).fit(it.to_tf_dataset(), epochs=1, verbose=0, callbacks=[callback])
    assert not any(path.exists() for path in stale)
    assert (backup / "someone-elses.tmp").exists()
