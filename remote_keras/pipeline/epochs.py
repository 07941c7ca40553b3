"""Which samples each batch holds, and their transforms: a function of (seed, epoch, batch).

With a `seed`, the order of epoch `e` is `RandomState(seed + e * batches per
epoch).permutation(n)` (what stock Keras draws when batches are read in
order), cut to this worker's shard, and batch `b`'s transforms are drawn from
`seed + (e * batches + b) * shards + shard index`. Without one, orders come
from the global `np.random`, as in Keras. The global `np.random` state is
left as it was either way.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np

from remote_keras.pipeline.sharding import Shard

# Global `np.random` is shared by every thread; Keras's augmentation draws from it.
NUMPY_RANDOM_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """What one batch holds, decided under the iterator's lock before loading.

    Attributes:
        indices: Sample indices, in batch order.
        transforms: One `get_random_transform` dict per sample, or `None`
            without an `ImageDataGenerator`.
        save_hashes: The random numbers in `save_to_dir` file names, or `None`.
        origin: `(epoch, position of its first sample in that epoch's order)`
            for a batch of an epoch, else `None`.
    """

    indices: np.ndarray
    transforms: list[dict] | None
    save_hashes: list[int] | None
    origin: tuple[int, int] | None = None

    def keep(self, kept: list[int]) -> BatchPlan:
        """The plan of the samples at positions `kept` only."""
        return BatchPlan(
            self.indices[kept],
            None if self.transforms is None else [self.transforms[i] for i in kept],
            None if self.save_hashes is None else [self.save_hashes[i] for i in kept],
        )


class EpochPlanner:
    """Sample orders per epoch and batch plans of one iterator (callers hold its lock).

    Args:
        iterator: The Keras iterator whose `n`, `batch_size`, `shuffle`,
            `seed`, `image_data_generator`, `image_shape` and `save_to_dir`
            are read at each call (Keras lets users change them).
        shard: This worker's shard.
    """

    def __init__(self, iterator: Any, shard: Shard) -> None:
        self.iterator = iterator
        self.shard = shard
        self._orders: dict[int, np.ndarray] = {}

    def forget(self) -> None:
        """Drops the orders drawn so far (the file list changed: another commit was listed)."""
        self._orders = {}

    def batches(self) -> int:
        """Batches per epoch in this shard."""
        return -(-self.shard.size(self.iterator.n) // self.iterator.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """This shard's sample order in `epoch`; the last two epochs' are kept."""
        order = self._orders.get(epoch)
        if order is None:
            it = self.iterator
            if not it.shuffle:
                order = np.arange(it.n)
            elif it.seed is not None:
                # Same draw as Keras: `np.random.seed(seed + batches seen); permutation(n)`.
                order = np.random.RandomState(it.seed + epoch * self.batches()).permutation(it.n)
            else:
                with NUMPY_RANDOM_LOCK:
                    order = np.random.permutation(it.n)
            order = self.shard.select(order)
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = order
        return order

    def plan(self, epoch: int, index: int) -> BatchPlan:
        """Chooses the samples of batch `index` of `epoch` and draws their transforms."""
        it = self.iterator
        indices = self.order(epoch)[it.batch_size * index : it.batch_size * (index + 1)]
        seed = None
        if it.seed is not None:  # distinct per shard; `seed + epoch * len + index` unsharded
            seed = it.seed + (epoch * self.batches() + index) * self.shard.count + self.shard.index
        # Keras draws the epoch's permutation and then batch 0's transforms from one seed.
        plan = self.draw(indices, seed, skip_permutation=it.shuffle and index == 0)
        return dataclasses.replace(plan, origin=(epoch, it.batch_size * index))

    def draw(
        self, indices: np.ndarray, seed: int | None, skip_permutation: bool = False
    ) -> BatchPlan:
        """Draws the transforms of `indices` from `seed` (the global state when `None`)."""
        it = self.iterator
        generator = it.image_data_generator
        if not generator and not it.save_to_dir:
            return BatchPlan(indices, None, None)
        with NUMPY_RANDOM_LOCK:
            saved = np.random.get_state() if seed is not None else None
            try:
                if seed is not None:
                    np.random.seed(seed)
                    if skip_permutation:
                        np.random.permutation(it.n)
                transforms = (
                    [generator.get_random_transform(it.image_shape) for _ in indices]
                    if generator
                    else None
                )
                hashes = (
                    [np.random.randint(10_000_000) for _ in indices] if it.save_to_dir else None
                )
            finally:
                if saved is not None:
                    np.random.set_state(saved)
        return BatchPlan(indices, transforms, hashes)
