"""What each process needs of its own (lock, thread pools), pickling, and `close()`."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from remote_keras.keras_agnostic import workers
from remote_keras.pipeline.engine import ReadEngine
from remote_keras.pipeline.options import LoaderOptions
from remote_keras.pipeline.prefetch import Prefetcher, WorkerPools


class LifecycleMixin:
    """Per-process state of an iterator, for a new iterator, a fork or an unpickled copy."""

    options: LoaderOptions
    engine: ReadEngine
    _flow_index: Any

    def _per_process_state(self) -> None:
        """Fresh lock, pools and look-ahead: for a new iterator, a fork, or an unpickled copy."""
        opts = self.options
        self.lock = threading.Lock()
        self._pid = os.getpid()
        ref = weakref.ref(self)  # the pools' idle timer must not keep the iterator alive

        def when_idle() -> None:
            iterator = ref()
            if iterator is not None:
                iterator._release_clients()

        self._pools = WorkerPools(
            opts.prefetch_batches + 2, opts.max_in_flight, opts.decode_workers, on_idle=when_idle
        )
        self._prefetcher = Prefetcher(self._pools, opts.prefetch_batches)
        self._finalizer = weakref.finalize(self, self._pools.close)
        workers.track(self, opts.use_multiprocessing)  # fork safety of Keras's worker processes

    def _ensure_process(self) -> None:
        """After `fork`, the parent's threads, futures and lock holders do not exist here."""
        if self._pid != os.getpid():
            self._per_process_state()
        workers.leave_interrupts_to_parent()  # in a Keras worker process: Ctrl-C is the parent's

    _PROCESS_LOCAL = (
        "lock", "_pools", "_prefetcher", "_finalizer", "index_generator", "_pid"
    )  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:
        """Pickles the configuration and data, not threads (for `use_multiprocessing=True`)."""
        return {k: v for k, v in self.__dict__.items() if k not in self._PROCESS_LOCAL}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.index_generator = self._flow_index()
        self._per_process_state()

    def close(self) -> None:
        """Stops the background threads and closes connections; returns at once.

        Requests in flight finish in the background. The iterator cannot load
        batches afterwards.
        """
        with self.lock:
            self._prefetcher.clear()
            self.closed = True
        self._finalizer()
        self.engine.rest()
        workers.untrack(self)
        self._release_clients()

    def _release_clients(self) -> None:
        """Drops the loader's clients, closing their connections (a read opens new ones)."""
        self.engine.release_clients()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
