"""An iterator as a `tf.data.Dataset`, for `tf.data` pipelines and `tf.distribute` inputs."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from remote_keras.keras_agnostic import tensorflow_import
from remote_keras.keras_agnostic.scheduling import Scheduler


def to_tf_dataset(it: Any) -> Any:
    """Returns the batches of one epoch of `it` per pass, as a `tf.data.Dataset`.

    The element spec (`(x, y)`, `(x, y, sample_weight)` or `x`, with an
    unknown batch dimension) is read from batch 0, which is then handed out as
    the first batch. A sharded iterator's dataset has tf.data auto-sharding
    turned off, so under `MultiWorkerMirroredStrategy` every worker trains on
    its own shard, `batch_size` being the global batch.

    Args:
        it: A remote_keras iterator.

    Returns:
        A `tf.data.Dataset`; each complete pass ends the iterator's epoch, so
        the next pass is the next epoch's order. Made from an iterator
        restored mid-epoch (`BackupAndRestore(train_iterator=it)` first), its
        first pass holds the rest of that epoch, and its `cardinality()`
        still reports whole epochs, from which Keras counts every epoch's
        steps (`keras/src/trainers/data_adapters/tf_dataset_adapter.py`,
        `num_batches`, Keras 3.8 to 3.15); the resumed pass ends early. A
        sharded iterator's resumed pass is likewise the rest of its shard's
        epoch (a `tf.distribute` custom loop runs it to its end).

    Raises:
        MissingBackendError: TensorFlow is not installed (Keras 3 on JAX or
            PyTorch trains on the iterator itself).
    """
    tf = tensorflow_import.tensorflow(
        "iterator.to_tf_dataset()", "pass the iterator itself to `fit`, which needs none"
    )

    def as_tuple(batch: Any) -> Any:
        if isinstance(batch, tuple):
            return tuple(tuple(b) if isinstance(b, list) else b for b in batch)
        return batch

    def spec(value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(spec(v) for v in value)
        value = np.asarray(value)
        return tf.TensorSpec((None,) + value.shape[1:], tf.as_dtype(value.dtype))

    first = [as_tuple(it[0])]  # read once: for the spec, then as batch 0
    signature = spec(first[0])
    resumable = it.resumable
    read_at = (resumable.epoch, resumable.resuming())

    def batches() -> Any:
        if first and (resumable.epoch, resumable.resuming()) != read_at:
            # Restored since (Keras 2's `BackupAndRestore` restores when `fit` has begun, the
            # dataset built): that batch 0 is another epoch's; the pass reads its own.
            first.clear()
        for i in range(it.num_batches):  # fewer in an epoch resumed mid-way
            if i == 0 and first:
                now = time.perf_counter()
                it.handoffs.record(now, now)
                yield first.pop()
            else:
                yield as_tuple(it[i])
        Scheduler(it).end_epoch()  # the next pass is the next epoch

    resumed = resumable.resuming()
    dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
    if it.shard.count > 1:
        # The files are split already: tf.distribute must not split the batches again (also
        # when resumed). Its steps per epoch depend on the replicas: cardinality unknown.
        options = tf.data.Options()
        policy = tf.data.experimental.AutoShardPolicy.OFF
        options.experimental_distribute.auto_shard_policy = policy
        return dataset.with_options(options)
    if resumed:
        whole = len(it)
        dataset.cardinality = lambda: tf.constant(whole, tf.int64)  # Keras's steps per epoch
        return dataset
    return dataset.apply(tf.data.experimental.assert_cardinality(len(it)))
