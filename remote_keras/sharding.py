"""Splitting a dataset between training workers.

Every worker computes the same global sample order for an epoch (same seed,
same permutation) and keeps every `count`-th sample of it, starting at its
`index`. So shards are disjoint, together cover the dataset, and have the same
length on every worker: with `remainder="pad"` the order is extended by
wrapping around to its start (a few samples are seen twice per epoch), with
`"drop"` the last `n % count` samples of the order are left out (different
ones each epoch when shuffling).

When `num_shards` / `shard_index` are not given they are read, in this order,
from the active `tf.distribute` strategy, the `TF_CONFIG` environment variable
(chief and workers take part; evaluators and parameter servers read
everything), and a multi-process `keras.distribution` (JAX).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np

REMAINDERS = ("pad", "drop")


@dataclasses.dataclass(frozen=True)
class Shard:
    """Which part of the data one worker reads.

    Attributes:
        index: This worker's shard, `0 <= index < count`.
        count: Number of shards (workers).
        remainder: `"pad"` or `"drop"`: how the order is evened out.
        source: Where the numbers came from: `"argument"`, `"tf.distribute"`,
            `"TF_CONFIG"`, `"keras.distribution"` or `"none"`.
    """

    index: int = 0
    count: int = 1
    remainder: str = "pad"
    source: str = "none"

    def size(self, n: int) -> int:
        """Samples per epoch in this shard of `n` samples."""
        if self.count == 1:
            return n
        return -(-n // self.count) if self.remainder == "pad" else n // self.count

    def select(self, order: np.ndarray) -> np.ndarray:
        """This shard's part of a global epoch `order`, evened out as configured."""
        if self.count == 1:
            return order
        total = self.size(len(order)) * self.count
        evened = np.resize(order, total) if total > len(order) else order[:total]
        return evened[self.index :: self.count]


def resolve(num_shards: int | None, shard_index: int | None, remainder: str = "pad") -> Shard:
    """Checks explicit shard arguments, or detects them when both are `None`.

    Args:
        num_shards: Number of workers; `1` turns sharding (and detection) off.
        shard_index: This worker's index.
        remainder: `"pad"` or `"drop"`.

    Returns:
        A `Shard`.
    """
    if remainder not in REMAINDERS:
        raise ValueError(f'`shard_remainder` must be "pad" or "drop". Received: {remainder!r}')
    if num_shards is None and shard_index is None:
        detected = detect()
        return dataclasses.replace(detected, remainder=remainder)
    if num_shards == 1 and shard_index in (None, 0):
        return Shard(remainder=remainder, source="argument")
    if num_shards is None or shard_index is None:
        raise ValueError(
            "Pass both `num_shards` and `shard_index` (or neither, to detect them). "
            f"Received: num_shards={num_shards!r}, shard_index={shard_index!r}"
        )
    if not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"`num_shards` must be an integer >= 1. Received: {num_shards!r}")
    if not isinstance(shard_index, int) or not 0 <= shard_index < num_shards:
        raise ValueError(
            f"`shard_index` must be an integer in [0, {num_shards}). Received: {shard_index!r}"
        )
    return Shard(shard_index, num_shards, remainder, "argument")


def detect() -> Shard:
    """The shard of this process from the training cluster around it, if any."""
    for source, find in (
        ("tf.distribute", _from_tf_strategy),
        ("TF_CONFIG", _from_tf_config),
        ("keras.distribution", _from_keras_distribution),
    ):
        found = find()
        if found is not None and found[1] > 1:
            return Shard(found[0], found[1], source=source)
    return Shard()


def in_tf_multi_worker() -> bool:
    """Whether TensorFlow multi-worker training (a strategy or `TF_CONFIG`) is set up."""
    return detect().source in ("tf.distribute", "TF_CONFIG")


def _position(cluster: dict, task_type: str | None, task_id: int | None) -> tuple[int, int]:
    """`(index, count)` of a task among the cluster's chief and workers."""
    members = [("chief", i) for i in range(len(cluster.get("chief", [])))]
    members += [("worker", i) for i in range(len(cluster.get("worker", [])))]
    if (task_type, task_id) not in members:
        return 0, 1  # evaluator, parameter server, or not part of the cluster
    return members.index((task_type, task_id)), len(members)


def _from_tf_config() -> tuple[int, int] | None:
    text = os.environ.get("TF_CONFIG")
    if not text:
        return None
    try:
        config = json.loads(text)
        cluster = config.get("cluster") or {}
        task = config.get("task") or {}
        return _position(cluster, task.get("type"), int(task.get("index", 0)))
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"TF_CONFIG is not valid JSON of a cluster and task: {exc}") from exc


def _from_tf_strategy() -> tuple[int, int] | None:
    tf = sys.modules.get("tensorflow")  # only if the program uses TensorFlow already
    if tf is None or not tf.distribute.has_strategy():
        return None
    resolver = getattr(tf.distribute.get_strategy(), "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return None
    return _position(resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id)


def _from_keras_distribution() -> tuple[int, int] | None:
    if "keras" not in sys.modules:
        return None
    from keras import distribution

    current = distribution.distribution()
    if current is None or getattr(current, "num_processes", 1) <= 1:
        return None
    try:
        shards = min(current.num_model_replicas, current.num_processes)
    except NotImplementedError:
        return None
    return current.data_shard_id, shards
