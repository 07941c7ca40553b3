"""Keras 3.16 and later: how `fit(shuffle=True)` draws each pass's batch order.

From keras-team/keras commit ea6968a, `PyDatasetAdapter` counts its own epochs
from 0, one per `on_epoch_end()` (`py_dataset_adapter.py`, lines 215, 275 and
369 of 3.16.0.dev2026102704), and draws each pass's order from
`random.Random(its epoch)`, in `_finite_generator` and `OrderedEnqueuer._run`
(line 696). A new adapter is made by every `fit`, whose `epoch_iterator.reset()`
(TensorFlow trainer line 374, JAX 484, torch 395) calls `on_epoch_end()` once
before the first pass: training pass `p` of a `fit` (from 0) draws from
`Random(p + 1)`, whatever epoch `fit` starts at (`epoch_seeded_order`). A fit
resumed at epoch `k` therefore asks in other orders than the uninterrupted run
that started at epoch `o`; `EpochSeededReplay` maps each index it asks for to
the batch the uninterrupted run trained at that step. `AskedIndices` proves
`fit(shuffle=...)` from the indices asked, by which thread and what Keras
trained: with `workers > 1` (line 226) the enqueuer hands the pass's indices in
order to a pool of `workers` threads (line 715), one thread asks in order
without it, and only one of the two orders can fit. Until then, it
reads the order the indices follow more closely.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import random
from collections.abc import Sequence


@functools.lru_cache(maxsize=16)
def epoch_seeded_order(fit_pass: int, count: int) -> tuple[int, ...]:
    """The indices Keras 3.16's `fit(shuffle=True)` asks for in pass `fit_pass` of a `fit`."""
    order = list(range(count))
    random.Random(fit_pass + 1).shuffle(order)  # noqa: S311 - replays Keras's draw
    return tuple(order)


@dataclasses.dataclass(frozen=True)
class EpochSeededReplay:
    """Keras 3.16's `fit(shuffle=True)`: what each index a later `fit` asks for reads.

    Attributes:
        origin: The epoch the uninterrupted run's `fit` started at (its pass 0).
        start: The epoch this `fit` started at.
        shuffle: `fit(shuffle=...)`; `None` until the indices asked prove it
            (`AskedIndices.tell_shuffle`).
        reading: Meanwhile, what the indices asked suggest (`AskedIndices`);
            Keras's default, `True`, while they suggest nothing.
    """

    origin: int
    start: int
    shuffle: bool | None = True
    reading: bool | None = None

    def positions(self, epoch: int, batches: int, done: int = 0) -> tuple[int, ...] | None:
        """For each index asked in `epoch`, the position the uninterrupted run read at its step.

        Args:
            epoch: An epoch this `fit` trains.
            batches: Batches per epoch.
            done: Batches of `epoch` trained before this `fit` (it asks for the rest).

        Returns:
            The positions, one per index asked; `None` where they are the
            indices themselves (this `fit` is the uninterrupted run).
        """
        shuffle = self.reading if self.shuffle is None else self.shuffle
        if epoch < self.start or shuffle is False:
            return None
        if self.origin == self.start and not done:
            return None
        return _replayed(self.origin, self.start, epoch, batches, done)

    def told(
        self,
        asked: Sequence[int],
        epoch: int,
        batches: int,
        askers: Sequence[int] | None = None,
        workers: int | None = None,
    ) -> EpochSeededReplay:
        """Itself, with `shuffle` once the indices `asked` in `epoch` prove it, else read.

        `askers` and `workers` as for `AskedIndices`.
        """
        if self.shuffle is not None or epoch < self.start:
            return self
        asks = AskedIndices(asked, epoch - self.start, batches, askers=askers, workers=workers)
        proven = asks.tell_shuffle(proven=True)
        if proven is not None:
            return dataclasses.replace(self, shuffle=proven)
        return dataclasses.replace(self, reading=asks.tell_shuffle())


@functools.lru_cache(maxsize=16)
def _replayed(origin: int, start: int, epoch: int, batches: int, done: int) -> tuple[int, ...]:
    """`EpochSeededReplay.positions`, computed once per epoch (it is asked at every batch)."""
    rest = epoch_seeded_order(epoch - origin, batches)[done:]
    asked = epoch_seeded_order(epoch - start, len(rest))
    positions = [0] * len(rest)
    for step, index in enumerate(asked):
        positions[index] = rest[step]
    return tuple(positions)


@functools.lru_cache(maxsize=16)
def keras_asks(
    fit_pass: int, count: int, shuffle: bool, shard: tuple[int, int] = (0, 1)
) -> tuple[int, ...]:
    """The indices Keras 3.16 asks one process for in pass `fit_pass` of a `fit`, in order.

    Args:
        fit_pass: The pass of the `fit` (from 0).
        count: The iterator's `num_batches`.
        shuffle: `fit(shuffle=...)`.
        shard: `(data_shard_id, num_data_shards)` when Keras's adapter shards
            the batches (`py_dataset_adapter.py` line 277 and 698:
            every `num_data_shards`-th index of the pass's order).
    """
    order = epoch_seeded_order(fit_pass, count) if shuffle else tuple(range(count))
    return order[shard[0] :: shard[1]]


@functools.lru_cache(maxsize=16)
def step_of(
    fit_pass: int, count: int, shuffle: bool, shard: tuple[int, int] = (0, 1)
) -> dict[int, int]:
    """The step of each index in `keras_asks(...)`."""
    return {index: step for step, index in enumerate(keras_asks(fit_pass, count, shuffle, shard))}


def keras_askers(workers: int, use_multiprocessing: bool) -> int:
    """How many threads Keras 3.16 asks a `PyDataset` from at once, given its settings.

    Its enqueuer (`workers > 1`, or worker processes: `py_dataset_adapter.py`
    line 226) hands the indices to `workers` threads; without it, one asks.
    """
    return workers if workers > 1 or (workers > 0 and use_multiprocessing) else 1


@dataclasses.dataclass(frozen=True)
class AskedIndices:
    """The indices Keras 3.16 asked one process for so far in a pass, and who asked.

    Keras hands a pass's indices, in its order, to a queue that `workers`
    threads take them from one at a time (one thread, in order, without
    its enqueuer). So, in the true order: each thread asks in increasing
    steps; when one asks step `s`, every earlier step has been taken, and
    those not asked yet are held by the other threads (at most
    `workers - 1`); and once Keras trained `trained` batches of the pass,
    the order's first `trained` indices were asked.

    Attributes:
        asked: The indices asked for so far in the pass, in arrival order.
        fit_pass: The pass of the `fit` (from 0).
        count: Batches the pass asks for.
        shard: Keras's batch shard (see `keras_asks`).
        askers: The thread that asked each index (`None`: each its own).
        workers: How many threads Keras asks from at once (`None`: unknown).
        trained: Batches of the pass Keras has trained on, when `asked`
            holds every index asked so far (else 0).
    """

    asked: Sequence[int]
    fit_pass: int
    count: int
    shard: tuple[int, int] = (0, 1)
    askers: Sequence[int] | None = None
    workers: int | None = None
    trained: int = 0

    def possible_shuffles(self) -> list[bool]:
        """The values of `fit(shuffle=...)` whose order could have been asked as these were.

        Returns:
            `False` (in order), `True` (shuffled), both or neither.
        """
        asked, fit_pass, count, shard = self.asked, self.fit_pass, self.count, self.shard
        threads = range(len(asked)) if self.askers is None else self.askers
        seen = set(asked)
        possible = []
        for shuffle in (False, True):
            order = keras_asks(fit_pass, count, shuffle, shard)
            steps = step_of(fit_pass, count, shuffle, shard)
            could = _could_ask(asked, threads, steps, self.workers)
            if could and seen.issuperset(order[: self.trained]):
                possible.append(shuffle)
        return possible

    def tell_shuffle(self, proven: bool = False) -> bool | None:
        """`fit(shuffle=...)` told from these indices.

        The only value whose order could have been asked so
        (`possible_shuffles`). While both could: `None` if `proven`, else the
        one whose order the indices follow more closely (each order is
        scored, for every first `k` indices asked, by how far past its own
        first `k` it had to reach, and the lower total wins). Under load,
        that reading can be wrong (a worker thread that stalls lets later
        indices arrive first); a proven value cannot be.

        Returns:
            `True` or `False`; `None` while unproven (`proven`), or while the
            indices fit both orders equally.
        """
        if self.count < 2:
            return None
        possible = self.possible_shuffles()
        if len(possible) == 1:
            return possible[0]
        return None if proven else _closer_order(self.asked, self.fit_pass, self.count, self.shard)


def _could_ask(
    asked: Sequence[int], askers: Sequence[int], steps: dict[int, int], workers: int | None
) -> bool:
    """Whether threads taking an order's indices from a queue could ask as `asked` was."""
    done: list[int] = []  # the steps asked so far, sorted
    last: dict[int, int] = {}
    for index, asker in zip(asked, askers):
        step = steps.get(index)
        if step is None or step <= last.get(asker, -1):
            return False
        if workers is not None and step - bisect.bisect_left(done, step) > workers - 1:
            return False
        bisect.insort(done, step)
        last[asker] = step
    return True


def _closer_order(
    asked: Sequence[int], fit_pass: int, count: int, shard: tuple[int, int] = (0, 1)
) -> bool | None:
    """`AskedIndices.tell_shuffle`'s reading of the order `asked` follows more closely.

    `None` for a tie.
    """
    if not asked or count < 2:
        return None
    reach = []
    for shuffle in (False, True):
        steps_of = step_of(fit_pass, count, shuffle, shard)
        farthest = list(itertools.accumulate((steps_of.get(i, count) for i in asked), max))
        reach.append(sum(far + 1 - k for k, far in enumerate(farthest, 1)))
    if reach[0] == reach[1]:
        return None
    return reach[1] < reach[0]
