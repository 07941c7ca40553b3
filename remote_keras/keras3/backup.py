"""`BackupAndRestore`: Keras's backups, with the iterators' state, for an exact resume.

Datasets from `rk.image_dataset_from_directory` are continued at epoch boundaries
(each resumed epoch in the uninterrupted run's order): `keras_lines.dataset_passes`.
"""

from __future__ import annotations

import warnings
from typing import Any

import keras

from remote_keras import errors
from remote_keras.keras3 import backup_files
from remote_keras.keras3.keras_src import file_utils
from remote_keras.keras_agnostic import backup_record, resume, workers
from remote_keras.keras_lines import dataset_passes, keras3, line_of
from remote_keras.keras_lines.backup_hooks import Keras3BackupHooks
from remote_keras.keras_lines.keras3 import FitOrder, json_random_state
from remote_keras.keras_lines.keras3_16 import EpochSeededReplay


class BackupAndRestore(Keras3BackupHooks, keras.callbacks.BackupAndRestore):
    """Keras's `BackupAndRestore` that also resumes the data stream exactly.

    Takes Keras's arguments. Each backup also holds the state of the
    iterators `fit` trains and validates on, in the same metadata file,
    written atomically after the weights. On restore the weights and epoch
    come back as in Keras, and the iterators continue where the backup was
    taken: the interrupted epoch reads only the batches not trained yet, in
    the order and with the augmentation of the uninterrupted run (also under
    `fit(shuffle=True)`, see `remote_keras.keras_lines`), and lakeFS refs are
    read at the commits the first run pinned. Without a backup, the training
    iterator is moved to the epoch `fit` starts at (`initial_epoch`).

    Finding the iterators, when not given: with a backup, the open
    remote_keras iterator that reads the same folder with the same seed and
    shard as the backed-up one, looked up when the callback is created (so
    that not even the batches Keras reads before training are read twice:
    create the iterator first) and again when training begins. Without a
    backup, the open iterator Keras resets just before training (then its
    validation pass), or failing that the one it reads from during the first
    training step (or validation step).

    Args:
        backup_dir: Folder of the backup, as for Keras.
        save_freq: `"epoch"`, or a number of batches, as for Keras.
        double_checkpoint: As for Keras.
        delete_checkpoint: As for Keras.
        train_iterator: The remote_keras iterator `fit` trains on; needed when
            `fit` reads it through `iterator.to_tf_dataset()` (create the
            callback before the dataset).
        validation_iterator: Likewise for `validation_data`.

    Raises:
        ValueError: Several open iterators fit the description of one
            that was backed up (pass it as `train_iterator=`).
    """

    def __init__(
        self,
        backup_dir: str,
        save_freq: str | int = "epoch",
        double_checkpoint: bool = False,
        delete_checkpoint: bool = True,
        train_iterator: Any = None,
        validation_iterator: Any = None,
    ) -> None:
        super().__init__(backup_dir, save_freq, double_checkpoint, delete_checkpoint)
        line_of("keras3").check_backup(self, keras.callbacks.BackupAndRestore)
        self._iterators = {"train": train_iterator, "validation": validation_iterator}
        self._restored = {"train": False, "validation": False}
        self._order: FitOrder | None = None
        self._fit_start = 0  # the epoch this `fit` started at
        self._origin = 0  # the epoch the uninterrupted run's `fit` started at (Keras 3.16)
        self._epoch = 0  # the epoch in progress (Keras's numbering)
        self._at_epoch_end = False
        self._done = 0  # batches of the epoch in progress trained, this run and before
        self._offset = 0  # batches of the epoch in progress trained before this `fit` started
        self._set_random_at: int | None = None
        self._in_epoch = False
        self._validated: set[int] = set()  # epochs `fit` validated after, in this run
        self._passes: dict[str, Any] = {"train": [], "epoch": []}  # datasets' counts of passes
        paths = self.backup_paths
        backup_files.prepare(paths.weights, paths.metadata)
        self._saved = backup_files.saved_record(paths.metadata)
        self._find_saved()

    # ---------------------------------------------------------------- Keras's hooks

    def on_train_begin(self, logs: dict | None = None) -> None:
        super().on_train_begin(logs)  # weights and epoch, as Keras
        self._order = None
        saved = self._saved
        if saved is not None:
            self._find_saved()
            train = self._iterators["train"]
            if train is not None:
                train.resumable.count_resumed()  # Keras has counted whole epochs' steps by now
            keras3.set_random_state(saved.python_random)  # fit draws from it
            dataset_passes.restore(saved.datasets)
        elif self._iterators["train"] is None:
            self._iterators["train"] = _single(_reset_by_keras(self._iterators))
        self._passes["train"] = dataset_passes.counts()
        train = self._iterators["train"]
        steps = self.params.get("steps") if self.params else None
        if train is not None and steps not in (None, len(train)) and self.save_freq != "epoch":
            warnings.warn(
                "With `steps_per_epoch`, Keras does not start a new pass over the data each "
                "epoch: an interrupted epoch is resumed from its start.",
                stacklevel=2,
            )

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if self._order is None:  # the first epoch of this `fit`
            self._fit_start = epoch
            if self._saved is None:
                self._origin = epoch
                _move_to(self._iterators, epoch)
            self._order = FitOrder(epoch, keras3.random_state())
        if self._set_random_at == epoch:  # after a resumed epoch, whose own draw differed
            keras3.set_random_state(self._order.state(epoch, self._batches()))
            self._set_random_at = None
        if epoch != self._epoch:
            self._offset = 0
        self._epoch, self._at_epoch_end, self._in_epoch = epoch, False, True
        self._passes["epoch"] = dataset_passes.counts()
        super().on_epoch_begin(epoch, logs)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self._iterators["train"] is None and self._saved is None:
            self._iterators["train"] = _single(_in_pass(self._iterators))
        super().on_train_batch_begin(batch, logs)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._order is not None:
            train = self._iterators["train"]
            batches = train.num_batches if train is not None else 0
            if not line_of("keras3").seeds_epochs:
                self._order.observe(self._epoch, batches, self._batches())
            elif self._order.shuffle is None and train is not None:  # once proven, for the fit
                fit_pass = self._epoch - self._fit_start
                self._order.shuffle = train.resumable.read_shuffle(
                    fit_pass, batches, batch + 1, True
                )
        if batch == 0 and self._epoch == self._fit_start:  # the first step of this `fit`
            dataset_passes.warn_derived(self._passes["train"])
        self._done = batch + self._offset + 1
        super().on_train_batch_end(batch + self._offset, logs)

    def on_test_begin(self, logs: dict | None = None) -> None:
        if self._in_epoch:  # `fit`'s validation pass
            self._validated.add(self._epoch)
            if self._iterators["validation"] is None:
                self._iterators["validation"] = _single(_reset_by_keras(self._iterators))
        super().on_test_begin(logs)

    def on_test_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self._in_epoch and self._iterators["validation"] is None:
            self._iterators["validation"] = _single(_in_pass(self._iterators))
        super().on_test_batch_begin(batch, logs)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._at_epoch_end = True
        super().on_epoch_end(epoch, logs)
        self._in_epoch = False

    def on_train_end(self, logs: dict | None = None) -> None:
        if backup_files.writes_backups():  # the writer deletes the backup (`delete_checkpoint`)
            super().on_train_end(logs)

    def write_backup(self) -> None:
        """Writes Keras's backup, with the iterators' state in its metadata file."""
        paths = self.backup_paths
        if not backup_files.writes_backups():
            backup_files.save_elsewhere(paths.weights, self.model.save_weights)
            return
        if not file_utils.exists(self.backup_dir):
            file_utils.makedirs(self.backup_dir)
        for current, previous in (
            (paths.weights, paths.previous_weights),
            (paths.metadata, paths.previous_metadata),
        ):
            if self.double_checkpoint and file_utils.exists(current):
                file_utils.copy(current, previous)
        epoch, done, validated = self._position()
        metadata = {
            "epoch": epoch,
            "batch": 0 if self._at_epoch_end else self._done - 1,  # as Keras writes it
            "remote_keras": self._data_state(epoch, done, validated),
        }
        files = (paths.weights, paths.metadata)
        backup_files.save(*files, self.model.save_weights, metadata, file_utils.File)

    def _position(self) -> tuple[int, int, bool]:
        """Where a backup taken now resumes: `(epoch, batches of it done, validated)`.

        An epoch whose batches have all been trained (a backup after its last
        batch, before its end) resumes at the next epoch's start, as a backup
        at its end would: Keras cannot run an epoch with no batches left.
        `validated` tells whether the epoch's validation pass, if it has one,
        counts as done.
        """
        if self.save_freq == "epoch" or self._at_epoch_end:
            return self._epoch + 1, 0, True
        train = self._iterators["train"]
        if train is not None and self._done >= len(train):
            return self._epoch + 1, 0, False
        return self._epoch, self._done, True

    # ---------------------------------------------------------------- state

    def _batches(self) -> int:
        train = self._iterators["train"]
        return len(train) if train is not None else 0

    def _data_state(self, epoch: int, done: int, validated: bool) -> dict[str, Any]:
        train, validation = self._iterators["train"], self._iterators["validation"]
        assert self._order is not None  # noqa: S101 - backups come after an epoch began
        record = backup_record.Record(
            epoch=epoch,
            batch=done,
            fit_shuffle=_recorded_shuffle(
                self._order, train, self._epoch - self._fit_start, self._done - self._offset
            ),
            order_origin=self._origin,
            python_random=json_random_state(self._order.state(epoch, self._batches())),
            train=None if train is None else train.state_dict(epoch=epoch, batch=done),
            validation=_validation_state(validation, epoch, validated, self._validated),
            datasets=_datasets_state(self._passes, mid_epoch=epoch == self._epoch),
        )
        return backup_record.document([record], train.shard.count if train else 1)

    def _find_saved(self) -> None:
        """Restores the backed-up iterators found (given, or open and reading the same data)."""
        saved = self._saved
        if saved is None:
            return
        for role, state in (("train", saved.train), ("validation", saved.validation)):
            if state is None or self._restored[role]:
                continue
            if self._iterators[role] is None:
                others = [it for r, it in self._iterators.items() if r != role]
                self._iterators[role] = _single(_matching(state, others), state)
            if self._iterators[role] is not None:
                self._restore(role, saved)

    def _restore(self, role: str, saved: backup_record.Record) -> None:
        """Loads a saved iterator state; the interrupted epoch reads only what is left."""
        self._restored[role] = True
        iterator = self._iterators[role]
        if role == "validation":
            iterator.load_state_dict(saved.validation)
            return
        epoch, done = saved.epoch, saved.batch
        state = keras3.python_random_state(saved.python_random) if saved.fit_shuffle else None
        self._origin = saved.order_origin
        replay = None
        if line_of("keras3").seeds_epochs and saved.fit_shuffle:
            replay = EpochSeededReplay(self._origin, epoch)
        # Keras counts a whole epoch's steps before `on_train_begin`, which counts the rest.
        iterator.resumable.set_state(saved.train, state, counted=False, replay=replay)
        self._epoch, self._offset, self._done = epoch, done, done
        self.count_batches_from(done - 1 if done else 0)  # Keras counts batches from here
        self._set_random_at = epoch + 1 if done and saved.fit_shuffle else None


def _validates(validated: set[int], epoch: int) -> bool:
    """Whether `fit` validates after `epoch`, given the epochs it `validated` after so far.

    `fit(validation_freq=k)` validates first after epoch `k - 1`; with no
    validation seen yet, after every epoch (Keras's default).
    """
    if not validated:
        return True
    return (epoch + 1) % (min(validated) + 1) == 0


def _validation_state(
    validation: Any, epoch: int, validated: bool, after: set[int]
) -> dict[str, Any] | None:
    """The state of the `validation` iterator (or `None`) for a backup resuming at `epoch`.

    `validated`: whether the pass after epoch `epoch - 1` counts as done;
    `after`: the epochs `fit` validated after, in this run.
    """
    if validation is None:
        return None
    passes = validation.resumable.epoch
    if not validated and _validates(after, epoch - 1):
        passes += 1  # the pass Keras runs before the epoch ends, skipped on resume
    return validation.state_dict(epoch=passes)


def _recorded_shuffle(order: FitOrder, train: Any, fit_pass: int, trained: int) -> bool:
    """`fit(shuffle=...)` for a backup: as proven, else as the pass's indices read, else `True`.

    `trained`: batches of pass `fit_pass` trained so far.
    """
    shuffle = order.shuffle
    if shuffle is None and line_of("keras3").seeds_epochs and train is not None:
        shuffle = train.resumable.read_shuffle(fit_pass, train.num_batches, trained, False)
    return shuffle is not False


def _move_to(iterators: dict[str, Any], epoch: int) -> None:
    """Without a backup: the iterators read epoch `epoch` (`fit(initial_epoch=...)`)."""
    train, validation = iterators["train"], iterators["validation"]
    if train is not None and train.resumable.epoch != epoch:
        # Epoch `epoch`'s samples, and the batch order a run started at epoch 0 from the
        # same seed drew for it (assuming `fit(shuffle=True)`, Keras's default).
        keras3.advance_random(len(train), epoch - train.resumable.epoch)
        train.set_epoch(epoch)
        if line_of(
            "keras3"
        ).seeds_epochs:  # `fit(shuffle=...)` told by the first indices Keras asks for
            train.resumable.replay_fit(EpochSeededReplay(0, epoch, shuffle=None))
    if validation is not None and validation.resumable.epoch != epoch:
        validation.set_epoch(epoch)


def _datasets_state(passes: dict[str, Any], mid_epoch: bool) -> list[dict[str, Any]]:
    """The datasets' draws to restore; a backup mid-epoch reads that epoch again, from its start."""
    return dataset_passes.state(passes["train"], passes["epoch"] if mid_epoch else None)


# ---------------------------------------------------------------------------- finding


def _open(exclude: Any) -> list[Any]:
    """This process's open remote_keras iterators, except those in `exclude`."""
    taken = [it for it in (exclude.values() if isinstance(exclude, dict) else exclude) if it]
    return [it for it in workers.open_iterators() if all(it is not t for t in taken)]


def _matching(state: dict[str, Any], exclude: Any) -> list[Any]:
    """Open iterators reading the folder of `state` with its seed and shard.

    Several are told apart by their samples (the state's fingerprint); a single
    one is returned even when its samples differ, for `load_state_dict` to
    refuse naming the difference.
    """
    found = [
        it for it in _open(exclude)
        if errors.redact(str(it.directory)) == state.get("directory")
        and it.seed == state["seed"]
        and resume.same_run(it, state)
    ]  # fmt: skip
    if len(found) > 1:
        found = [it for it in found if resume.fingerprint(it) == state["fingerprint"]]
    return found


def _reset_by_keras(taken: dict[str, Any]) -> list[Any]:
    return [it for it in _open(taken) if it.resumable.reset_by_keras()]


def _in_pass(taken: dict[str, Any]) -> list[Any]:
    return [it for it in _open(taken) if it.resumable.in_pass()]


def _single(found: list[Any], state: dict[str, Any] | None = None) -> Any:
    """The one iterator found, `None` for none; several fitting a backup raise `ValueError`."""
    if len(found) > 1 and state is not None:
        raise ValueError(
            f"{len(found)} open iterators read {state.get('directory')!r} with seed "
            f"{state['seed']} and shard {state['shard']}, as the backed-up one did: pass the "
            "one `fit` trains on as `BackupAndRestore(..., train_iterator=...)` (or "
            "`validation_iterator=`)."
        )
    return found[0] if len(found) == 1 else None
