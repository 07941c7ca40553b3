"""One Keras 2 training run for the resume tests, as a user's script would be (a subprocess).

Trains a tiny model with `remote_keras.BackupAndRestore(train_iterator=...)` on a
seeded, augmented iterator and appends one JSON line per training step to
`--record`: the batch's labels (which files), a hash of its pixels (which
augmentation) and a hash of the weights it starts from. `--kill-step N:PHASE`
sends itself SIGKILL at training step N of this process (from 0), at PHASE:
`record` (the data record written, Keras's backup not yet), `saved` (after the
step's backup) or `epoch_end` (the epoch's end, before the callbacks' epoch-end
work). `--branch-moves` commits one more image to the lakeFS branch before
training. `--epoch-end-pause S` waits S seconds at each epoch's end (as validation would).
The final weights go to `--weights`, the iterator's state to `--state`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pandas as pd
import tensorflow as tf

import remote_keras as rk
from remote_keras.keras2 import backup as backup_module

tfk = tf.keras


class RecordingModel(tfk.Sequential):
    """A tiny regressor, built lazily, that appends what every training step reads to a file."""

    def __init__(self, record: str) -> None:
        super().__init__([tfk.layers.Flatten(), tfk.layers.Dense(1)])
        self.record = open(record, "a", buffering=1)  # one write per line: survives SIGKILL
        self.steps = 0  # training steps begun in this process
        self.kill_at: tuple[int, str] | None = None

    def train_step(self, data):
        x, y = data[0], data[1]
        line = {
            "rows": [int(v) for v in np.asarray(y)],
            "x": _digest(np.asarray(x)),
            "w": _digest(*[np.asarray(v) for v in self.trainable_variables]),
        }
        self.record.write(json.dumps(line) + "\n")
        self.steps += 1
        return super().train_step(data)

    def kill_if(self, phase: str) -> None:
        if self.kill_at == (self.steps - 1, phase):
            os.kill(os.getpid(), signal.SIGKILL)


def _digest(*arrays: np.ndarray) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


class KillAt(tfk.callbacks.Callback):
    """Calls the model's `kill_if` at a batch's end (`saved`) and an epoch's (`epoch_end`)."""

    def on_train_batch_end(self, batch, logs=None):
        self.model.kill_if("saved")

    def on_epoch_end(self, epoch, logs=None):
        self.model.kill_if("epoch_end")


class PauseAtEpochEnd(tfk.callbacks.Callback):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def on_epoch_end(self, epoch, logs=None):
        time.sleep(self.seconds)


def _kill_between_record_and_backup(model: RecordingModel) -> None:
    """Makes Keras's own backup call `kill_if("record")` first (the data record is written)."""
    keras_backup = backup_module.keras_api.BackupAndRestore._backup

    def kill_then_back_up(self, *args, **kwargs):
        model.kill_if("record")
        return keras_backup(self, *args, **kwargs)

    backup_module.keras_api.BackupAndRestore._backup = kill_then_back_up


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory", required=True)
    parser.add_argument("--files", required=True, help="JSON list of file names (rows)")
    parser.add_argument("--storage-options", default="{}")
    parser.add_argument("--backup", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--weights")
    parser.add_argument("--state")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save-freq", default="1")
    parser.add_argument("--kill-step")
    parser.add_argument("--no-fit-shuffle", action="store_true")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--multiprocessing", action="store_true")
    parser.add_argument("--epoch-end-pause", type=float, default=0.0)
    args = parser.parse_args()

    tfk.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    files = json.loads(args.files)
    df = pd.DataFrame({"filename": files, "row": np.arange(len(files), dtype="float32")})
    gen = rk.ImageDataGenerator(rotation_range=20, horizontal_flip=True, zoom_range=0.2)
    it = gen.flow_from_dataframe(
        df, args.directory, y_col="row", class_mode="raw", target_size=(8, 8), batch_size=2,
        seed=5, storage_options=json.loads(args.storage_options),
    )  # fmt: skip
    model = RecordingModel(args.record)
    model.compile(tfk.optimizers.Adam(1e-3), "mse", run_eagerly=True)  # records in Python
    save_freq = args.save_freq if args.save_freq == "epoch" else int(args.save_freq)
    callbacks: list = [rk.BackupAndRestore(args.backup, train_iterator=it, save_freq=save_freq)]
    if args.kill_step:
        step, phase = args.kill_step.split(":")
        model.kill_at = (int(step), phase)
        _kill_between_record_and_backup(model)
        # `epoch_end` comes before the backup callback's epoch end; `saved` after its save.
        callbacks.insert(0 if phase == "epoch_end" else 1, KillAt())
    if args.epoch_end_pause:  # e.g. validation: Keras's enqueuer draws the next order meanwhile
        callbacks.append(PauseAtEpochEnd(args.epoch_end_pause))
    model.fit(
        it, epochs=args.epochs, callbacks=callbacks, verbose=0,
        shuffle=not args.no_fit_shuffle, workers=args.workers,
        use_multiprocessing=args.multiprocessing,
    )  # fmt: skip
    if args.weights:
        np.savez(args.weights, *model.get_weights())
    if args.state:
        with open(args.state, "w") as f:
            json.dump(it.state_dict(), f)
    it.close()


if __name__ == "__main__":
    main()
