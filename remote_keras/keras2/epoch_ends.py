"""`EpochEnds`: which of Keras 2's `on_epoch_end()` calls end an epoch, told by thread only.

Keras-free, so that it is tested without Keras 2 (tests/test_keras2_epoch_ends.py).
"""

from __future__ import annotations

import threading
from typing import Any


class EpochEnds:
    """Which `on_epoch_end()` calls end an epoch: one of each pair made from two threads.

    Keras 2's enqueuer and `fit` each call `on_epoch_end()` once per epoch,
    from two threads, in either order. A call ends an epoch unless it is the
    second of such a pair: the last epoch end came from another thread, and
    this thread was already running then (a thread started later, such as
    the next `fit`'s enqueuer, makes a pair of its own). Calls from one thread
    (`fit` without workers, a loop of your own) each end an epoch.
    """

    def __init__(self) -> None:
        self._open: tuple[threading.Thread, set[threading.Thread]] | None = None
        self.paired = False  # a pair was seen: an enqueuer drives this iterator
        # The current epoch began with an end from another thread than the main one (an
        # enqueuer's): the enqueuer may read its batches before `fit` trains it, or never does.
        self.read_ahead = False

    def ends_epoch(self) -> bool:
        """Called by `on_epoch_end()` (under the iterator's lock): whether the epoch ends now."""
        me = threading.current_thread()
        if self._open is not None:
            ender, running = self._open
            if me is not ender and me in running:
                self._open = None
                self.paired = self.read_ahead = True
                return False
        self._open = (me, set(threading.enumerate()))
        self.read_ahead = me is not threading.main_thread()
        return True

    def __getstate__(self) -> dict[str, Any]:
        # Threads belong to this process.
        return {"_open": None, "paired": self.paired, "read_ahead": self.read_ahead}

    def by_enqueuer(self) -> bool:
        """Whether the end just made may be an enqueuer's, which reads the next epoch ahead."""
        return self.paired or threading.current_thread() is not threading.main_thread()
