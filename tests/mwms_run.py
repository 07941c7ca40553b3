"""One worker of a two-worker `MultiWorkerMirroredStrategy` custom loop on Keras 3 (a subprocess).

The loop of the scaling-out guide, with the resume recipe it gives: a
`tf.train.Checkpoint` of the model, the optimizer and the iterator's
`state_dict()` (a string variable, saved with the weights in one checkpoint),
written by the chief into `--backup` (the other worker into a scratch folder,
as TensorFlow's multi-worker saving needs every worker to save), every
`--save-every` steps where a worker's batch ends. Appends one JSON line per
event to `--record`: `{"step": [...]}` (a digest of each of this worker's
rows, before the step trains), `{"phase": e, "reads": [...], "gets": n}` at
each epoch's end, `{"weights": digest}` at the end. `--kill STEP` SIGKILLs
the process after training step STEP (from 0, this run) and its save.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", required=True, help="JSON list of host:port")
    parser.add_argument("--process", type=int, required=True)
    parser.add_argument("--directory", required=True)
    parser.add_argument("--storage-options", required=True)
    parser.add_argument("--backup", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--kill", type=int)
    args = parser.parse_args()
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": json.loads(args.workers)},
            "task": {"type": "worker", "index": args.process},
        }
    )
    import keras
    import numpy as np
    import tensorflow as tf

    import remote_keras as rk
    from tests.process_record import Record, digest

    options = json.loads(args.storage_options)
    record = Record(args.record, options)
    write = record.write

    tf.config.experimental.enable_op_determinism()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    gen = rk.ImageDataGenerator(rescale=1 / 255, horizontal_flip=True, storage_options=options)
    train = gen.flow_from_directory(
        args.directory, target_size=(8, 8), batch_size=args.batch, seed=1,
        loader=record.loader,
    )  # fmt: skip
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(2, "softmax")]
        )
        optimizer = keras.optimizers.SGD(0.1)
    per_example = keras.losses.CategoricalCrossentropy(reduction=None)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_example(y, model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch):
        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), None)

    # --- the guide's resume recipe -------------------------------------------------------
    data_state = tf.Variable("", dtype=tf.string, trainable=False)  # the iterator's position
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, data=data_state)
    chief = strategy.cluster_resolver.task_id == 0
    folder = args.backup if chief else tempfile.mkdtemp()  # every worker saves; one keeps it
    manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=1)
    latest = tf.train.latest_checkpoint(args.backup)
    if latest is not None:
        checkpoint.restore(latest)
        train.load_state_dict(json.loads(data_state.numpy().decode()))  # this worker's shard
    # Made after the restore: its first pass is the rest of the interrupted epoch.
    batches = strategy.experimental_distribute_dataset(train.to_tf_dataset())
    # The batch is global (as everywhere in tf.distribute): each worker's batch of `batch_size`
    # is split among the workers' replicas, so it trains over `shard.count` steps.
    steps_per_batch = train.shard.count
    # ---------------------------------------------------------------------------------------
    steps = 0
    for epoch in range(train.epoch, args.epochs):
        done = len(train) - train.num_batches  # batches of this epoch trained before a restore
        in_epoch = 0
        for batch in batches:
            write({"step": [digest(row) for row in batch[0].values[0].numpy()]}
                  if hasattr(batch[0], "values") else
                  {"step": [digest(row) for row in batch[0].numpy()]})  # fmt: skip
            train_step(batch)
            steps, in_epoch = steps + 1, in_epoch + 1
            if steps % args.save_every == 0 and in_epoch % steps_per_batch == 0:
                trained = done + in_epoch // steps_per_batch
                data_state.assign(json.dumps(train.state_dict(epoch=epoch, batch=trained)))
                manager.save()
            if args.kill is not None and steps - 1 == args.kill:
                os.kill(os.getpid(), signal.SIGKILL)
        record.phase(epoch)
    weights = np.concatenate([np.ravel(w) for w in model.get_weights()])
    write({"weights": digest(weights)})


if __name__ == "__main__":
    main()
