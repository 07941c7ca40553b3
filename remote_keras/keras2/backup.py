"""`BackupAndRestore` on Keras 2: Keras 2's own, and the iterator continues its data stream.

Keras 2's `tf.keras.callbacks.BackupAndRestore` restores the model, the
optimizer and where `fit` resumes: the epoch after the backup's with
`save_freq="epoch"`; with `save_freq` in steps, the step after the saved one,
inside its epoch (TensorFlow 2.15's Keras and tf_keras 2.21 count the resumed
epoch's steps from there, while asking the iterator for that epoch's batches
from the start of its batch order). Each time Keras writes a backup, this
subclass first writes beside it where the data stream resumes
(`remote_keras_iterator.json`): the epoch, the batches of it trained, the
iterator's `state_dict()` (seed, lakeFS commits, a fingerprint of the files)
and the Python `random` state `fit(shuffle=True)` draws that epoch's batch
order from. On restart it loads the record for the epoch and step Keras
resumes at, so that every step trains the batch, augmentation and order of
the uninterrupted run (`remote_keras.keras_lines.keras2`), at the commits the
first run read. The file holds the last two records, written through the
fronts' one writer (`remote_keras.keras_agnostic.backup_record`).

Through `iterator.to_tf_dataset()` Keras draws no order (it calls no `len()`):
the records say so, and a restore makes the dataset's next pass hold the rest of
the epoch. Under `MultiWorkerMirroredStrategy`, with one shared backup folder as
Keras 2's own callback expects, the chief alone writes the records (with the
shard count), and each worker reads them for its shard. There tf.distribute
splits each batch of a worker's shard into as many steps as there are workers
(the per-worker steps Keras counts): a backup in steps is then taken once the
batch ends, so that it resumes where a batch begins.

The records also hold the `validation_iterator=`'s state and the passes of the datasets
`fit` reads (`dataset_passes.Keras2Fit`), restored before Keras makes its first iterator.
"""

from __future__ import annotations

import posixpath
import warnings
from dataclasses import replace
from typing import Any

from remote_keras.keras2 import keras_api
from remote_keras.keras_agnostic import backup_record
from remote_keras.keras_agnostic.backup_record import Record
from remote_keras.keras_lines import KERAS_2, keras3
from remote_keras.keras_lines.backup_hooks import Keras2BackupHooks
from remote_keras.keras_lines.dataset_passes import Keras2Fit
from remote_keras.keras_lines.keras2 import keras2_resumption, optimizer_steps
from remote_keras.keras_lines.keras3 import json_random_state, python_random_state, shuffled
from remote_keras.keras_lines.resumption import Resumption

__all__ = ["RECORDS_FILE", "RECORDS_FORMAT", "BackupAndRestore"]

RECORDS_FILE = "remote_keras_iterator.json"  # beside Keras 2's backup
RECORDS_FORMAT = backup_record.FORMAT
_FILES = keras_api.GFILES  # local paths and `tf.io.gfile` URLs, as Keras 2's backup


class BackupAndRestore(Keras2BackupHooks, keras_api.BackupAndRestore):
    """Keras 2's `BackupAndRestore` that also resumes the iterator's data stream exactly.

    Args:
        backup_dir: Where Keras 2 keeps its backup (a local path or a
            `tf.io.gfile` URL); the iterator's records are written there too.
        train_iterator: The remote_keras iterator passed to `fit`; not needed
            for a dataset of `rk.image_dataset_from_directory` passed itself.
        validation_iterator: The remote_keras iterator of `validation_data`.
        **kwargs: Keras 2's arguments (`save_freq`, `delete_checkpoint`, ...).

    Raises:
        ValueError: when `fit` begins, `train_iterator` is missing and `fit`
            trains on no such dataset (Keras 2 tells a callback nothing about
            the data `fit` reads).

    Example:

    ```python
    backup = BackupAndRestore("ckpt/backup", train_iterator=train)
    model.fit(train, epochs=10, callbacks=[backup])  # rerun the same line after a crash
    ```
    """

    def __init__(
        self,
        backup_dir: str,
        train_iterator: Any = None,
        validation_iterator: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(backup_dir, **kwargs)
        KERAS_2.check_backup(self, keras_api.BackupAndRestore)
        self.train_iterator = train_iterator
        self.validation_iterator = validation_iterator
        self.fit_datasets = Keras2Fit()  # the datasets `fit` reads, and their passes
        self.state_path = posixpath.join(str(backup_dir), RECORDS_FILE)
        self._records: list[Record] = []  # the last two written, oldest first
        self._pending: list[Record] | None = None  # a previous run's, until matched
        self._epoch = 0
        self._first_step = True
        self._drawn: tuple | None = None  # the state this epoch's order was drawn from
        self._fit_shuffle: bool | None = None
        # Orders Keras's enqueuer drew between an epoch's and the next's, as seen last (it draws
        # the next epoch's ahead if it is still running once `fit` took the epoch's batches).
        self._extra_draws: int | None = None
        self._arm_next: tuple[int, tuple] | None = None  # (epoch, state) to draw it from
        self._reads: str | None = None  # "sequence" (Keras asks indices) or "dataset"
        self._per_batch = 1  # Keras's steps per batch of the iterator (tf.distribute's split)
        self._deferred = False  # a backup in steps waits for the end of the batch
        self._writes = True  # this process writes the records (the chief)

    # ---------------------------------------------------------------- Keras's hooks

    def on_train_begin(self, logs: dict | None = None) -> None:
        super().on_train_begin(logs)  # Keras restores the model and where it resumes
        steps = (self.params or {}).get("steps")
        self._per_batch = steps_per_batch(self.save_freq, steps, self.train_iterator)
        self._writes = keras_api.writes_checkpoints(self.model)
        if self._writes:
            backup_record.remove_leftovers([self.state_path], _FILES)
        self._pending = backup_record.read(self.state_path, _shards(self), _FILES)
        self._records = list(self._pending or [])  # a kill before Keras's next backup needs them
        self._pending = restore_others(self, self._pending)  # before Keras's first iterator

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        super().on_epoch_begin(epoch, logs)
        self._epoch, self._first_step = epoch, True
        if not trains_the_iterator(self):  # datasets alone
            return
        draws = self.train_iterator.resumable.draws
        draws.mark()
        if self._pending is not None:
            saved = [r for r in self._pending if r.epoch == epoch and r.python_random]
            if saved:  # Keras draws this epoch's order from the state it was drawn from
                draws.arm(python_random_state(saved[-1].python_random))
        elif self._arm_next is not None and self._arm_next[0] == epoch:
            # After an epoch resumed mid-way, whose enqueuer never drew ahead (`fit` did not
            # take all its batches): the state the uninterrupted run drew this epoch from.
            draws.arm(self._arm_next[1])
        self._arm_next = None

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        super().on_train_batch_begin(batch, logs)
        if self._pending is not None:
            self._resume(self._epoch, batch)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._first_step:
            self._first_step = False
            self._observe_draw()
        super().on_train_batch_end(batch, logs)  # may back up (`write_backup`), or defer it
        if self._deferred and (int(batch) + 1) % self._per_batch == 0:
            self._deferred = False
            self.write_backup(self._epoch, batch)

    def on_test_begin(self, logs: dict | None = None) -> None:
        super().on_test_begin(logs)
        self.fit_datasets.test_begin()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.fit_datasets.epoch_end(epoch)
        if self._first_step and self._per_batch > 1:
            raise ValueError(
                f"fit's data ran out at the start of epoch {epoch}: with `steps_per_epoch`, "
                "Keras 2 reads one dataset on from epoch to epoch. Pass "
                "`iterator.to_tf_dataset().repeat()` (each pass is the next epoch)."
            )
        super().on_epoch_end(epoch, logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.train_iterator is not None:
            self.train_iterator.resumable.draws.disarm()
        if self._pending:  # Keras resumed after the last epoch: nothing left to train
            latest = self._pending[-1]
            self._pending = None
            self.train_iterator.resumable.set_state_in_order(latest.train, lambda length: None)
        super().on_train_end(logs)
        if getattr(self, "delete_checkpoint", True) and self._writes:
            _FILES.remove(self.state_path)

    def write_backup(self, epoch: int, batch: int) -> None:
        """Writes the iterator's record, then Keras 2's backup, after step `batch` of `epoch`."""
        if self.save_freq != "epoch" and (int(batch) + 1) % self._per_batch:
            self._deferred = True  # mid-batch: the step that ends the batch backs up
            return
        self._write(self._record(epoch, batch))  # first: Keras's backup always has its record
        self.keras_backup(epoch, batch)

    # ---------------------------------------------------------------- records

    def _record(self, epoch: int, batch: int) -> Record:
        """Where a backup Keras writes now after step `batch` of `epoch` resumes the stream."""
        epoch, batch = int(epoch), int(batch)  # Keras may pass numpy integers
        steps = (self.params or {}).get("steps") or _batches(self.train_iterator)
        state: tuple | None
        if self.save_freq == "epoch" or batch >= steps - 1:
            # The next epoch's order is drawn from the state after this one's draws: known
            # exactly once drawn, the record is refreshed then (`_observe_draw`).
            resume, done, state = epoch + 1, 0, keras3.random_state()
        else:
            resume, done, state = epoch, batch + 1, self._drawn
        return Record(
            epoch=resume,
            batch=done,  # Keras's steps; the iterator's batches in `train`
            reads=self._reads,
            fit_shuffle=self._fit_shuffle,
            extra_draws=self._extra_draws,
            python_random=None if state is None else json_random_state(state),
            **data_state(self, epoch, resume, done // self._per_batch),
        )

    def _observe_draw(self) -> None:
        """After an epoch's first step: the state its order was drawn from, and if shuffled."""
        if self.train_iterator is None:
            return
        draws = self.train_iterator.resumable.draws
        draws.disarm()
        length = self.train_iterator.resumable.batches
        if not draws.asked():  # no `len()`: Keras reads `to_tf_dataset()`, and draws no order
            self._reads, self._drawn, self._fit_shuffle = "dataset", None, False
            return
        self._reads = "sequence"
        state, shuffle = draws.drawn_from(length)
        if state is None:
            warnings.warn(
                "Something other than Keras drew from Python's `random` while `fit` started "
                f"epoch {self._epoch}: after a restore, the batches left in that epoch may "
                "come in another order than in the uninterrupted run.",
                stacklevel=2,
            )
            return
        if self._drawn is not None and self._fit_shuffle:
            after = shuffled(length, self._drawn)[1]
            ahead = shuffled(length, after)[1]
            self._extra_draws = {after: 0, ahead: 1}.get(state, self._extra_draws)
        self._drawn, self._fit_shuffle = state, shuffle
        exact, now = json_random_state(state), (self._epoch, 0)
        fresh = [
            replace(r, python_random=exact, fit_shuffle=shuffle) if (r.epoch, r.batch) == now else r
            for r in self._records
        ]
        if fresh != self._records:  # the records of this epoch's start, drawn exactly now
            self._records = fresh
            self._write(None)

    def _write(self, record: Record | None) -> None:
        """Writes the last two records (with `record` added) atomically; the chief's alone."""
        if record is not None:
            self._records = [*self._records[-1:], record]
        if self._writes:
            backup_record.write(self.state_path, self._records, _shards(self) or 1, _FILES)

    def _resume(self, epoch: int, step: int) -> None:
        """Continues the stream where Keras resumes, at step `step` of `epoch`."""
        pending, self._pending = self._pending or [], None
        found = [r for r in pending if (r.epoch, r.batch) == (epoch, step)]
        iterator = self.train_iterator
        if not found and (epoch, step) == (0, 0):
            return  # Keras starts afresh: its backup was never written
        if not found:
            saved = ", ".join(f"epoch {r.epoch} step {r.batch}" for r in pending)
            warnings.warn(
                f"Keras resumes at epoch {epoch} step {step}, but the backup's records of the "
                f"data stream are for {saved or 'nothing'}: the iterator reads epoch {epoch} "
                "from its start.",
                stacklevel=2,
            )
            iterator.set_epoch(epoch)
            return
        record = found[-1]
        if record.reads == "dataset":  # the dataset's next pass holds the rest
            self._reads, self._drawn, self._fit_shuffle = "dataset", None, False
            done = int(record.train["batch"]) if record.train else 0
            iterator.resumable.set_state_in_order(
                record.train,
                lambda length: Resumption(epoch, tuple(range(done, length))) if done else None,
            )
            return
        saved_state = record.python_random
        state = None if saved_state is None else python_random_state(saved_state)
        shuffle = record.fit_shuffle is not False  # Keras's default when not yet seen
        if step and shuffle and state is None:
            warnings.warn(
                f"The order `fit` drew for epoch {epoch} was not recorded: the batches it has "
                "left come in another order than in the uninterrupted run.",
                stacklevel=2,
            )
            shuffle = False
        self._drawn, self._fit_shuffle = state, record.fit_shuffle
        self._extra_draws = record.extra_draws
        if step and shuffle and state is not None:
            length = iterator.resumable.batches
            after = shuffled(length, state)[1]
            for _ in range(self._extra_draws or 0):
                after = shuffled(length, after)[1]
            self._arm_next = (epoch + 1, after)

        def rest(length: int) -> Resumption | None:  # batches per epoch at the record's commits
            return keras2_resumption(epoch, step, length, shuffle, state) if step else None

        iterator.resumable.set_state_in_order(record.train, rest)


def steps_per_batch(save_freq: Any, steps: int | None, iterator: Any) -> int:
    """Keras 2's training steps per batch of `iterator`, where a backup in steps needs them.

    Args:
        save_freq: The callback's `save_freq`.
        steps: `fit`'s steps per epoch (`None`: unknown).
        iterator: The iterator `fit` trains on, itself or through `to_tf_dataset()`.

    Returns:
        1, or the number of workers where tf.distribute splits each batch of a
        worker's shard between all replicas (`to_tf_dataset()` under
        `MultiWorkerMirroredStrategy`: one step per worker).

    Raises:
        ValueError: `save_freq` in steps, and `fit`'s steps per epoch unknown or
            not those of the iterator: Keras 2 could not resume mid-epoch.
    """
    if save_freq == "epoch" or iterator is None:
        return 1
    shard, length = iterator.shard, iterator.resumable.batches
    split = shard.count if shard.count > 1 and keras_api.multi_worker_scope() else 1
    if steps is None or (split > 1 and steps != length * split):
        # Keras 2 resumes a backup saved mid-epoch at `batch + 1` unless `batch` was the
        # epoch's last step, which it tells from `fit`'s steps per epoch
        # (`keras/src/distribute/worker_training_state.py` lines 207-216 of Keras 2.15):
        # unknown for a dataset of unknown size (a sharded `to_tf_dataset()`).
        expected = "len(iterator)" + (" * iterator.shard.count" if split > 1 else "")
        raise ValueError(
            f"BackupAndRestore(save_freq={save_freq!r}) resumes mid-epoch, which needs fit's "
            f"steps per epoch: {length * split} here ({length} batches"
            + (f", each split by tf.distribute into {split} steps" if split > 1 else "")
            + f"), but fit counts {steps}. Pass `steps_per_epoch={expected}`"
            + (" and `iterator.to_tf_dataset().repeat()`" if split > 1 else "")
            + ", or back up with save_freq='epoch'."
        )
    return split


# ---------------------------------------------------------------------------- the other data


def _shards(callback: BackupAndRestore) -> int | None:
    """The shard count of the iterators given (`None`: datasets alone, not checked)."""
    given = [callback.train_iterator, callback.validation_iterator]
    return next((it.shard.count for it in given if it is not None), None)


def trains_the_iterator(callback: BackupAndRestore) -> bool:
    """At an epoch's start: whether `fit` trains on `train_iterator` (else on datasets)."""
    datasets = callback.fit_datasets.epoch_begin()
    if callback.train_iterator is None and not datasets:
        raise ValueError(
            "On Keras 2, pass the iterator `fit` trains on: `BackupAndRestore(backup_dir, "
            "train_iterator=train)`, or train on a dataset of `rk.image_dataset_from_directory` "
            "itself. Keras 2 tells callbacks nothing of `fit`'s data: a restart would start over."
        )
    return callback.train_iterator is not None


def _batches(iterator: Any) -> int:
    """The iterator's batches per epoch; 0 for none (`if iterator` would call its `len()`)."""
    return 0 if iterator is None else int(iterator.resumable.batches)


def data_state(callback: BackupAndRestore, epoch: int, resume: int, batches: int) -> dict[str, Any]:
    """The data's states for a backup resuming after `batches` of epoch `resume` (a backup
    before `epoch`'s validation, which the resumed run skips, counts that pass)."""
    train, validation = callback.train_iterator, callback.validation_iterator
    passes = None if validation is None else validation.resumable.epoch
    if passes is not None and callback.fit_datasets.validation_ahead(epoch, resume):
        passes += 1
    return {
        "train": None if train is None else train.state_dict(epoch=resume, batch=batches),
        "validation": None if validation is None else validation.state_dict(epoch=passes),
        "datasets": callback.fit_datasets.state(epoch, resume),
        "optimizer_steps": optimizer_steps(callback.model),
    }


def restore_others(callback: BackupAndRestore, records: list[Record] | None) -> Any:
    """When `fit` begins: the validation iterator and datasets of the record Keras restored.

    That record has the optimizer's step count Keras restored. Returns those left for `_resume`."""
    steps = optimizer_steps(callback.model)
    found = [r for r in records or [] if steps is not None and r.optimizer_steps == steps]
    record = found[-1] if found else None
    resumes = (record.epoch, record.batch) if record else (0, 0)
    callback.fit_datasets = Keras2Fit()  # this `fit`'s
    callback.fit_datasets.train_begin(record.datasets if record else [], resumes)
    validation = callback.validation_iterator
    if record is not None and record.validation is not None and validation is not None:
        validation.load_state_dict(record.validation)
    return records if callback.train_iterator is not None else None
