"""One worker of a two-worker Keras 2 `MultiWorkerMirroredStrategy` run, for the tests.

`python multi_worker_run.py SPEC INDEX`: SPEC is a JSON file (`workers`: the
two `host:port`, `rows`, `directory`, `options`: storage options, `mode`,
`backup`, `out`: a folder for this run's files, `kill_after`: `[index, steps]`).
The worker's `TF_CONFIG` names both workers and this one's index; the
iterator's shard comes from it. Each training step appends a JSON line to
`<out>/steps-<index>.jsonl` (the label rows of this worker's part of the batch,
a hash of its pixels and of the weights it starts from), each read of the
loader a line `[epoch, url]` to `<out>/reads-<index>.jsonl`: both survive a
SIGKILL.

Modes: `refuse` fits the iterator itself (refused), then
`iterator.to_tf_dataset()` for one epoch. `resume` fits 3 epochs of
`iterator.to_tf_dataset().repeat()` with `remote_keras.BackupAndRestore(backup,
train_iterator=..., save_freq=3)`; with `kill_after`, worker `index` sends
itself SIGKILL once it has trained `steps` steps (after that step's callbacks,
its backup included). The final weights go to `<out>/weights-<index>.npz`.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    index = int(sys.argv[2])
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": spec["workers"]}, "task": {"type": "worker", "index": index}}
    )
    import numpy as np
    import pandas as pd
    import tensorflow as tf

    import remote_keras as rk
    from remote_keras.storage.loaders import FsspecLoader

    tfk = tf.keras
    out = spec["out"]
    reads = open(os.path.join(out, f"reads-{index}.jsonl"), "a", buffering=1)

    class RecordingLoader(FsspecLoader):
        iterator = None

        def load_many(self, paths, executor=None):
            for path in paths:
                reads.write(json.dumps([self.iterator.epoch, path]) + "\n")
            return super().load_many(paths, executor=executor)

    def digest(*arrays) -> str:
        h = hashlib.sha256()
        for array in arrays:
            h.update(np.ascontiguousarray(array).tobytes())
        return h.hexdigest()[:16]

    class RecordingModel(tfk.Sequential):
        def __init__(self, layers, record: str) -> None:
            super().__init__(layers)
            self.record = open(record, "a", buffering=1)  # a line per write: survives SIGKILL
            self.steps = 0

        def train_step(self, data):
            x, y = np.asarray(data[0]), np.asarray(data[1])
            weights = [np.asarray(v) for v in self.trainable_variables]
            line = {"rows": [int(v) for v in y], "x": digest(x), "w": digest(*weights)}
            self.record.write(json.dumps(line) + "\n")
            self.steps += 1
            return super().train_step(data)

    class KillAfter(tfk.callbacks.Callback):
        def __init__(self, steps: int) -> None:
            super().__init__()
            self.left = steps

        def on_train_batch_end(self, batch, logs=None):
            self.left -= 1
            if self.left == 0:
                os.kill(os.getpid(), signal.SIGKILL)

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    tfk.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    options = spec["options"]
    df = pd.DataFrame(spec["rows"])
    df["row"] = np.arange(len(df), dtype="float32")
    loader = RecordingLoader(options)
    gen = rk.ImageDataGenerator(rotation_range=20, horizontal_flip=True, storage_options=options)
    train = gen.flow_from_dataframe(
        df, spec["directory"], y_col="row", class_mode="raw", target_size=(8, 8), batch_size=4,
        seed=5, loader=loader,
    )  # fmt: skip
    loader.iterator = train
    with strategy.scope():
        layers = [tfk.layers.Flatten(input_shape=(8, 8, 3)), tfk.layers.Dense(1)]
        model = RecordingModel(layers, os.path.join(out, f"steps-{index}.jsonl"))
        model.compile(tfk.optimizers.Adam(1e-2), "mse", run_eagerly=True)  # records in Python
    result: dict = {"shard": [train.shard.index, train.shard.count], "batches": len(train)}
    if spec["mode"] == "refuse":
        try:
            model.fit(train, epochs=1, verbose=0)
        except ValueError as exc:
            result["refused"] = str(exc)
        result["steps_before"] = model.steps
        model.fit(train.to_tf_dataset(), epochs=1, verbose=0)
        result["steps_dataset"] = model.steps - result["steps_before"]
    else:
        backup = rk.BackupAndRestore(spec["backup"], train_iterator=train, save_freq=3)
        callbacks: list = [backup]
        kill = spec.get("kill_after")
        if kill and kill[0] == index:
            callbacks.append(KillAfter(kill[1]))
        steps = len(train) * train.shard.count  # tf.distribute splits each batch per worker
        model.fit(
            train.to_tf_dataset().repeat(), epochs=3, steps_per_epoch=steps,
            callbacks=callbacks, verbose=0,
        )  # fmt: skip
        np.savez(os.path.join(out, f"weights-{index}.npz"), *model.get_weights())
        result["steps"] = model.steps
    train.close()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
