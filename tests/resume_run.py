"""One training run for the resume tests, as a user's script would be (run as a subprocess).

Trains a tiny model with `remote_keras.BackupAndRestore` on a seeded, shuffled,
augmented iterator and appends one JSON line per training step to `--record`:
the batch's labels (row numbers: which files), a hash of its pixels (which
augmentation) and a hash of the weights it starts from. `--kill EPOCH:BATCH`
sends itself SIGKILL after that training step, as a crash would. `--kill-step
N:PHASE` does so at training step N of this process (from 0), at PHASE: `weights`
(the backup's weights written to their temporary file), `torn` (weights renamed
into place, metadata not yet), `saved` (after the step's backup) or `epoch_end`
(the epoch's end, before the callbacks' epoch-end work). The final weights go to
`--weights`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np
import pandas as pd

import remote_keras as rk


class RecordingModel(keras.Sequential):
    """A tiny classifier that appends what every training step reads to a file."""

    def __init__(self, record: str, size: int) -> None:
        super().__init__(
            [keras.Input((size, size, 3)), keras.layers.Flatten(), keras.layers.Dense(1)]
        )
        self.record = open(record, "a", buffering=1)  # one write per line: survives SIGKILL
        self.steps = 0  # training steps begun in this process
        self.kill_at: tuple[int, str] | None = None

    def train_step(self, *args):  # `(data)`; `(state, data)` on JAX
        data = args[-1]
        x, y = data[0], data[1]
        # The weights the step starts from (JAX passes them in its state: trainables first).
        line = {
            "rows": [int(v) for v in np.asarray(y)],
            "x": _digest(np.asarray(x)),
            "w": _digest(
                *map(np.asarray, args[0][0] if len(args) > 1 else self.trainable_variables)
            ),
        }
        self.record.write(json.dumps(line) + "\n")
        self.steps += 1
        return super().train_step(*args)

    def save_weights(self, filepath, *args, **kwargs):
        super().save_weights(filepath, *args, **kwargs)
        self.kill_if("weights")

    def kill_if(self, phase: str) -> None:
        """SIGKILL when training step `N` of `--kill-step N:PHASE` reached `phase`."""
        if self.kill_at == (self.steps - 1, phase):
            sigkill()


def _digest(*arrays: np.ndarray) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


class KillAt(keras.callbacks.Callback):
    """Calls the model's `kill_if` at a batch's end (`saved`) and an epoch's (`epoch_end`)."""

    def on_train_batch_end(self, batch, logs=None):
        self.model.kill_if("saved")

    def on_epoch_end(self, epoch, logs=None):
        self.model.kill_if("epoch_end")


def _kill_between_renames(model: RecordingModel) -> None:
    """Makes the backup's metadata rename (after the weights') call `kill_if("torn")` first."""
    replace = os.replace

    def replace_then_maybe_die(src, dst, *args, **kwargs):
        if str(dst).endswith("training_metadata.json"):
            model.kill_if("torn")
        return replace(src, dst, *args, **kwargs)

    os.replace = replace_then_maybe_die


class StopAt(keras.callbacks.Callback):
    """Calls `stop()` after training step `batch` of `epoch`: a crash at a chosen point."""

    def __init__(self, epoch: int, batch: int, stop) -> None:
        super().__init__()
        self.at, self.epoch, self.stop = (epoch, batch), -1, stop

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            self.stop()


def sigkill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory", required=True)
    parser.add_argument("--files", required=True, help="JSON list of file names (rows)")
    parser.add_argument("--storage-options", default="{}")
    parser.add_argument("--backup", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--weights")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save-freq", default="3")
    parser.add_argument("--kill")
    parser.add_argument("--kill-step")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--multiprocessing", action="store_true")
    parser.add_argument("--no-fit-shuffle", action="store_true")
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    files = json.loads(args.files)
    df = pd.DataFrame({"filename": files, "row": np.arange(len(files), dtype="float32")})
    gen = rk.ImageDataGenerator(rotation_range=20, horizontal_flip=True, zoom_range=0.2)
    it = gen.flow_from_dataframe(
        df, args.directory, y_col="row", class_mode="raw", target_size=(8, 8), batch_size=2,
        seed=5, storage_options=json.loads(args.storage_options), workers=args.workers,
        use_multiprocessing=args.multiprocessing,
    )  # fmt: skip
    model = RecordingModel(args.record, 8)
    model.compile(keras.optimizers.Adam(1e-3), "mse", run_eagerly=True)  # records in Python
    save_freq = args.save_freq if args.save_freq == "epoch" else int(args.save_freq)
    callbacks: list = [rk.BackupAndRestore(args.backup, save_freq=save_freq)]  # finds `it`
    if args.kill_step:
        step, phase = args.kill_step.split(":")
        model.kill_at = (int(step), phase)
        _kill_between_renames(model)
        # `epoch_end` comes before the backup callback's epoch end; the others after its save.
        callbacks.insert(0 if phase == "epoch_end" else 1, KillAt())
    if args.kill:
        epoch, batch = map(int, args.kill.split(":"))
        callbacks.append(StopAt(epoch, batch, sigkill))
    model.fit(
        it, epochs=args.epochs, callbacks=callbacks, verbose=0, shuffle=not args.no_fit_shuffle
    )
    if args.weights:
        np.savez(args.weights, *model.get_weights())
    it.close()


if __name__ == "__main__":
    main()
