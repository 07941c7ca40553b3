"""Exact resume: iterator state, `set_epoch`, and `BackupAndRestore` across a crash.

The stream after a restore must be the uninterrupted run's from the restore
point: the same files in the same order with the same augmentation, nothing
before that point read again, and (with a deterministic model) the same final
weights.
"""

from __future__ import annotations

import functools
import json
import os
import time
import types
import uuid
import warnings

import keras
import numpy as np
import pandas as pd
import pytest

import remote_keras as rk
from remote_keras.testing.lakefs_server import lakefs_target
from tests.helpers import AUGMENT, assert_same_batch
from tests.resume_run import StopAt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rows(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(row=np.arange(len(df), dtype="float32"))


def _iterator(directory, df, **kwargs):
    gen = rk.ImageDataGenerator(**AUGMENT)
    return gen.flow_from_dataframe(
        _rows(df), directory, y_col="row", class_mode="raw", target_size=(8, 8), batch_size=3,
        seed=11, **kwargs,
    )  # fmt: skip


# --------------------------------------------------------------------------- iterator state


def test_a_loaded_state_continues_the_stream_by_index_and_by_next(image_dir):
    local, df = image_dir
    with _iterator(local, df) as original, _iterator(local, df) as resumed:
        original.on_epoch_end()  # epoch 1
        expected = [original[i] for i in range(len(original))]
        resumed.load_state_dict(original.state_dict(epoch=1, batch=2))
        assert resumed.epoch == 1
        assert resumed.num_batches == len(original) - 2
        for i in range(len(original) - 2):
            assert_same_batch(expected[2 + i], resumed[i])
        resumed.on_epoch_end()
        original.on_epoch_end()
        assert_same_batch(original[0], resumed[0])  # whole epochs afterwards
        assert resumed.num_batches == len(resumed)
    with _iterator(local, df) as stream, _iterator(local, df) as resumed:
        for _ in range(len(stream) + 3):
            next(stream)
        resumed.load_state_dict(stream.state_dict())
        assert resumed.state_dict()["epoch"] == 1 and resumed.state_dict()["batch"] == 3
        for _ in range(len(stream) + 2):
            assert_same_batch(next(stream), next(resumed))


def test_set_epoch_reads_that_epochs_order_and_augmentation(image_dir):
    local, df = image_dir
    with _iterator(local, df) as walked, _iterator(local, df) as jumped:
        walked.on_epoch_end()
        walked.on_epoch_end()
        jumped.set_epoch(2)
        for i in range(len(walked)):
            assert_same_batch(walked[i], jumped[i])


def test_a_state_from_other_data_is_refused_naming_the_difference(image_dir):
    local, df = image_dir
    with _iterator(local, df) as it:
        state = it.state_dict()
    json.dumps(state)  # the state is plain JSON
    with _iterator(local, df.iloc[:-1]) as fewer, pytest.raises(ValueError, match="samples"):
        fewer.load_state_dict(state)
    with _iterator(local, df.iloc[::-1]) as reordered, pytest.raises(ValueError, match="sha256"):
        reordered.load_state_dict(state)
    gen = rk.ImageDataGenerator()
    other_seed = gen.flow_from_dataframe(_rows(df), local, y_col="row", class_mode="raw",
                                         batch_size=3, seed=12)  # fmt: skip
    with other_seed, pytest.raises(ValueError, match="seed=11"):
        other_seed.load_state_dict(state)
    with _iterator(local, df, num_shards=2, shard_index=1) as shard:
        # Mid-epoch, the samples left belong to the one shard of the run that saved it...
        mid_epoch = dict(state, batch=1)
        with pytest.raises(ValueError, match=r"run of 1 process\(es\).*this run has 2"):
            shard.load_state_dict(mid_epoch)
        shard.load_state_dict(dict(state, epoch=1))  # ...at an epoch's start, split anew
        assert shard.epoch == 1 and shard.shard.count == 2


# --------------------------------------------------------------------------- fit, in process


class Recorder(keras.Sequential):
    """Records (labels, pixel sum) of each training step."""

    def __init__(self) -> None:
        super().__init__([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(1)])
        self.seen: list[tuple[tuple[int, ...], float]] = []

    def train_step(self, data):
        rows = tuple(int(v) for v in np.asarray(data[1]))
        self.seen.append((rows, float(np.asarray(data[0]).sum())))
        return super().train_step(data)


def _interrupt() -> None:
    raise KeyboardInterrupt("interrupted for the test")


def _fit(make, backup=None, interrupt=None, save_freq=2, pass_iterator=False, **fit_kwargs):
    keras.utils.set_random_seed(3)
    model = Recorder()
    model.compile(keras.optimizers.Adam(1e-3), "mse", run_eagerly=True)
    it = make()
    callbacks: list = []
    if backup is not None:
        extra = {"train_iterator": it} if pass_iterator else {}
        callbacks.append(rk.BackupAndRestore(backup, save_freq=save_freq, **extra))
    if interrupt is not None:
        callbacks.append(StopAt(*interrupt, _interrupt))
    try:
        model.fit(it, epochs=3, verbose=0, callbacks=callbacks, **fit_kwargs)
    except KeyboardInterrupt:
        pass
    finally:
        it.close()
    return model.seen, model.get_weights(), it


def _check_resume(make, tmp_path, interrupt=(1, 5), save_freq=2, **kwargs):
    """Crash at `interrupt`, resume, and compare with the uninterrupted run."""
    reference, weights, it = _fit(make, **kwargs)
    per_epoch = len(it)
    backup = str(tmp_path / f"backup-{uuid.uuid4().hex[:6]}")
    first, _, _ = _fit(make, backup, interrupt, save_freq=save_freq, **kwargs)
    metadata = json.load(open(os.path.join(backup, "training_metadata.json")))
    saved = metadata["remote_keras"]["records"][-1]
    restart = saved["epoch"] * per_epoch + saved["batch"]
    assert restart <= len(first)  # the last backup came before the crash
    second, resumed_weights, resumed = _fit(make, backup, save_freq=save_freq, **kwargs)
    assert first[:restart] == reference[:restart]
    assert second == reference[restart:]
    if not resumed.use_multiprocessing:  # (worker processes count their own reads)
        # Found in fit's arguments, the iterator was restored before its first read: even
        # the batches Keras reads to learn their shapes are ones the resumed run trains on.
        assert resumed.stats.images == sum(len(rows) for rows, _ in second)
    for a, b in zip(weights, resumed_weights):
        np.testing.assert_array_equal(a, b)
    return saved


@pytest.mark.slow
@pytest.mark.parametrize("fit_shuffle", [True, False])
def test_fit_resumes_mid_epoch_with_the_same_batches_and_weights(image_dir, tmp_path, fit_shuffle):
    local, df = image_dir
    saved = _check_resume(lambda: _iterator(local, df), tmp_path, shuffle=fit_shuffle)
    assert (saved["epoch"], saved["batch"]) == (1, 5)  # 7 batches an epoch, a backup every 2


@pytest.mark.slow
def test_fit_resumes_at_an_epoch_boundary(image_dir, tmp_path):
    local, df = image_dir
    saved = _check_resume(lambda: _iterator(local, df), tmp_path, save_freq="epoch")
    assert (saved["epoch"], saved["batch"]) == (1, 0)


@pytest.mark.parametrize("fit_shuffle", [True, False])
@pytest.mark.parametrize(
    ("interrupt", "restart"),
    [((1, 6), (2, 0)), ((1, 5), (1, 6))],
    ids=["after-the-last-batch", "one-batch-left"],
)
@pytest.mark.slow
def test_backups_at_the_end_of_an_epoch_resume(
    image_dir, tmp_path, fit_shuffle, interrupt, restart
):
    # With a backup every batch, the last one of epoch 1 comes before the epoch ends: all its
    # batches are consumed, so the restart begins epoch 2 (it used to ask for batch 0 of none).
    # One batch before, the restart has one batch left (Keras reads two to learn their spec).
    local, df = image_dir
    saved = _check_resume(
        lambda: _iterator(local, df),
        tmp_path,
        interrupt=interrupt,
        save_freq=1,
        shuffle=fit_shuffle,
    )
    assert (saved["epoch"], saved["batch"]) == restart


def _stalling(local, df, stalled):
    """An iterator whose `__getitem__(i)` for `i` in `stalled` sleeps before asking for it.

    As a descheduled Keras worker thread does on a loaded machine: the index is taken from
    Keras's queue, and later indices are asked for first.
    """
    it = _iterator(local, df)

    class Stalling(type(it)):  # type: ignore[misc]
        def __getitem__(self, idx):
            if idx in stalled:
                time.sleep(0.5)
            return super().__getitem__(idx)

    it.__class__ = Stalling
    return it


@pytest.mark.slow
def test_a_stalled_keras_worker_does_not_pass_for_an_unshuffled_fit(image_dir, tmp_path):
    # Keras 3.16 asks for pass 0's 3, 6, 5, 2, 0, 4, 1 from 4 threads: with 6 and 5 stalled,
    # 3, 2, 0, 4, 1 arrive first, closer to the unshuffled order. A backup after epoch 1's
    # last batch then recorded `shuffle=False`, and the restart replayed nothing (CI, twice).
    # On Keras 3.15 and older the order is told from Python's `random` (stalls change nothing).
    local, df = image_dir
    saved = _check_resume(
        lambda: _stalling(local, df, stalled={5, 6}),
        tmp_path,
        interrupt=(1, 6),
        save_freq=1,
        shuffle=True,
    )
    assert saved["fit_shuffle"] is True


@pytest.mark.slow
def test_resume_with_threads_and_worker_processes(image_dir, tmp_path):
    local, df = image_dir
    _check_resume(lambda: _iterator(local, df, workers=2), tmp_path)
    _check_resume(lambda: _iterator(local, df, workers=2, use_multiprocessing=True), tmp_path)


@pytest.mark.slow
def test_each_sharded_worker_resumes_its_own_shard(image_dir, tmp_path):
    local, df = image_dir
    for index in (0, 1):
        make = functools.partial(_iterator, local, df, num_shards=2, shard_index=index)
        _check_resume(make, tmp_path, interrupt=(1, 2))


class FiltersSeen(keras.callbacks.Callback):
    """Records Python's warning filters at every training step."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list] = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(list(warnings.filters))


@pytest.mark.slow
def test_a_resumed_fit_leaves_process_state_alone_but_for_the_batch_order(image_dir, tmp_path):
    local, df = image_dir
    backup = str(tmp_path / "quiet")
    _fit(lambda: _iterator(local, df), backup, (1, 5))
    keras.utils.set_random_seed(3)
    model = Recorder()
    model.compile(keras.optimizers.Adam(1e-3), "mse", run_eagerly=True)
    filters, seen = list(warnings.filters), FiltersSeen()
    with _iterator(local, df) as it:
        model.fit(it, epochs=3, verbose=0, callbacks=[rk.BackupAndRestore(backup), seen])
    assert seen.seen and all(now == filters for now in seen.seen)


@pytest.mark.slow
def test_two_open_iterators_that_fit_a_backup_are_refused_by_name(image_dir, tmp_path):
    local, df = image_dir
    backup = str(tmp_path / "twice")
    _fit(lambda: _iterator(local, df), backup, (1, 5))
    with _iterator(local, df) as one, _iterator(local, df) as other:
        with pytest.raises(ValueError, match="train_iterator="):
            rk.BackupAndRestore(backup)
        rk.BackupAndRestore(backup, train_iterator=other)  # named: no doubt
        assert one.epoch == 0 and other.epoch == 1


@pytest.mark.slow
def test_resume_through_to_tf_dataset(image_dir, tmp_path):
    local, df = image_dir

    def fit(backup=None, interrupt=None):
        keras.utils.set_random_seed(3)
        model = Recorder()
        model.compile(keras.optimizers.Adam(1e-3), "mse", run_eagerly=True)
        it = _iterator(local, df)
        callbacks: list = []
        if backup:  # the iterator is passed: it is restored before its dataset is built
            callbacks.append(rk.BackupAndRestore(backup, save_freq=2, train_iterator=it))
        if interrupt:
            callbacks.append(StopAt(*interrupt, _interrupt))
        try:
            model.fit(it.to_tf_dataset(), epochs=3, verbose=0, callbacks=callbacks)
        except KeyboardInterrupt:
            pass
        finally:
            it.close()
        return model.seen, len(it)

    reference, per_epoch = fit()
    backup = str(tmp_path / "tfdata")
    fit(backup, (1, 5))
    second, _ = fit(backup)
    assert second == reference[per_epoch + 5 :]


@pytest.mark.slow
def test_initial_epoch_reads_that_epochs_batches(image_dir, tmp_path):
    local, df = image_dir
    make = lambda: _iterator(local, df)  # noqa: E731
    reference, _, it = _fit(make)
    later, _, _ = _fit(make, str(tmp_path / "none"), initial_epoch=1)
    assert later == reference[len(it) :]


@pytest.mark.slow
def test_resumed_lakefs_run_reads_the_first_runs_commit(image_dir, tmp_path):
    # The oldest-pair run (.ci/test-oldest) installs the `test` extra only, without lakeFS.
    lakefs = pytest.importorskip("lakefs", reason="the lakefs extra is not installed")
    from lakefs_spec import LakeFSFileSystem

    local, _ = image_dir
    with lakefs_target() as target:
        client = lakefs.client.Client(**target.storage_options)
        name = f"rs-{uuid.uuid4().hex[:8]}"
        config = client.storage_config
        prefix = "local://" if target.is_stand_in else config.default_namespace_prefix
        repository = lakefs.Repository(name, client=client)
        repository.create(storage_namespace=prefix + name)
        fs = LakeFSFileSystem(**target.storage_options)
        for folder, _, files in os.walk(local):
            for file in files:
                path = os.path.join(folder, file)
                fs.put_file(path, f"lakefs://{name}/main/train/{os.path.relpath(path, local)}")
        branch = lakefs.Branch(name, "main", client=client)
        first_commit = branch.commit("images").get_commit().id

        def make():
            gen = rk.ImageDataGenerator(**AUGMENT)
            return gen.flow_from_directory(
                f"lakefs://{name}/main/train", target_size=(8, 8), batch_size=3, seed=4,
                class_mode="sparse", storage_options=target.storage_options,
            )  # fmt: skip

        try:
            reference, weights, it = _fit(make)
            backup = str(tmp_path / "lakefs")
            _fit(make, backup, (1, 5))
            # The branch moves between the crash and the resume: one more image in a class.
            folder = sorted(os.listdir(local))[0]
            image = os.path.join(local, folder, sorted(os.listdir(os.path.join(local, folder)))[0])
            fs.put_file(image, f"lakefs://{name}/main/train/{folder}/zz-new.png")
            branch.commit("one more image")
            with make() as fresh:
                assert fresh.n == it.n + 1  # a fresh run would read the new commit
            keras.utils.set_random_seed(3)
            model = Recorder()
            model.compile(keras.optimizers.Adam(1e-3), "mse", run_eagerly=True)
            with make() as resumed:
                callbacks = [rk.BackupAndRestore(backup, save_freq=2)]  # finds `resumed` itself
                model.fit(resumed, epochs=3, verbose=0, callbacks=callbacks)
            seen = model.seen
            assert [pin.commit_id for pin in resumed.lakefs_pins] == [first_commit]
            assert resumed.n == it.n
            restart = len(it) + 5
            assert [rows for rows, _ in seen] == [rows for rows, _ in reference[restart:]]
            assert seen == reference[restart:]
            for a, b in zip(weights, model.get_weights()):
                np.testing.assert_array_equal(a, b)
        finally:
            repository.delete()


@pytest.mark.parametrize(
    ("interrupt", "save_freq", "resumed_from"),
    [((1, 5), 2, 1), ((1, 6), 1, 2), ((1, 6), "epoch", 1)],
    ids=["mid-epoch", "after-the-last-batch", "epoch-end"],
)
@pytest.mark.slow
def test_the_validation_iterator_resumes_too(
    image_dir, tmp_path, interrupt, save_freq, resumed_from
):
    """A shuffled, augmented validation iterator reads each epoch's own order after a resume.

    A backup after an epoch's last batch comes before that epoch's validation pass; the
    restart (at the next epoch) validates with the order of the pass after the skipped one.
    """
    local, df = image_dir

    def fit(backup=None, interrupt=None):
        keras.utils.set_random_seed(3)
        model = Recorder()
        model.compile(keras.optimizers.Adam(1e-3), "mse", run_eagerly=True)
        train, validation = _iterator(local, df), _iterator(local, df.iloc[::2])
        callbacks: list = []
        if backup:
            callbacks.append(rk.BackupAndRestore(backup, save_freq=save_freq))  # finds both
        if interrupt:
            callbacks.append(StopAt(*interrupt, _interrupt))
        try:
            history = model.fit(train, validation_data=validation, epochs=3, verbose=0,
                                callbacks=callbacks)  # fmt: skip
        except KeyboardInterrupt:
            return None
        finally:
            train.close()
            validation.close()
        return history.history["val_loss"]

    reference = fit()
    backup = str(tmp_path / "validation")
    assert fit(backup, interrupt) is None
    resumed = fit(backup)
    assert resumed == reference[resumed_from:]  # same weights, same validation batches


def test_backup_files_complete_a_torn_pair_and_remove_only_their_own_leftovers(tmp_path):
    from remote_keras.keras3 import backup_files

    weights, metadata = (
        str(tmp_path / "latest.weights.h5"),
        str(tmp_path / "training_metadata.json"),
    )

    def write(content: bytes):
        return lambda path: open(path, "wb").write(content)

    backup_files.save(weights, metadata, write(b"one"), {"epoch": 1})
    others = [tmp_path / ".7.tmp.notes.txt", tmp_path / "notes.txt", tmp_path / ".7.tmp.x.h5"]
    for path in others:
        path.write_text("not the backup's")
    (tmp_path / ".99.tmp.latest.weights.h5").write_bytes(b"killed mid-save")
    backup_files.save(weights, metadata, write(b"two"), {"epoch": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            ".7.tmp.notes.txt",
            "notes.txt",
            ".7.tmp.x.h5",
            "latest.weights.h5",
            "training_metadata.json",
        ]
    )
    # A kill between the renames: new weights, old metadata, the new metadata still temporary.
    torn = str(tmp_path / ".5.tmp.training_metadata.json")
    backup_files.save(weights, torn, write(b"three"), {"epoch": 3})
    backup_files.repair(weights, metadata)
    assert json.load(open(metadata))["epoch"] == 3 and not os.path.exists(torn)
    backup_files.repair(weights, metadata)  # a consistent pair is left alone
    assert json.load(open(metadata))["epoch"] == 3
    open(weights, "wb").write(b"changed by something else")
    with pytest.raises(ValueError, match="inconsistent"):
        backup_files.repair(weights, metadata)


def test_a_killed_saves_leftovers_are_removed_when_the_next_run_starts(tmp_path):
    """Not only at the next save: a restart that never saves again leaves no debris."""
    backup = tmp_path / "backup"
    backup.mkdir()
    leftovers = [".4242.tmp.latest.weights.h5", ".4242.tmp.training_metadata.json"]
    for name in [*leftovers, ".7.tmp.notes.txt"]:
        (backup / name).write_bytes(b"killed mid-save")
    rk.BackupAndRestore(str(backup))
    assert sorted(p.name for p in backup.iterdir()) == [".7.tmp.notes.txt"]


def test_one_processs_record_serves_every_shard_of_its_run():
    """Several processes share one backup, written by the first: each continues its shard."""
    from remote_keras.keras_agnostic import resume

    saved = {"epoch": 2, "batch": 3, "shard": [0, 2], "seed": 1}

    def iterator(index: int, count: int):
        return types.SimpleNamespace(shard=types.SimpleNamespace(index=index, count=count))

    assert resume.own_shard(saved, iterator(1, 2), mid_epoch=True)["shard"] == [1, 2]
    assert resume.same_run(iterator(1, 2), saved) and not resume.same_run(iterator(0, 3), saved)
    # Another number of processes: at an epoch's start the next epoch is split anew...
    assert resume.own_shard({**saved, "batch": 0}, iterator(0, 1), mid_epoch=False)["shard"] == [
        0,
        1,
    ]
    # ...in the middle of one, the samples left belong to shards that no longer exist.
    with pytest.raises(ValueError, match=r"run of 2 process\(es\).*this run has 3"):
        resume.own_shard(saved, iterator(2, 3), mid_epoch=True)


# --------------------------------------------------------------------------- SIGKILL sweep
