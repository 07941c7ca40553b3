"""Keras's file iterators, reading through a pluggable loader on thread pools.

`DataFrameIterator` and `DirectoryIterator` subclass Keras 3's own classes and
keep their arguments, defaults, attributes and messages. What changes:

- every read goes through `loader` (default: fsspec), so URLs work
  (`remote_keras.pipeline.fetching`, with the disk cache and retries);
- files are fetched and decoded concurrently (`remote_keras.pipeline.batches`), and
  batches asked for in order are built ahead of time (`remote_keras.pipeline.prefetch`);
- `__getitem__` and `__next__` are thread-safe: the lock covers only choosing
  the samples and drawing their random transforms;
- with a `seed`, the sample order and augmentation of batch `b` in epoch `e`
  depend only on `(seed, e, b)` (`remote_keras.pipeline.epochs`). They equal stock
  Keras's when batches are read in order (`it[0], it[1], ...` in the first
  epoch, or `next(it)`).

Each class is Keras's own with at most four of this package's classes ahead
of it: the class itself, `DataFrameCore` or `DirectoryCore`, `RemoteBatchMixin`
(Keras 3's `Iterator`) and `RemoteBatchCore`, which holds the public attributes
and delegates to its parts: `Scheduler` (indices to batches, look-ahead, epoch
ends told by `keras_lines.epoch_clock.EpochClock` from the calls Keras makes in
public), `Resumable` (state and resume) and `ProcessLocal` (each process's lock
and thread pools).
"""

from remote_keras.keras3.iterators.base import RemoteBatchMixin
from remote_keras.keras3.iterators.dataframe import DataFrameIterator
from remote_keras.keras3.iterators.directory import DirectoryIterator

__all__ = ["DataFrameIterator", "DirectoryIterator", "RemoteBatchMixin"]
