"""Keras 2's `DataFrameIterator` and `DirectoryIterator`, over the shared iterator core.

They subclass `tf.keras`'s own classes (a `tf.keras.utils.Sequence`) with the
Keras 3 front's arguments, options and messages (`remote_keras.keras_agnostic`).
What is Keras 2's own is how an epoch ends: Keras 2 never calls
`on_epoch_begin()`, and calls `on_epoch_end()` once at the end of each epoch
of `fit`, `evaluate` and `predict`, after reading batch 0 once to learn the
batch's spec (that batch is kept, and the epoch hands it out again). So here
every `on_epoch_end()` ends the epoch, except the extra one of a pair: with
`workers > 1` or `use_multiprocessing=True`, Keras 2's `fit` reads through an
`OrderedEnqueuer`, whose own thread calls `on_epoch_end()` once the epoch's
batches are all handed over, and `fit` calls it too, from its thread
(`keras_lines.keras2.Keras2Clock` pairs the two by thread, never by reading the call stack).
Batches that enqueuer reads ahead for the next epoch before `fit` stops it are
kept (threads) for the next epoch, which hands them out.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, cast

from remote_keras.keras2 import keras_api
from remote_keras.keras_agnostic.batch_core import RemoteBatchCore
from remote_keras.keras_agnostic.dataframe import DataFrameCore
from remote_keras.keras_agnostic.directory import DirectoryCore
from remote_keras.keras_agnostic.scheduling import Scheduler, split_again_message
from remote_keras.keras_lines import KERAS_2
from remote_keras.keras_lines.keras2 import Keras2Clock, KerasDraws

# Set while `to_tf_dataset()` reads the batch that gives its spec: that read is ours, not fit's.
_OWN_READ = threading.local()
# What Keras 2 adds to the refusal of a shard (`scheduling.split_again_message`).
_ADVICE = (
    " (Keras 2's fit reads the iterator inside `strategy.scope()`: read `len(iterator)` or "
    "batches of your own outside it.)"
)


class RemoteBatchMixin(RemoteBatchCore, keras_api.Iterator):
    """`RemoteBatchCore` on Keras 2's `Iterator`, with Keras 2's epoch ends (module docstring)."""

    _clock_type = Keras2Clock
    keras_line = KERAS_2
    keras_api = keras_api  # what the shared core asks of Keras 2

    def _finish_init(self) -> None:
        super()._finish_init()
        # `fit(shuffle=True)`'s draws, for BackupAndRestore (kept when a restore lists again)
        self._draws = self.__dict__.get("_draws") or KerasDraws()
        if self.options.use_multiprocessing:
            warnings.warn(
                "Keras 2's fit takes `workers`, `use_multiprocessing` and `max_queue_size` as "
                "its own arguments, not the iterator's: call `model.fit(iterator, workers=4, "
                "use_multiprocessing=True)`.",
                UserWarning,
                stacklevel=4,
            )

    def __len__(self) -> int:
        """Batches per epoch (Keras 2 draws `fit(shuffle=True)`'s order right after asking).

        Raises:
            ValueError: A shard asked inside a multi-worker strategy's scope (module docstring).
        """
        self._refuse_split_again()
        draws = self.__dict__.get("_draws")
        if draws is not None:
            draws.at_len()
        return self._length()

    def __getitem__(self, idx: int):
        """Batch `idx` of the epoch (Keras 2's `fit` asks for batch 0 first, in its scope).

        Raises:
            ValueError: A shard asked inside a multi-worker strategy's scope (module docstring).
        """
        self._refuse_split_again()
        return super().__getitem__(idx)

    def to_tf_dataset(self) -> Any:
        """Returns the batches of one epoch per pass, as a `tf.data.Dataset`.

        See `remote_keras.keras_agnostic.tfdata.to_tf_dataset`; it may be called
        inside `strategy.scope()`, and its dataset keeps each worker's shard whole.
        """
        _OWN_READ.active = True
        try:
            return super().to_tf_dataset()
        finally:
            _OWN_READ.active = False

    def _refuse_split_again(self) -> None:
        """Refuses a shard to Keras 2's multi-worker `fit`, before it trains a step."""
        shard = self.shard
        if shard.count > 1 and not getattr(_OWN_READ, "active", False):
            if keras_api.multi_worker_scope():
                raise ValueError(split_again_message(shard, _ADVICE))

    def on_epoch_end(self) -> None:
        """Ends the epoch: the next batches come from the next epoch's order.

        Keras 2 calls it at the end of each epoch of `fit`, `evaluate` and
        `predict`; a loop of your own calls it after its epoch's last batch.
        """
        self._ensure_process()
        with self.lock:
            ended = self._clock.end(self._length())  # none: the second call of a pair
            if ended:
                Scheduler(self).end_epochs(ended)

    def _skips_listed_before(self) -> int | None:
        """Only ended epochs' when an enqueuer began this one (it reads ahead of `fit`)."""
        clock = cast(Keras2Clock, self._clock)
        return clock.epoch if clock.read_ahead else None

    def next(self):
        """The next batch of the stream (Keras 2 spells `next(iterator)` so too)."""
        return self.__next__()


class DataFrameIterator(DataFrameCore, RemoteBatchMixin, keras_api.DataFrameIterator):
    """Keras 2's `DataFrameIterator` over images named in a dataframe, local or remote.

    Arguments, options and errors are those of the Keras 3 front's class of the same name.
    """


class DirectoryIterator(DirectoryCore, RemoteBatchMixin, keras_api.DirectoryIterator):
    """Keras 2's `DirectoryIterator` over a folder of class sub-folders, local or remote.

    Arguments, options and errors are those of the Keras 3 front's class of the same name.
    """
