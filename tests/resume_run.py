"""One training run for the resume tests, as a user's script would be (run as a subprocess).

Trains a tiny model with `remote_keras.BackupAndRestore` on a seeded, shuffled,
augmented iterator and appends one JSON line per training step to `--record`:
the batch's labels (row numbers: which files) and a hash of its pixels (which
augmentation). `--kill EPOCH:BATCH` sends itself SIGKILL after that training
step, as a crash would; the final weights go to `--weights`.
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

    def train_step(self, *args):  # `(data)`; `(state, data)` on JAX
        data = args[-1]
        x, y = data[0], data[1]
        pixels = hashlib.sha256(np.ascontiguousarray(np.asarray(x)).tobytes()).hexdigest()
        self.record.write(json.dumps({"rows": [int(v) for v in np.asarray(y)], "x": pixels}))
        self.record.write("\n")
        return super().train_step(*args)


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
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--multiprocessing", action="store_true")
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
    if args.kill:
        epoch, batch = map(int, args.kill.split(":"))
        callbacks.append(StopAt(epoch, batch, sigkill))
    model.fit(it, epochs=args.epochs, callbacks=callbacks, verbose=0)
    if args.weights:
        np.savez(args.weights, *model.get_weights())
    it.close()


if __name__ == "__main__":
    main()
