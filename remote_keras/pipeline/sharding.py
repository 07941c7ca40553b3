"""Splitting a dataset between training workers.

Every worker computes the same global sample order for an epoch (same seed,
same permutation) and keeps every `count`-th sample of it, starting at its
`index`. So shards are disjoint, together cover the dataset, and have the same
length on every worker: with `remainder="pad"` the order is extended by
wrapping around to its start (a few samples are seen twice per epoch), with
`"drop"` the last `n % count` samples of the order are left out (different
ones each epoch when shuffling).

When `num_shards` / `shard_index` are not given they are read from the
training cluster around the process: the active `tf.distribute` strategy, the
`TF_CONFIG` environment variable and a multi-process `keras.distribution`
(`remote_keras.keras_lines.distribution`, which knows what each Keras line says).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from remote_keras.keras_lines import distribution


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
        remainder: `"pad"` or `"drop"` (checked with the other options, by `LoaderOptions`).

    Returns:
        A `Shard`.
    """
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
    return _shard(distribution.find())


def detect_keras_distribution() -> Shard:
    """The shard of this process from a multi-process `keras.distribution` only."""
    return _shard(distribution.find(("keras.distribution",)))


def _shard(found: tuple[int, int, str] | None) -> Shard:
    return Shard() if found is None else Shard(found[0], found[1], source=found[2])
