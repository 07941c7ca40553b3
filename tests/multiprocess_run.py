"""One process of a two-process JAX training run, as a user's script would be (a subprocess).

`tests/test_multiprocess.py` starts it once per process. It joins
`jax.distributed` (`--coordinator`, `--process`, `--processes`), sets
`keras.distribution.DataParallel(auto_shard_dataset=False)`, reads the images at
`--directory` through `--engine` (`dataframe`, `directory`: `flow_from_*`;
`tf`, `grain`: `image_dataset_from_directory(format=...)`) and trains a tiny
model with `fit` and `remote_keras.BackupAndRestore(--backup)` (none with
`--save-freq none`). It appends one
JSON line per event to `--record`:

- `{"step": [...]}` per training step: a digest of each of this process's rows
  (which image, which augmentation), written before the step trains;
- `{"reads": [...], "gets": n, "phase": p}` at each epoch's end (and before the
  first, phase `"build"`): the URLs this process's loader read and the GETs the
  process's own counting proxy saw since the last line;
- `{"weights": digest}` at the end.

`--kill STEP` sends SIGKILL to itself after training step STEP (counted from 0
over the whole run, in this process) and its backup, as a crash would.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--process", type=int, required=True)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--directory", required=True)
    parser.add_argument("--storage-options", required=True)
    parser.add_argument("--backup", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--save-freq", default="2")
    parser.add_argument("--kill", type=int)
    parser.add_argument("--timeout", type=int, default=20, help="JAX's heartbeat and shutdown")
    parser.add_argument("--rows", default="[]", help="JSON records of filename and class")
    args = parser.parse_args()

    # A dead process is noticed after `heartbeat_timeout_seconds` (JAX's default: 100), and a
    # failing one waits `shutdown_timeout_seconds` (300) for the others at its exit.
    jax.distributed.initialize(
        args.coordinator,
        args.processes,
        args.process,
        heartbeat_timeout_seconds=args.timeout,
        shutdown_timeout_seconds=args.timeout,
    )
    import keras
    import numpy as np

    import remote_keras as rk
    from tests.process_record import Record, digest

    options = json.loads(args.storage_options)
    record = Record(args.record, options)
    write = record.write

    def local(array) -> np.ndarray:
        """This process's rows of a global (sharded) batch."""
        return np.concatenate([np.asarray(s.data) for s in array.addressable_shards])

    keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
    loader = record.loader
    size, batch = (8, 8), args.batch
    if args.engine in ("dataframe", "directory"):
        gen = rk.ImageDataGenerator(rescale=1 / 255, horizontal_flip=True, storage_options=options)
        if args.engine == "directory":
            train = gen.flow_from_directory(
                args.directory, target_size=size, batch_size=batch, seed=1, loader=loader
            )
        else:
            import pandas as pd

            frame = pd.DataFrame(json.loads(args.rows))
            train = gen.flow_from_dataframe(
                frame, args.directory, target_size=size, batch_size=batch, seed=1, loader=loader
            )
    else:
        train = rk.image_dataset_from_directory(
            args.directory, image_size=size, batch_size=batch, seed=1, format=args.engine,
            label_mode="categorical", storage_options=options, loader=loader, verbose=False,
        )  # fmt: skip

    class Recorder(keras.callbacks.Callback):
        steps = 0

        def on_train_begin(self, logs=None):
            RecordingModel.armed = True  # Keras's build step before is not a training step
            self.phase("build")

        def on_epoch_end(self, epoch, logs=None):
            self.phase(epoch)

        def phase(self, name) -> None:
            record.phase(name)

        def on_train_batch_end(self, batch, logs=None):
            Recorder.steps += 1
            if args.kill is not None and Recorder.steps - 1 == args.kill:
                os.kill(os.getpid(), signal.SIGKILL)

    class RecordingModel(keras.Sequential):
        armed = False

        def train_step(self, state, data):
            if RecordingModel.armed:
                write({"step": [digest(row) for row in local(data[0])]})
            return super().train_step(state, data)

    # Both processes here before the first collective (gloo waits 30 s for the other).
    from jax._src import distributed

    distributed.global_state.client.wait_at_barrier("ready", 600_000)
    keras.utils.set_random_seed(0)
    model = RecordingModel(
        [keras.Input((*size, 3)), keras.layers.Flatten(), keras.layers.Dense(2, "softmax")]
    )
    model.compile("sgd", "categorical_crossentropy", run_eagerly=True)
    callbacks: list = [Recorder()]
    if args.save_freq != "none":
        save_freq = args.save_freq if args.save_freq == "epoch" else int(args.save_freq)
        callbacks.append(rk.BackupAndRestore(args.backup, save_freq=save_freq))
    model.fit(train, epochs=args.epochs, callbacks=callbacks, verbose=0)
    write({"weights": digest(np.concatenate([np.ravel(w) for w in model.get_weights()]))})


if __name__ == "__main__":
    main()
