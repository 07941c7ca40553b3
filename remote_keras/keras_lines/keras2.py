"""Keras 2.15 and tf_keras: the order of Keras 2's own calls, as the Keras 2 front relies on it.

Epoch ends. Keras 2 never calls `on_epoch_begin()`; it calls `on_epoch_end()`
once at the end of each epoch of `fit`, `evaluate` and `predict`, after
reading batch 0 once to learn the batch's spec. With `workers > 1` or
`use_multiprocessing=True`, `fit` reads through an `OrderedEnqueuer`, whose own
thread also calls `on_epoch_end()` once the epoch's batches are all handed over
(`keras/src/utils/data_utils.py`, `OrderedEnqueuer._run`, line 847 of Keras
2.15; `tf_keras/src/utils/data_utils.py`, the same code), while `fit` calls it
from its thread (`keras/src/engine/data_adapter.py`: `DataHandler.enumerate_epochs`,
line 1354, through `KerasSequenceAdapter.on_epoch_end`, line 1077), in either
order. `Keras2Clock` pairs the two calls by thread alone.

`fit(shuffle=True)`'s batch order. Keras 2 reads a `Sequence` through
`KerasSequenceAdapter`, which at the start of each epoch calls
`len(sequence)` and at once shuffles `list(range(len))` with Python's global
`random` (with `fit(shuffle=True)`, its default), then asks for the batches in
that order: `keras/src/engine/data_adapter.py` lines 1056-1064 of Keras 2.15
without workers, and `OrderedEnqueuer._run` in `keras/src/utils/data_utils.py`
lines 823-830 with `workers > 1` or `use_multiprocessing=True` (tf_keras 2.21:
`tf_keras/src/engine/data_adapter.py`, `tf_keras/src/utils/data_utils.py`, the
same code). Nothing is drawn between that `len()` and the shuffle. The draw
comes after `on_epoch_begin()` and the first `on_train_batch_begin()` of the
epoch, and after a lazily built model's weights drew their seeds from `random`.

So the iterator's `len()` is where the state an epoch's order is drawn from
can be seen (`KerasDraws.seen`) and, on a resume, set (`KerasDraws.armed`):
Keras then draws the uninterrupted run's order again, and every later epoch's.

Keras-free, so that it is tested without Keras 2 (`tests/keras_lines/test_keras2.py`).
"""

from __future__ import annotations

import random
import threading
from typing import Any

from remote_keras.keras_lines.epoch_clock import EpochClock
from remote_keras.keras_lines.keras3 import shuffled
from remote_keras.keras_lines.resumption import Resumption

# Batches read before an epoch's own reads that it hands out again: Keras 2's reading of batch 0
# for the spec, or, after an enqueuer ended the epoch, what it read ahead for the next one
# (Keras 2's `max_queue_size`, 10 by default; more would be read again).
PEEKED = 1
ENQUEUED_AHEAD = 64


class Keras2Clock(EpochClock):
    """The Keras 2 front's epoch tracker: an `EpochClock` whose epochs end by Keras 2's rule.

    No pass ever begins (Keras 2 calls no `on_epoch_begin()`), so only an
    epoch's first reads are kept. An `on_epoch_end()` ends an epoch unless it
    is the second of a pair (module docstring): the last epoch end came from
    another thread, and this thread was already running then (a thread started
    later, such as the next `fit`'s enqueuer, makes a pair of its own). Calls
    from one thread (`fit` without workers, a loop of your own) each end an
    epoch.

    Attributes:
        paired: A pair was seen: an enqueuer drives this iterator.
        read_ahead: The current epoch began with an end from another thread
            than the main one (an enqueuer's): the enqueuer may read its
            batches before `fit` trains it, or never does.
    """

    def __init__(self) -> None:
        super().__init__()
        self.keep_first = True
        self.keep_limit = PEEKED
        self._open: tuple[threading.Thread, set[threading.Thread]] | None = None
        self.paired = False
        self.read_ahead = False

    def end(self, length: int) -> int:
        """`on_epoch_end()` (under the iterator's lock): how many epochs end now (0 or 1)."""
        me = threading.current_thread()
        if self._open is not None:
            ender, running = self._open
            if me is not ender and me in running:
                self._open = None
                self.paired = self.read_ahead = True
                return 0
        self._open = (me, set(threading.enumerate()))
        self.read_ahead = me is not threading.main_thread()
        # An enqueuer's reads ahead, some still in flight, are the next epoch's.
        self.keep_limit = ENQUEUED_AHEAD if self.paired or self.read_ahead else PEEKED
        return 1

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_open": None}  # threads belong to this process


# `len()` states kept: Keras 2 calls `len()` a few times before it draws.
_SEEN = 4


class KerasDraws:
    """Python's `random` states at the iterator's `len()` calls, and a state to set there.

    Attributes:
        seen: `random.getstate()` at each `len()` since `mark()` (after
            `armed` was set), the latest last; at most a few are kept.
        armed: A state set at each `len()` until `disarm()`: the state the
            resumed epoch's order was drawn from in the interrupted run.
    """

    def __init__(self) -> None:
        self.seen: list[tuple] = []
        self.armed: tuple | None = None
        self._lock = threading.Lock()

    def at_len(self) -> None:
        """Called by the iterator's `__len__`."""
        with self._lock:
            if self.armed is not None:
                random.setstate(self.armed)
            self.seen = [*self.seen[-(_SEEN - 1) :], random.getstate()]

    def mark(self) -> None:
        """Forgets the states seen so far (an epoch begins)."""
        with self._lock:
            self.seen = []

    def asked(self) -> bool:
        """Whether `len()` was called since `mark()` (Keras 2 reads the iterator itself)."""
        with self._lock:
            return bool(self.seen)

    def drawn_from(self, batches: int) -> tuple[tuple | None, bool | None]:
        """The state this epoch's order was drawn from, and whether Keras shuffled.

        Call it after the epoch's first training step (Keras has drawn by then).

        Args:
            batches: Batches per epoch.

        Returns:
            `(state, fit_shuffle)`: the state seen at a `len()` since `mark()`
            that Keras's draw (or no draw) explains, or `(None, None)` when
            none does (something else drew from `random`).
        """
        with self._lock:
            seen = list(self.seen)
        explained = [(state, drew_shuffle(state, batches)) for state in seen]
        for wanted in (True, False):  # a `len()` after the draw sees no draw since
            for state, shuffle in reversed(explained):
                if shuffle is wanted:
                    return state, shuffle
        return None, None

    def arm(self, state: tuple) -> None:
        """Makes the next `len()` calls set `state`, for Keras to draw the order from it."""
        with self._lock:
            self.armed = state

    def disarm(self) -> None:
        """Stops setting the armed state (the resumed epoch's order has been drawn)."""
        with self._lock:
            self.armed = None

    def __getstate__(self) -> dict:
        return {}  # a worker process neither sees nor sets Keras's draws

    def __setstate__(self, state: dict) -> None:
        self.__init__()  # type: ignore[misc]


def drew_shuffle(before: tuple, batches: int) -> bool | None:
    """Whether Keras shuffled `batches` batches since `before`: `None` if something else drew.

    Args:
        before: Python's `random` state the epoch's order would be drawn from.
        batches: Batches per epoch.

    Returns:
        `False` when nothing was drawn (`fit(shuffle=False)`), `True` when
        exactly Keras's shuffle was, `None` otherwise.
    """
    now = random.getstate()
    if now == before:
        return False
    if now == shuffled(batches, before)[1]:
        return True
    return None


def keras2_resumption(
    epoch: int, done: int, batches: int, fit_shuffle: bool, state: tuple | None
) -> Resumption:
    """How each index Keras 2 asks for maps to a batch in an epoch resumed at step `done`.

    Keras 2 asks for all `batches` indices again (in the order drawn from
    `state` when `fit_shuffle`) but trains only on the first
    `batches - done`, counting its steps from `done`. So the index Keras asks
    for at resumed step `j` returns the batch the uninterrupted run trained at
    step `done + j`; the indices past the steps it trains (a look-ahead may
    read them) return the batches trained before the interruption.

    Args:
        epoch: The resumed epoch.
        done: Batches of it trained before the interruption.
        batches: Batches per epoch.
        fit_shuffle: Whether `fit` shuffles the batch order.
        state: Python's `random` state Keras draws the order from (needed
            when `fit_shuffle`).

    Returns:
        A `Resumption` with one position per index, a permutation of the epoch.
    """
    if not fit_shuffle:
        order: list[int] = list(range(batches))
    elif state is None:
        raise ValueError("fit(shuffle=True) resumption needs the Python `random` state")
    else:
        order = shuffled(batches, state)[0]
    positions = [0] * batches
    for step, index in enumerate(order):
        positions[index] = order[(step + done) % batches]
    return Resumption(epoch, tuple(positions))


def optimizer_steps(model: Any) -> int | None:
    """The steps `model`'s optimizer has taken (`iterations`), or `None` without one.

    Keras 2's `BackupAndRestore` saves the model, its optimizer with it, and
    restores it in `on_train_begin()` (`keras/src/distribute/worker_training_state.py`
    lines 85-90 and 151-162 of Keras 2.15; tf_keras 2.21 alike), so the count
    read then is the one read when the backup restored was written.
    """
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)
    return None if iterations is None else int(iterations.numpy())
