"""`Resumable`: all that `BackupAndRestore` asks of an iterator, as a public interface.

The backup callbacks of both fronts read and move an iterator only through
this object (`iterator.resumable`), never through the iterator's private
methods (`tests/test_resumable.py` checks): where it stands (`epoch`,
`batches`, whether Keras began or reset a pass), its state (`get_state`,
`set_state`, as grain's `get_state`/`set_state`), and what the Keras line
needs to replay an interrupted epoch's order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from remote_keras import errors
from remote_keras.keras_agnostic import files, resume
from remote_keras.keras_lines import keras3
from remote_keras.keras_lines.keras3_16 import EpochSeededReplay
from remote_keras.keras_lines.resumption import Resumption
from remote_keras.storage.lakefs import LakeFSPin


class Resumable:
    """An iterator's position and state, for the backup callbacks; the iterator's one resumer.

    A view made on each access of `iterator.resumable` (it holds nothing of
    its own); the iterator's `state_dict`, `load_state_dict` and `set_epoch`
    go through it too.

    Args:
        iterator: A remote_keras iterator (`DataFrameIterator` or `DirectoryIterator`).
    """

    def __init__(self, iterator: Any) -> None:
        self._iterator = iterator

    @property
    def epoch(self) -> int:
        """The epoch the iterator reads (Keras's numbering, from 0), held ends aside."""
        return self._iterator._clock.epoch

    @property
    def batches(self) -> int:
        """Batches per epoch (`len(iterator)`)."""
        return self._iterator._length()

    @property
    def draws(self) -> Any:
        """Keras 2's `fit(shuffle=True)` draws seen at `len()` (`keras_lines.keras2.KerasDraws`)."""
        return self._iterator.__dict__.get("_draws")

    def reset_by_keras(self) -> bool:
        """Whether Keras just reset it before a `fit`, `evaluate` or `predict` (`EpochClock`)."""
        with self._iterator.lock:
            clock = self._iterator._clock
            return clock.held is not None or clock.cut_short

    def resuming(self) -> bool:
        """Whether the epoch read now was restored mid-way and has not ended."""
        with self._iterator.lock:
            clock = self._iterator._clock
            return clock.resume is not None and clock.resume.epoch == clock.epoch

    def in_pass(self) -> bool:
        """Whether Keras has begun a pass over it (`on_epoch_begin()`) that has not ended."""
        with self._iterator.lock:
            return self._iterator._clock.in_pass

    def get_state(self, epoch: int | None = None, batch: int | None = None) -> dict[str, Any]:
        """The iterator's `state_dict(epoch, batch)` (see there)."""
        it = self._iterator
        with it.lock:
            length = max(it._length(), 1)
            if epoch is None:
                epoch = it.epoch
                streamed = divmod(it._stream_position, length)
                if batch is None and it._stream_position and streamed[0] >= epoch:
                    epoch, batch = streamed  # `next()`'s, unless epochs ended by index since
            return {
                "format": resume.STATE_FORMAT,
                "epoch": int(epoch),
                "batch": int(batch or 0),
                "seed": it.seed,
                "shuffle": bool(it.shuffle),
                "batch_size": int(it.batch_size),
                "shard": [it.shard.index, it.shard.count],
                "lakefs_pins": [dataclasses.asdict(pin) for pin in it.lakefs_pins],
                "fingerprint": resume.fingerprint(it),
                "directory": errors.redact(str(it.directory)),
            }

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

        self._load(state, rest, counted)
        self.replay_fit(replay)

    def set_state_in_order(
        self, state: dict[str, Any], rest: Callable[[int], Resumption | None]
    ) -> None:
        """Continues the stream of `state`; `rest(batches per epoch)` orders its epoch's rest."""
        self._load(state, rest)

    def count_resumed(self) -> None:
        """Makes `num_batches` count what the epoch restored by `set_state` has left.

        Moves back to that epoch if a pass ended it meanwhile (Keras's JAX
        `fit` builds the model from one batch of a pass it then abandons).
        """
        it = self._iterator
        prepared, it._prepared = it._prepared, None
        if prepared is None:
            return
        epoch, _, pending = prepared
        with it.lock:
            if it._clock.epoch == epoch and it._clock.resume == pending:
                it._clock.resume_counted = True
                return
        self.go_to(*prepared)

    def read_shuffle(self, fit_pass: int, count: int, trained: int, proven: bool) -> bool | None:
        """Keras 3.16's `fit(shuffle=...)`, from the indices the pass under way asked for.

        Outside a pass (read through `to_tf_dataset()`, Keras orders nothing),
        proven `False`; read, `None` (`EpochClock.read_shuffle`).
        """
        it = self._iterator
        with it.lock:
            if not it._clock.in_pass:
                return False if proven else None
            return it._clock.read_shuffle(fit_pass, count, trained, proven=proven)

    def replay_fit(self, replay: EpochSeededReplay | None) -> None:
        """Reads every epoch from now on in the steps `replay` maps Keras's indices to."""
        it = self._iterator
        with it.lock:
            it._clock.replay = replay
            it._local.prefetcher.clear()

    def go_to(
        self, epoch: int, done: int = 0, pending: Resumption | None = None, counted: bool = True
    ) -> None:
        """Moves the iterator to batch `done` of `epoch`; `pending` orders that epoch's rest."""
        it = self._iterator
        it._ensure_process()
        with it.lock:
            it._clock.go_to(epoch, pending, counted)
            it._last_requested = None
            it._local.prefetcher.clear()
            it._stream_position = epoch * max(it._length(), 1) + done
            it.batch_index = done
            it.index_array = it._planner.order(epoch)

    def _load(
        self, state: dict[str, Any], rest: Callable[[int], Resumption | None], counted: bool = True
    ) -> None:
        """Loads `state`; `rest(batches per epoch)` orders the rest of its epoch (a front's)."""
        it = self._iterator
        it._ensure_process()
        # Another process's record of the same run serves this shard (`resume.own_shard`).
        state = resume.own_shard(state, it, mid_epoch=bool(state["batch"]))
        files.repin(it, [LakeFSPin(**pin) for pin in state.get("lakefs_pins", [])])
        resume.check_compatible(it, state)  # the file list is the one read at those commits
        target = (int(state["epoch"]), int(state["batch"]), rest(it._length()))
        it._prepared = None if counted else target
        self.go_to(*target, counted=counted)
