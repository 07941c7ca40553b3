"""What an iterator's `__init__` does around Keras's: options, shard and engine, then the paths."""

from __future__ import annotations

import os
import warnings
from typing import Any

from remote_keras.keras_agnostic import files
from remote_keras.keras_agnostic.lifecycle import ProcessLocal
from remote_keras.pipeline import sharding
from remote_keras.pipeline.engine import ReadEngine
from remote_keras.pipeline.epochs import EpochPlanner
from remote_keras.pipeline.options import LoaderOptions, LoaderOverrides
from remote_keras.pipeline.stats import HandoffLog


def start(it: Any, options: LoaderOptions | None, overrides: LoaderOverrides) -> None:
    """Gives `it` its options, shard, engine and parts, before Keras's `__init__` runs.

    Args:
        it: The new iterator (its front's `keras_line` set).
        options: The `LoaderOptions` to start from, or `None`.
        overrides: Keyword arguments named like `LoaderOptions`'s fields.

    Raises:
        ValueError: A shard was asked for while Keras's distribution shards
            the batches itself.
    """
    it.options = opts = (options or LoaderOptions()).merged(overrides)
    detecting = opts.num_shards is None and opts.shard_index is None
    # Keras 3.16 may shard the batches itself: then every process holds all the files.
    it.keras_batches = it.keras_line.batch_shard()
    if it.keras_batches is not None and not detecting and opts.num_shards != 1:
        raise ValueError(
            f"Keras's distribution shards the batches of this iterator itself "
            f"(auto_shard_dataset=True, shard {it.keras_batches[0]} of "
            f"{it.keras_batches[1]}): pass no `num_shards`/`shard_index` (or set "
            "`auto_shard_dataset=False` on the distribution to shard the files instead)."
        )
    if it.keras_batches is not None:
        it.shard = sharding.Shard(remainder=opts.shard_remainder)
    else:
        it.shard = sharding.resolve(opts.num_shards, opts.shard_index, opts.shard_remainder)
    it._planner = EpochPlanner(it, it.shard)
    it.engine = ReadEngine(opts)  # "auto": the loader is chosen in `finish`
    it._known_paths = {}  # filename -> path, filled by validation
    it._path_prefix = None  # set by a listing: path = prefix + filename
    it.handoffs = HandoffLog()
    it._local = ProcessLocal(opts, it)
    # Epoch, passes, batches kept for the pass and a resumed epoch's order; copies in
    # worker processes get them too.
    it._clock = it._clock_type()
    it._prepared = None
    it._stream_position = 0
    it._last_requested = None
    it.closed = False
    it._home_pid = os.getpid()  # pickled: a copy knows it runs in another process


def finish(it: Any) -> None:
    """After Keras's `__init__`: URL-aware paths, the loader, shards and `PyDataset` knobs.

    Args:
        it: The iterator Keras's `__init__` (or a listing) has set up.
    """
    index, count = it.keras_batches or (it.shard.index, it.shard.count)
    if count > 1 and it.shuffle and it.seed is None:
        it.seed = 0  # every worker must draw the same permutation
        source = "Keras's batch sharding" if it.keras_batches else it.shard.source
        warnings.warn(
            f"Reading shard {index} of {count} (from {source}) with shuffle=True and no "
            "seed: using seed=0 so that all workers shuffle alike. Pass `seed=` to "
            "choose another.",
            stacklevel=4,
        )
    it._filepaths = files.read_paths(it)
    first = it._filepaths[0] if it._filepaths else str(it.directory or "")
    it.engine.choose_loader(first)
    it.engine.expect(it._filepaths)  # lakeFS: addresses listed ahead of reads
    # Keras's iterators do not forward these to `PyDataset.__init__`.
    it.workers = it.options.workers
    it.use_multiprocessing = it.options.use_multiprocessing
    it.max_queue_size = it.options.max_queue_size
