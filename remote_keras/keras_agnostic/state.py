"""An iterator's public state: epoch, statistics, `set_epoch` and `state_dict`/`load_state_dict`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from remote_keras import errors
from remote_keras.keras_agnostic import resume
from remote_keras.keras_agnostic.resumable import Resumable
from remote_keras.keras_lines.epoch_clock import EpochClock
from remote_keras.keras_lines.keras3_16 import EpochSeededReplay
from remote_keras.keras_lines.resumption import Resumption
from remote_keras.pipeline.engine import ReadEngine
from remote_keras.pipeline.epochs import EpochPlanner
from remote_keras.pipeline.prefetch import Prefetcher
from remote_keras.pipeline.stats import LoaderStats
from remote_keras.storage.lakefs import LakeFSPin


class StateMixin:
    """Where an iterator stands in its stream, and moving it elsewhere."""

    # Set by `RemoteBatchMixin` and Keras's `__init__`.
    lock: Any
    seed: int | None
    shuffle: bool
    batch_size: int
    shard: Any
    directory: Any
    _filenames: Sequence[str]
    index_array: Any
    batch_index: int
    _filepaths: Sequence[str]
    _clock: EpochClock
    _planner: EpochPlanner
    _prefetcher: Prefetcher
    engine: ReadEngine
    _known_paths: dict[str, str]
    _path_prefix: str | None
    _stream_position: int
    _last_requested: int | None
    _prepared: tuple[int, int, Resumption | None] | None

    def __len__(self) -> int:
        return self._length()

    def _length(self) -> int:
        """Batches per epoch; the package's own calls use it, and Keras's `len()`."""
        return self._planner.batches()

    if TYPE_CHECKING:  # defined by the other mixins and the subclasses

        def _ensure_process(self) -> None: ...

        def _replay_fit(self, replay: EpochSeededReplay | None) -> None: ...

        def _repin(self, pins: list[LakeFSPin]) -> None: ...

        def _path_of(self, filename: str) -> str: ...

        def _read_paths(self) -> Sequence[str]: ...

    @property
    def num_batches(self) -> int:
        """Batches in this pass: `len(self)`, or what an epoch resumed mid-way has left.

        Keras reads it before training to count every epoch's steps, and at
        the start of each pass for the indices it asks for. After
        `load_state_dict` of a state saved mid-epoch it counts the rest of
        that epoch; `BackupAndRestore` restores early (so that the batches
        Keras reads before training come from the resumed epoch) and makes it
        count the rest only when training begins, after Keras counted a whole
        epoch's steps.
        """
        return self._clock.batches(self._length())

    @property
    def epoch(self) -> int:
        """The epoch (from 0) whose batches `iterator[i]` returns now, in this thread."""
        return self._clock.epoch + self._clock.held_here()

    @property
    def resumable(self) -> Resumable:
        """What `BackupAndRestore` reads and moves of this iterator (`Resumable`)."""
        return Resumable(self)

    def _current_epoch(self) -> int:
        return self._clock.epoch

    @property
    def stats(self) -> LoaderStats:
        """Running statistics: images, bytes, requests, retries, cache hits, time waiting."""
        engine = self.engine
        return dataclasses.replace(
            engine.stats.snapshot(), skipped=len(self.skipped), loader=engine.loader_choice
        )

    @property
    def skipped(self) -> list[tuple[str, str]]:
        """`(url, reason)` of every sample dropped with `on_error="skip"`, oldest first.

        Includes those skipped in Keras's worker processes (`use_multiprocessing=True`).
        Each sample is listed once per epoch, however often Keras read its batch.
        """
        return self.engine.skips.records(self._skips_listed_before())

    def _skips_listed_before(self) -> int | None:
        """The epoch whose skips and later ones `skipped` leaves out (`None`: none; a front's)."""
        return None

    @property
    def retries_made(self) -> int:
        """Retries of transient failures so far, in this process."""
        return self.engine.stats.snapshot().retries

    @property
    def lakefs_pins(self) -> list[LakeFSPin]:
        """The lakeFS commits this iterator reads, one per `(repository, ref)` requested."""
        return list(self.engine.pinner.pins.values())

    def set_epoch(self, epoch: int) -> None:
        """Makes `iterator[i]` and `next()` return the batches of `epoch` (from 0).

        For `fit(initial_epoch=k)`: call `iterator.set_epoch(k)` first, and
        epoch `k` reads epoch `k`'s order and augmentation (Keras does not tell
        the iterator which epoch it trains).

        Args:
            epoch: The epoch to read next.
        """
        self._ensure_process()
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self._go_to(epoch, 0, None)

    def state_dict(self, epoch: int | None = None, batch: int | None = None) -> dict[str, Any]:
        """Returns what `load_state_dict` needs to continue this iterator's stream exactly.

        Args:
            epoch: The epoch in progress; defaults to the iterator's own.
            batch: Batches of that epoch already consumed; defaults to the
                position of `next()`, or 0 when batches are read by index.

        Returns:
            A JSON-serialisable dict: format, epoch, batch, seed, shuffle,
            batch size, shard, lakeFS pins and a fingerprint of the samples.
        """
        with self.lock:
            length = max(self._length(), 1)
            if epoch is None:
                epoch = self.epoch
                streamed = divmod(self._stream_position, length)
                if batch is None and self._stream_position and streamed[0] >= epoch:
                    epoch, batch = streamed  # `next()`'s, unless epochs ended by index since
            return {
                "format": resume.STATE_FORMAT,
                "epoch": int(epoch),
                "batch": int(batch or 0),
                "seed": self.seed,
                "shuffle": bool(self.shuffle),
                "batch_size": int(self.batch_size),
                "shard": [self.shard.index, self.shard.count],
                "lakefs_pins": [dataclasses.asdict(pin) for pin in self.lakefs_pins],
                "fingerprint": resume.fingerprint(self),
                "directory": errors.redact(str(self.directory)),
            }

    def load_state_dict(self, state: dict[str, Any], fit_random_state: tuple | None = None) -> None:
        """Continues the stream `state` was saved from: same data, epoch and position.

        lakeFS refs are read at the commits of `state` even if a branch moved
        since (a folder is listed again at that commit). A state saved
        mid-epoch makes `num_batches` count the rest of that epoch at once;
        to resume `fit` mid-epoch use `remote_keras.BackupAndRestore`, which
        lets Keras count whole epochs first.

        Args:
            state: A dict from `state_dict()`.
            fit_random_state: When `fit(shuffle=True)` drew the interrupted
                epoch's batch order, Python's `random` state it drew from
                (`random.getstate()`): the remaining batches are then returned
                in the order `fit` asks for them once `random` is set to that
                state again. By default, index `i` of the interrupted epoch
                returns its `state["batch"] + i`-th batch.

        Several processes of one run are at the same position, each in its own
        shard: a state saved by any of them serves all (each continues its own
        shard), also with another number of processes at an epoch's start.

        Raises:
            ValueError: The state was saved from different data (another file
                list, seed or batch size), or in the middle of an epoch by a
                run of another number of processes, naming what differs.
        """
        self.resumable.set_state(state, fit_random_state)

    def _load_resumption(
        self,
        state: dict[str, Any],
        rest: Callable[[int], Resumption | None],
        counted: bool = True,
    ) -> None:
        """Loads `state`; `rest(batches per epoch)` orders the rest of its epoch (a front's)."""
        self._ensure_process()
        # Another process's record of the same run serves this shard (`resume.own_shard`).
        state = resume.own_shard(state, self, mid_epoch=bool(state["batch"]))
        self._repin([LakeFSPin(**pin) for pin in state.get("lakefs_pins", [])])
        resume.check_compatible(self, state)  # the file list is the one read at those commits
        target = (int(state["epoch"]), int(state["batch"]), rest(self._length()))
        self._prepared = None if counted else target
        self._go_to(*target, counted=counted)

    def _count_resumed(self) -> None:
        """Makes `num_batches` count what the epoch restored by `Resumable.set_state` has left.

        Moves back to that epoch if a pass ended it meanwhile (Keras's JAX
        `fit` builds the model from one batch of a pass it then abandons).
        """
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            return
        epoch, _, pending = prepared
        with self.lock:
            if self._clock.epoch == epoch and self._clock.resume == pending:
                self._clock.resume_counted = True
                return
        self._go_to(*prepared)

    def _go_to(
        self, epoch: int, done: int, pending: Resumption | None, counted: bool = True
    ) -> None:
        with self.lock:
            self._clock.go_to(epoch, pending, counted)
            self._last_requested = None
            self._prefetcher.clear()
            self._stream_position = epoch * max(self._length(), 1) + done
            self.batch_index = done
            self.index_array = self._planner.order(epoch)
