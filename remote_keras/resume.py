"""Exact resume: an iterator's state, and the batch order Keras's `fit` reads it in.

An iterator's batch `b` of epoch `e` is a pure function of `(seed, e, b)`, so
its state is small: the epoch, how many of its batches were consumed, and
what identifies the data (seed, shard, lakeFS commits, a fingerprint of the
file list). `fit(shuffle=True)` (Keras's default) also reads each epoch's
batches in an order drawn with Python's global `random.shuffle`; the
functions here replay that draw so that a resumed epoch reads its remaining
batches in the order the uninterrupted run would have.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import sys
import warnings
import weakref
from types import FrameType
from typing import Any, cast

import keras
from keras.src.utils import file_utils

from remote_keras import backup_files

# Version of the dictionaries `state_dict()` returns.
STATE_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Resumption:
    """How an iterator serves the rest of an interrupted epoch.

    Attributes:
        epoch: The interrupted epoch.
        positions: For each index Keras asks for in that epoch, the batch
            (its position in the epoch's order) to return; one entry per
            batch not consumed yet.
    """

    epoch: int
    positions: tuple[int, ...]


def fingerprint(iterator: Any) -> dict[str, Any]:
    """What identifies an iterator's samples: their count and a hash of names and labels.

    Args:
        iterator: A remote_keras iterator.

    Returns:
        `{"samples": n, "sha256": hex digest}`; the digest covers the file
        names in order, the class indices and the batch size.
    """
    digest = hashlib.sha256()
    for name in iterator.filenames:
        digest.update(name.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(repr(sorted(getattr(iterator, "class_indices", {}).items())).encode())
    digest.update(f"batch_size={iterator.batch_size}".encode())
    return {"samples": int(iterator.n), "sha256": digest.hexdigest()}


def check_compatible(iterator: Any, state: dict[str, Any]) -> None:
    """Raises `ValueError` naming what differs when `state` was saved by another dataset.

    Args:
        iterator: The iterator the state is being loaded into.
        state: A dictionary from `state_dict()`.
    """
    if state.get("format") != STATE_FORMAT:
        raise ValueError(
            f"Unknown iterator state format {state.get('format')!r} (this version reads "
            f"format {STATE_FORMAT})."
        )
    mine = {
        "seed": iterator.seed,
        "shuffle": bool(iterator.shuffle),
        "batch_size": int(iterator.batch_size),
        "shard": [iterator.shard.index, iterator.shard.count],
    }
    for key, value in mine.items():
        if state.get(key) != value:
            raise ValueError(
                f"The saved iterator state has {key}={state.get(key)!r} but this iterator "
                f"has {key}={value!r}: it would not continue the same data stream. Build "
                "the iterator with the arguments of the run that saved the state."
            )
    saved, now = state["fingerprint"], fingerprint(iterator)
    if saved != now:
        raise ValueError(
            f"The saved iterator state is for a dataset of {saved['samples']} samples "
            f"(file list sha256 {saved['sha256'][:12]}...), but this iterator reads "
            f"{now['samples']} samples (sha256 {now['sha256'][:12]}...) from "
            f"{iterator.directory!r}: the files, their order, the classes or the batch "
            "size changed. Resume from the data the run was started on."
        )


def json_random_state(state: tuple) -> list:
    """Python's `random.getstate()` as JSON-serialisable lists."""
    version, internal, gauss = state
    return [version, list(internal), gauss]


def python_random_state(saved: list) -> tuple:
    """The inverse of `json_random_state`."""
    version, internal, gauss = saved
    return (version, tuple(internal), gauss)


def shuffled(count: int, state: tuple) -> tuple[list[int], tuple]:
    """What `random.shuffle(list(range(count)))` gives from `state`, and the state after it.

    Keras's `PyDataset` adapter (and its enqueuer) draws each epoch's batch
    order this way when `fit(shuffle=True)`.
    """
    generator = random.Random()  # noqa: S311 - replays Keras's (non-cryptographic) draw
    generator.setstate(state)
    order = list(range(count))
    generator.shuffle(order)
    return order, generator.getstate()


def fit_resumption(
    epoch: int, done: int, batches: int, fit_shuffle: bool, state: tuple | None
) -> Resumption:
    """The batches still to read in an interrupted epoch, in the order `fit` will ask for them.

    Args:
        epoch: The interrupted epoch.
        done: Batches of it already trained on.
        batches: Batches per epoch.
        fit_shuffle: Whether `fit` shuffles batch order (`fit(shuffle=...)`).
        state: Python's `random` state the epoch's order was drawn from
            (needed when `fit_shuffle`); the resumed epoch's own draw is
            made from it too (the caller sets it before `fit` draws).

    Returns:
        The `Resumption`: `fit` asks for indices `0 .. batches - done - 1`,
        shuffled from `state` when `fit_shuffle`; each maps to the batch the
        uninterrupted run would have trained at that step.
    """
    if not fit_shuffle:
        return Resumption(epoch, tuple(range(done, batches)))
    if state is None:
        raise ValueError("fit(shuffle=True) resumption needs the Python `random` state")
    remaining = shuffled(batches, state)[0][done:]
    asked, _ = shuffled(len(remaining), state)
    positions = [0] * len(remaining)
    for step, index in enumerate(asked):
        positions[index] = remaining[step]
    return Resumption(epoch, tuple(positions))


# ---------------------------------------------------------------------------- the callback


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """Keras's `BackupAndRestore` that also resumes the data stream exactly.

    Takes Keras's arguments. Each backup also holds the state of the
    iterators `fit` trains and validates on (found in `fit`'s arguments, or
    given here), in the same metadata file, written atomically after the
    weights. On restore the weights and epoch come back as in Keras, and the
    iterators continue where the backup was taken: the interrupted epoch reads
    only the batches not trained yet, in the order and with the augmentation
    of the uninterrupted run (also under `fit(shuffle=True)`, by replaying
    the batch order Keras draws from Python's `random`), and lakeFS refs are
    read at the commits the first run pinned. Without a backup, an
    iterator at another epoch than `fit(initial_epoch=k)` is moved to epoch `k`.

    Args:
        backup_dir: Folder of the backup, as for Keras.
        save_freq: `"epoch"`, or a number of batches, as for Keras.
        double_checkpoint: As for Keras.
        delete_checkpoint: As for Keras.
        train_iterator: The remote_keras iterator `fit` trains on, when it is
            not `fit`'s `x` (e.g. `fit(iterator.to_tf_dataset())`). Given
            here, its state is restored at once, so that not even the batches
            Keras reads before training to learn their shapes are read twice.
        validation_iterator: Likewise for `validation_data`.
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
        self._iterators = {"train": train_iterator, "validation": validation_iterator}
        self._restored = False
        self._val_restored = False
        self._fit_shuffle = True
        self._random_states: dict[int, tuple] = {}  # epoch -> Python `random` state of its order
        self._epoch_in_progress = 0
        self._offset = 0  # batches of the epoch in progress trained before this `fit` started
        self._set_random_at: int | None = None
        self._resumed_epoch: int | None = None  # an epoch resumed mid-way, shorter than others
        self._quiet: Any = None
        self._unclaimed: dict[str, Any] | None = None
        self._validation_freq: Any = 1
        backup_files.repair(self._weights_path, self._training_metadata_path)
        saved = self._saved_state()
        if saved is not None and train_iterator is not None:
            self._restore(saved)
        elif saved is not None and saved["train"] is not None:
            self._unclaimed = saved
            _waiting.add(self)  # the training iterator claims it at its first read

    # ---------------------------------------------------------------- Keras's hooks

    def on_train_begin(self, logs: dict | None = None) -> None:
        super().on_train_begin(logs)  # weights and `model._initial_epoch`, as Keras
        arguments = _fit_arguments(self.model)
        for role, name in (("train", "x"), ("validation", "validation_data")):
            if self._iterators[role] is None and _is_iterator(arguments.get(name)):
                self._iterators[role] = arguments[name]
        self._validation_freq = arguments.get("validation_freq", 1)
        # Keras shuffles the batch order of a `PyDataset`, not of a `tf.data.Dataset`.
        self._fit_shuffle = bool(arguments.get("shuffle", True)) and _is_iterator(
            arguments.get("x")
        )
        if arguments.get("steps_per_epoch") and self.save_freq != "epoch":
            warnings.warn(
                "With `steps_per_epoch`, Keras does not start a new pass over the data each "
                "epoch: an interrupted epoch is resumed from its start.",
                stacklevel=2,
            )
        saved = self._saved_state()
        if saved is not None:
            if not self._restored:
                self._restore(saved)
            self._restore_validation(saved)  # found in fit's arguments after a claim
            train = self._iterators["train"]
            if train is not None:
                train._count_resumed()
            steps = arguments.get("epoch_iterator")
            if self._resumed_epoch is not None and train is not None and steps is not None:
                # A `tf.data.Dataset` of unknown length (`train.to_tf_dataset()` resumed
                # mid-epoch): Keras would take the short first pass for every epoch's length.
                if getattr(steps, "_num_batches", 0) is None:
                    steps._num_batches = len(train)
            state = python_random_state(saved["python_random"])
            self._random_states = {saved["epoch"]: state}
            random.setstate(state)  # `fit` draws the first epoch's batch order from it
        else:
            initial = int(self.model._initial_epoch or arguments.get("initial_epoch") or 0)
            state = random.getstate()
            train = self._iterators["train"]
            if train is not None and train._current_epoch() != initial:
                # A fresh iterator for `fit(initial_epoch=k)`: epoch k's samples, and the
                # batch order a run started at epoch 0 from the same seed drew for it.
                if self._fit_shuffle:
                    for _ in range(train._current_epoch(), initial):
                        state = shuffled(len(train), state)[1]
                    random.setstate(state)
                train.set_epoch(initial)
            validation = self._iterators["validation"]
            if validation is not None and validation._current_epoch() != initial:
                validation.set_epoch(initial)
            self._random_states = {initial: state}

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if epoch == self._resumed_epoch:  # it ends when its batches run out, not by count
            warnings.filterwarnings("ignore", message="Your input ran out of data")
            self._quiet = warnings.filters[0]
        if self._set_random_at == epoch:  # after a resumed epoch, whose own draw differed
            random.setstate(self._random_state(epoch))
            self._set_random_at = None
        if epoch != self._epoch_in_progress:
            self._offset = 0
        self._epoch_in_progress = epoch
        self._current_epoch = epoch  # Keras sets it only at an epoch's end
        super().on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self._quiet is not None:
            cast(list, warnings.filters).remove(self._quiet)
            self._quiet = None
        super().on_epoch_end(epoch, logs)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        super().on_train_batch_end(batch + self._offset, logs)

    def _save_model(self) -> None:
        if not file_utils.exists(self.backup_dir):
            file_utils.makedirs(self.backup_dir)
        for current, previous in (
            (self._weights_path, self._prev_weights_path),
            (self._training_metadata_path, self._prev_training_metadata_path),
        ):
            if self.double_checkpoint and file_utils.exists(current):
                file_utils.copy(current, previous)
        epoch, done, validated = self._position()
        metadata = {
            "epoch": epoch,
            "batch": self._last_batch_seen,
            "remote_keras": self._data_state(epoch, done, validated),
        }
        backup_files.save(
            self._weights_path, self._training_metadata_path, self.model.save_weights, metadata
        )

    def _position(self) -> tuple[int, int, bool]:
        """Where a backup taken now resumes: `(epoch, batches of it done, validated)`.

        An epoch whose batches have all been trained (a backup after its last
        batch, before its end) resumes at the next epoch's start, as a backup
        at its end would: Keras cannot run an epoch with no batches left.
        `validated` tells whether the epoch's validation pass, if it has one,
        counts as done.
        """
        if self.save_freq == "epoch" or self._current_epoch != self._epoch_in_progress:
            return self._current_epoch, 0, True  # at an epoch's end
        epoch, done = self._epoch_in_progress, self._last_batch_seen + 1
        train = self._iterators["train"]
        if train is not None and done >= len(train):
            return epoch + 1, 0, False
        return epoch, done, True

    # ---------------------------------------------------------------- state

    def _data_state(self, epoch: int, done: int, validated: bool) -> dict[str, Any]:
        train, validation = self._iterators["train"], self._iterators["validation"]
        validation_state = None
        if validation is not None:
            passes = validation._current_epoch()
            if not validated and _validates(epoch - 1, self._validation_freq):
                passes += 1  # the pass Keras runs before the epoch ends, skipped on resume
            validation_state = validation.state_dict(epoch=passes)
        return {
            "format": STATE_FORMAT,
            "epoch": epoch,
            "batch": done,
            "fit_shuffle": self._fit_shuffle,
            "python_random": json_random_state(self._random_state(epoch)),
            "train": None if train is None else train.state_dict(epoch=epoch, batch=done),
            "validation": validation_state,
        }

    def _random_state(self, epoch: int) -> tuple:
        """Python's `random` state that epoch `epoch`'s batch order is drawn from."""
        known = max(e for e in self._random_states if e <= epoch)
        state = self._random_states[known]
        batches = len(self._iterators["train"]) if self._iterators["train"] is not None else 0
        for e in range(known, epoch):
            if self._fit_shuffle:
                state = shuffled(batches, state)[1]
            self._random_states[e + 1] = state
        return state

    def _saved_state(self) -> dict[str, Any] | None:
        if not file_utils.exists(self._training_metadata_path):
            return None
        with file_utils.File(self._training_metadata_path, "r") as f:
            return json.loads(f.read()).get("remote_keras")

    def _restore_validation(self, saved: dict[str, Any]) -> None:
        validation = self._iterators["validation"]
        if validation is not None and saved["validation"] is not None and not self._val_restored:
            validation.load_state_dict(saved["validation"])
            self._val_restored = True

    def _claim(self, iterator: Any) -> bool:
        """Restores into `iterator` if it reads what the backup's training iterator read."""
        saved = self._unclaimed
        if saved is None or self._restored:
            return False
        state = saved["train"]
        if state.get("directory") != _directory(iterator) or state["seed"] != iterator.seed:
            return False
        if state["shard"] != [iterator.shard.index, iterator.shard.count]:
            return False
        self._unclaimed = None
        _waiting.discard(self)
        self._iterators["train"] = iterator
        self._restore(saved)
        return True

    def _restore(self, saved: dict[str, Any]) -> None:
        """Loads the saved iterator states; the interrupted epoch reads only what is left."""
        self._restored = True
        epoch, done = saved["epoch"], saved["batch"]
        train = self._iterators["train"]
        if train is not None and saved["train"] is not None:
            state = python_random_state(saved["python_random"])
            # Keras counts a whole epoch's steps before `on_train_begin`, which counts the rest.
            train._load_state(saved["train"], state if saved["fit_shuffle"] else None, False)
        self._restore_validation(saved)
        self._epoch_in_progress, self._offset = epoch, done
        self._last_batch_seen = done - 1 if done else 0  # Keras counts batches from here
        self._set_random_at = epoch + 1 if done and saved["fit_shuffle"] else None
        self._resumed_epoch = epoch if done else None


# Callbacks with a backup whose training iterator was not given: the first iterator to read
# (Keras reads batches to learn their shapes before any callback runs) that reads the same
# folder with the same seed and shard is restored before that read, so nothing is read twice.
_waiting: weakref.WeakSet[BackupAndRestore] = weakref.WeakSet()


def claim(iterator: Any) -> None:
    """Restores a waiting backup's state into `iterator`, before its first read, if it matches.

    Args:
        iterator: A remote_keras iterator about to read its first batch.
    """
    for callback in list(_waiting):
        if callback._claim(iterator):
            return


def _directory(iterator: Any) -> str:
    from remote_keras import errors

    return errors.redact(str(iterator.directory))


def _is_iterator(value: Any) -> bool:
    return hasattr(value, "load_state_dict") and hasattr(value, "lakefs_pins")


def _fit_arguments(model: Any) -> dict[str, Any]:
    """The arguments of the `model.fit` call running now (its frame's locals), or `{}`."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "fit" and frame.f_locals.get("self") is model:
            return dict(frame.f_locals)
        frame = frame.f_back
    return {}


def _validates(epoch: int, validation_freq: Any) -> bool:
    """Whether `fit(validation_freq=...)` validates after epoch `epoch` (from 0)."""
    if isinstance(validation_freq, int):
        return (epoch + 1) % validation_freq == 0
    return epoch + 1 in validation_freq
