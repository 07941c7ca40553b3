"""`ProcessLocal`: what each process of an iterator owns (lock, thread pools, look-ahead)."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from remote_keras.keras_agnostic import workers
from remote_keras.pipeline.options import LoaderOptions
from remote_keras.pipeline.prefetch import Prefetcher, WorkerPools


class ProcessLocal:
    """An iterator's lock, pools and look-ahead in this process; never pickled.

    Made for a new iterator, again in a forked or unpickled copy (the
    parent's threads, futures and lock holders do not exist there).

    Args:
        options: The iterator's options (pool sizes, look-ahead depth).
        owner: The iterator; held weakly, so that the pools' idle timer and
            the finalizer closing them do not keep it alive.
    """

    def __init__(self, options: LoaderOptions, owner: Any) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        ref = weakref.ref(owner)

        def when_idle() -> None:
            iterator = ref()
            if iterator is not None:
                iterator.engine.release_clients()

        self.pools = WorkerPools(
            options.prefetch_batches + 2,
            options.max_in_flight,
            options.decode_workers,
            on_idle=when_idle,
        )
        self.prefetcher = Prefetcher(self.pools, options.prefetch_batches)
        self.finalizer = weakref.finalize(owner, self.pools.close)
        workers.track(owner, options.use_multiprocessing)  # fork safety of Keras's workers

    def is_here(self) -> bool:
        """Whether it was made in this process (not inherited through `fork`)."""
        return self.pid == os.getpid()

    def close(self, owner: Any) -> None:
        """Drops the look-ahead and shuts the pools down; requests in flight finish."""
        with self.lock:
            self.prefetcher.clear()
        self.finalizer()
        workers.untrack(owner)
