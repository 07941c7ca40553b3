"""`Resumable`: all that `BackupAndRestore` asks of an iterator, as a public interface.

The backup callbacks of both fronts read and move an iterator only through
this object (`iterator.resumable`), never through the iterator's private
methods (`tests/test_resumable.py` checks): where it stands (`epoch`,
`batches`, whether Keras began or reset a pass), its state (`get_state`,
`set_state`, as grain's `get_state`/`set_state`), and what the Keras line
needs to replay an interrupted epoch's order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remote_keras.keras_lines import keras3
from remote_keras.keras_lines.keras3_16 import EpochSeededReplay
from remote_keras.keras_lines.resumption import Resumption


class Resumable:
    """An iterator's position and state, for the backup callbacks.

    Args:
        iterator: A remote_keras iterator (`DataFrameIterator` or `DirectoryIterator`).
    """

    def __init__(self, iterator: Any) -> None:
        self._iterator = iterator

    @property
    def epoch(self) -> int:
        """The epoch the iterator reads (Keras's numbering, from 0), held ends aside."""
        return self._iterator._current_epoch()

    @property
    def batches(self) -> int:
        """Batches per epoch (`len(iterator)`)."""
        return self._iterator._length()

    @property
    def draws(self) -> Any:
        """Keras 2's `fit(shuffle=True)` draws seen at `len()` (`keras_lines.keras2.KerasDraws`)."""
        return self._iterator._draws

    def reset_by_keras(self) -> bool:
        """Whether Keras just reset it before a `fit`, `evaluate` or `predict` (`EpochClock`)."""
        with self._iterator.lock:
            clock = self._iterator._clock
            return clock.held is not None or clock.cut_short

    def in_pass(self) -> bool:
        """Whether Keras has begun a pass over it (`on_epoch_begin()`) that has not ended."""
        with self._iterator.lock:
            return self._iterator._clock.in_pass

    def get_state(self, epoch: int | None = None, batch: int | None = None) -> dict[str, Any]:
        """The iterator's `state_dict(epoch, batch)`."""
        return self._iterator.state_dict(epoch=epoch, batch=batch)

    def set_state(
        self,
        state: dict[str, Any],
        fit_random_state: tuple | None = None,
        counted: bool = True,
        replay: EpochSeededReplay | None = None,
    ) -> None:
        """Continues the stream of `state`, as `load_state_dict` does.

        Args:
            state: A dict from `get_state`.
            fit_random_state: Python's `random` state the interrupted epoch's
                order was drawn from, when `fit(shuffle=True)` drew it.
            counted: `False` leaves `num_batches` whole until `count_resumed`
                (Keras counts a whole epoch's steps before training begins).
            replay: Keras 3.16's `fit(shuffle=True)`: the uninterrupted run's
                steps, for the rest of the epoch and every later one.
        """
        epoch, done = int(state["epoch"]), int(state["batch"])
        shuffled = fit_random_state is not None

        def rest(length: int) -> Resumption | None:
            if not done:
                return None
            if replay is not None:
                return Resumption(epoch, replay.positions(epoch, length, done) or ())
            return keras3.fit_resumption(epoch, done, length, shuffled, fit_random_state)

        self._iterator._load_resumption(state, rest, counted)
        self._iterator._replay_fit(replay)

    def set_state_in_order(
        self, state: dict[str, Any], rest: Callable[[int], Resumption | None]
    ) -> None:
        """Continues the stream of `state`; `rest(batches per epoch)` orders its epoch's rest."""
        self._iterator._load_resumption(state, rest)

    def count_resumed(self) -> None:
        """Makes `num_batches` count what the epoch restored by `set_state` has left."""
        self._iterator._count_resumed()

    def read_shuffle(self, fit_pass: int, count: int, trained: int, proven: bool) -> bool | None:
        """Keras 3.16's `fit(shuffle=...)`, from the indices the pass under way asked for."""
        return self._iterator._read_shuffle(fit_pass, count, trained, proven)

    def replay_fit(self, replay: EpochSeededReplay | None) -> None:
        """Reads every epoch from now on in the steps `replay` maps Keras's indices to."""
        self._iterator._replay_fit(replay)
