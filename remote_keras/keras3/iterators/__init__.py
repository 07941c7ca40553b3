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

`RemoteBatchMixin` holds Keras's entry points; `epoch_clock.EpochClock` tells epoch
ends from Keras's resets using only the calls Keras makes in public; `state`,
`scheduling` and `lifecycle` hold the public state, the look-ahead and what
each process needs of its own (lock, thread pools).
"""

from remote_keras.keras3.iterators.base import RemoteBatchMixin
from remote_keras.keras3.iterators.dataframe import DataFrameIterator
from remote_keras.keras3.iterators.directory import DirectoryIterator

__all__ = ["DataFrameIterator", "DirectoryIterator", "RemoteBatchMixin"]
