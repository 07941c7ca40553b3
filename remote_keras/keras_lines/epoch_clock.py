"""`EpochClock`: which epoch an iterator reads, told only by calls Keras makes in public.

Keras drives a `PyDataset` through `on_epoch_begin()`, `num_batches`,
`__getitem__` and `on_epoch_end()`. It never says which epoch it trains, and
it also calls `on_epoch_end()` when it merely resets (before the first epoch
of `fit`, before each `evaluate` pass). The clock tells the two apart by the
rule in `EpochClock.end`, and keeps the batches read outside a pass (such as
TensorFlow's reading of batches 0 and 1 to infer the tensor spec) so that the
pass that asks for them again does not read them twice.

The Keras source this relies on is `keras/src/trainers/epoch_iterator.py`:
`EpochIterator.reset()` calls `on_epoch_end()` (line 94 of Keras 3.8.0, 103 of
3.15.1 and of 3.16.0.dev2026102704), and each pass calls `on_epoch_begin()` first
(lines 97 and 106) and `on_epoch_end()` last (lines 121 and 134). Keras 3.16's
adapter passes `on_epoch_begin()` on before it starts its workers
(`py_dataset_adapter.py`, lines 359-362), yet its workers were seen asking for a
pass's first indices after Keras's reset and before that call reached the
iterator: `EpochClock.note_asked` counts them for the pass. The Keras 2 front's
clock is `remote_keras.keras_lines.keras2.Keras2Clock`.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Sequence
from typing import Any

from remote_keras.keras_lines import KerasLine, keras3, keras3_16
from remote_keras.keras_lines.resumption import Resumption

# Batches read outside a pass that are kept for the pass (TensorFlow's spec inference reads 2).
KEPT_BATCHES = 2
# Indices asked for that a pass keeps, to tell `fit(shuffle=...)` on Keras 3.16 (`keras3_16`).
ASKED_KEPT = 64


class EpochClock:
    """Epoch counter, pass tracking, kept batches and a resumed epoch's order (callers lock).

    Attributes:
        epoch: The epoch whose batches `iterator[i]` returns (held ends aside).
        resume: The rest of an epoch resumed mid-way, or `None`.
    """

    def __init__(self) -> None:
        self.epoch = 0
        self.in_pass = False  # `on_epoch_begin()` seen since the last epoch boundary
        self.handed = 0  # batches handed out in this process since `on_epoch_begin()`
        self.cut_short = False  # the last epoch ended in a pass that handed out only some
        self.held: tuple[int, int, int] | None = None  # (pid, thread, ends) not applied yet
        self.kept: dict[tuple[int, int], Any] = {}  # (epoch, position) -> batch
        self.resume: Resumption | None = None
        # Keras 3.16's `fit(shuffle=True)` resumed: `positions(epoch, batches)` of later epochs.
        self.replay: Any = None
        self.asked: list[int] = []  # the first indices asked for in this pass (`ASKED_KEPT`)
        self.askers: list[int] = []  # the thread that asked for each
        # Asked for outside a pass since the last boundary or reset: the pass about to begin's
        # first indices, when Keras's workers start reading before `on_epoch_begin()`.
        self.asked_early: list[tuple[int, int]] = []
        self.keras_workers: int | None = None  # threads Keras 3 asks from at once, this pass
        # Keras 3.8-3.15 asking from one thread: the order `fit(shuffle=True)` is about to draw.
        self.prediction: PredictedOrder | None = None
        self.fit_pass = 0  # passes begun since Keras's reset began a `fit` (or `evaluate`)
        self.told_shuffle: bool | None = None  # Keras 3.16's `fit(shuffle=...)`, this pass
        self.resume_counted = True  # whether `num_batches` counts only what `resume` has left
        # Kept outside a pass: the latest `keep_limit` (Keras 2's clock keeps the first instead).
        self.keep_limit = KEPT_BATCHES
        self.keep_first = False

    # ---------------------------------------------------------------- epoch boundaries

    def begin(self, keras_workers: int | None = None) -> None:
        """`on_epoch_begin()`: a pass starts; an end held until now was Keras's reset.

        Args:
            keras_workers: How many threads Keras 3 asks for the pass's
                indices from at once (`keras3_16.AskedIndices`).
        """
        # Keras's `epoch_iterator.reset()` ends the epoch outside a pass once per `fit`: the
        # pass after it is the `fit`'s first (Keras 3.16 draws its order from that count).
        self.fit_pass = 0 if self.held is not None else self.fit_pass + 1
        self.told_shuffle = None
        self.held = None
        self.in_pass = True
        self.handed = 0
        self.cut_short = False
        self.asked = [index for index, _ in self.asked_early]
        self.askers = [asker for _, asker in self.asked_early]
        self.asked_early = []
        self.keras_workers = keras_workers
        self.prediction = None

    def end(self, length: int) -> int:
        """`on_epoch_end()`: returns how many epochs end now (0 or 1).

        The rule: an `on_epoch_end()` that follows an `on_epoch_begin()`
        ends the epoch at once (the end of a pass of `fit`, `evaluate` or
        `predict`). One made outside a pass (no `on_epoch_begin()` since the
        last epoch boundary) is held: it ends the epoch when the same thread
        next reads a batch (a loop of your own, `it[0] ... it[n-1];
        it.on_epoch_end()`, never calls `on_epoch_begin()`; `it.epoch`
        counts it already in that thread), and is dropped
        if `on_epoch_begin()` comes first (Keras's `EpochIterator.reset()`
        calls `on_epoch_end()` and then begins its pass; Keras 3.8 to 3.15
        call `on_epoch_begin()` before every pass). Reads by other threads
        (Keras's workers, which may start before `on_epoch_begin()`) and by
        other processes do not apply a held end.

        A pass ended after handing out only some of its batches (`cut_short`;
        Keras's JAX `fit` builds an unbuilt model from one batch of a pass
        it abandons) ends the epoch all the same: nothing Keras calls in
        public tells it from a shorter epoch. `BackupAndRestore` moves such an
        iterator back to the epoch `fit` starts at.
        """
        if self.in_pass:
            self.cut_short = 0 < self.handed < self.batches(length)
            return 1
        pid, thread, ends = self.held or (os.getpid(), threading.get_ident(), 0)
        self.held = (pid, thread, ends + 1)
        self.asked_early = []  # read before Keras's reset (TensorFlow's spec): not the pass's
        return 0

    def held_here(self) -> int:
        """Ends held by the calling thread, which its next read applies."""
        if self.held is None:
            return 0
        pid, thread, ends = self.held
        return ends if (pid, thread) == (os.getpid(), threading.get_ident()) else 0

    def advance(self, epochs: int) -> None:
        """Moves `epochs` epochs on: a new pass will begin, nothing of the old epochs is kept."""
        self.epoch += epochs
        self.in_pass = False
        self.handed = 0
        self.held = None
        self.asked_early = []
        self.resume = None
        self.resume_counted = True
        self.kept = {key: batch for key, batch in self.kept.items() if key[0] >= self.epoch}

    def go_to(self, epoch: int, pending: Resumption | None, counted: bool) -> None:
        """Reads `epoch` next (the rest of it in `pending`'s order); keeps its kept batches."""
        self.epoch = epoch
        self.in_pass = False
        self.handed = 0
        self.cut_short = False
        self.held = None
        self.asked_early = []
        self.resume = pending
        self.resume_counted = counted
        self.kept = {key: batch for key, batch in self.kept.items() if key[0] == epoch}

    # ---------------------------------------------------------------- positions

    def batches(self, length: int) -> int:
        """`num_batches`: `length`, or what a resumed epoch has left once it is counted."""
        pending = self.resume
        if pending is None or pending.epoch != self.epoch or not self.resume_counted:
            return length
        return len(pending.positions)

    def order(self, length: int) -> Sequence[int]:
        """The position in the epoch's order of each index Keras may ask for."""
        pending = self.resume
        if pending is not None and pending.epoch == self.epoch:
            return pending.positions
        if self.replay is not None:
            self.replay = self.replay.told(
                self.asked, self.epoch, length, self.askers, self.keras_workers
            )
            positions = self.replay.positions(self.epoch, length)
            if positions is not None:
                return positions
        return range(length)

    def upcoming(self, idx: int, count: int, shard: tuple[int, int]) -> Sequence[int] | None:
        """Keras 3.16: the indices it will ask for after `idx` in this pass, once told.

        `None` outside a pass, and while the indices asked so far do not tell
        `fit(shuffle=...)` (`keras3_16.AskedIndices`).
        """
        if not self.in_pass:
            return None
        if self.told_shuffle is None:
            self.told_shuffle = self.read_shuffle(self.fit_pass, count, shard=shard, proven=True)
        shuffle = self.told_shuffle
        if shuffle is None:  # not proven yet: read ahead in the order the indices suggest
            shuffle = self.read_shuffle(self.fit_pass, count, shard=shard)
            if shuffle is None:
                return None
        asks = keras3_16.keras_asks(self.fit_pass, count, shuffle, shard)
        step = keras3_16.step_of(self.fit_pass, count, shuffle, shard).get(idx)
        return None if step is None else asks[step + 1 :]

    def read_shuffle(
        self,
        fit_pass: int,
        count: int,
        trained: int = 0,
        shard: tuple[int, int] = (0, 1),
        proven: bool = False,
    ) -> bool | None:
        """Keras 3.16's `fit(shuffle=...)`, from the indices asked in this pass.

        Args:
            fit_pass: The pass of the `fit` (from 0).
            count: Batches the pass asks for.
            trained: Batches of the pass Keras has trained on.
            shard: Keras's batch shard (`keras3_16.keras_asks`).
            proven: Only a value the indices prove, else their best reading
                (`keras3_16.AskedIndices`).

        Returns:
            `True` or `False`; `None` while unproven (or, read, while they tell nothing).
        """
        if len(self.asked) >= ASKED_KEPT:
            trained = 0  # the first trained ones may be among those not kept
        asks = keras3_16.AskedIndices(
            self.asked, fit_pass, count, shard, self.askers, self.keras_workers, trained
        )
        return asks.tell_shuffle(proven=proven)

    def note_asked(self, idx: int) -> None:
        """Records an index asked for (the first `ASKED_KEPT` of each pass).

        Indices asked for outside a pass by a thread other than one holding
        an end (Keras 3.16's workers, seen asking before `on_epoch_begin()`)
        are the next pass's first: without them, the indices seen in the pass
        can fit the unshuffled order better than the shuffled one.
        """
        asker = threading.get_ident()
        if self.in_pass:
            if self.prediction is not None:
                self.prediction.follow(idx)
            if len(self.asked) < ASKED_KEPT:
                self.asked.append(idx)
                self.askers.append(asker)
        elif not self.held_here() and len(self.asked_early) < ASKED_KEPT:
            self.asked_early.append((idx, asker))

    def position(self, idx: int, length: int) -> int:
        """The epoch position index `idx` reads; raises `ValueError` past the end, as Keras.

        Before a resumed epoch is counted, Keras still counts `length`
        batches (it reads batches to learn their spec, or one to build the
        model, from that count): indices past the rest wrap around it.
        """
        order = self.order(length)
        if order and not self.resume_counted and len(order) <= idx < length:
            return order[idx % len(order)]
        if idx >= len(order):
            raise ValueError(
                f"Asked to retrieve element {idx}, but the Sequence has length {len(order)}"
            )
        return order[idx]

    # ---------------------------------------------------------------- kept batches

    def take(self, key: tuple[int, int]) -> Any:
        """A batch kept for `key`, handed out once inside a pass (every time outside one)."""
        if self.in_pass:
            return self.kept.pop(key, None)
        return self.kept.get(key)

    def keep(self, key: tuple[int, int], batch: Any) -> None:
        """Keeps a batch read outside a pass (the latest `keep_limit` ones, or the first).

        Reads made while another thread or process holds an end are Keras's
        workers filling its queue before `on_epoch_begin()`: the pass takes
        them from that queue, so they are not kept and push nothing out
        (TensorFlow's spec batches stay kept).
        """
        if self.in_pass or key[0] != self.epoch:
            return
        if self.held is not None and not self.held_here():
            return
        if self.keep_first and len(self.kept) >= self.keep_limit:
            return
        self.kept[key] = batch
        while len(self.kept) > self.keep_limit:
            del self.kept[next(iter(self.kept))]


def built_model(clock: EpochClock, line: KerasLine, on_tensorflow: bool) -> bool:
    """Whether the pass ending now was Keras building the model: it ends no epoch.

    Keras 3.8-3.15's JAX and PyTorch `fit` and `evaluate` build an unbuilt
    model from the first batch of a pass they abandon (`EpochClock.end`;
    `KerasLine.builds_from_a_pass`). A fresh iterator's first pass that
    hands out one batch there is taken for it: the next pass reads epoch 0
    again (its bytes carried), so the first epoch of `fit` is epoch 0, as
    on TensorFlow, and every process of a sharded run reads its own share
    of it once.

    Args:
        clock: The iterator's clock, as the pass ends.
        line: The Keras line the iterator runs on.
        on_tensorflow: Whether Keras trains on TensorFlow.
    """
    builds = line.builds_from_a_pass and not on_tensorflow
    return builds and clock.epoch == 0 and clock.handed == 1 and clock.resume is None


class PredictedOrder:
    """The indices a pass of Keras 3.8-3.15 will ask for, checked as it asks.

    Keras draws the pass's order from Python's global `random` after
    `on_epoch_begin()` (`keras3`): made then, the prediction is what
    `random.shuffle(list(range(count)))` would draw (nothing is drawn).

    Args:
        count: The indices of the pass.
    """

    def __init__(self, count: int) -> None:
        self.order: Sequence[int] | None = keras3.shuffled(count, random.getstate())[0]
        self.matched = 0  # asks that followed it

    def follow(self, idx: int) -> None:
        """Notes an ask: one that does not follow the order ends the prediction for good."""
        order = self.order
        if order is not None and not (self.matched < len(order) and order[self.matched] == idx):
            self.order = None
        self.matched += 1

    def after(self, idx: int) -> Sequence[int] | None:
        """The indices asked for after `idx`, once two asks followed the order; else `None`.

        `None` for good once an ask did not follow it (an unshuffled `fit`,
        or something else drew from Python's `random` first).
        """
        order, matched = self.order, self.matched
        if order is None or matched < 2 or order[matched - 1] != idx:
            return None
        return order[matched:]
