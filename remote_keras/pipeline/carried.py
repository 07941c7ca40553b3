"""`CarriedReads`: the bytes a pass cut short at one batch read, kept for the next pass.

Keras's JAX and PyTorch trainers build an unbuilt model from the first batch of
a pass they then abandon (`fit` and `evaluate`, before their first epoch). That
pass ends an epoch like any other, and the next epoch reads its images again.
An iterator records the bytes its pass fetches until the pass asks for a second
batch; when the pass ends having handed out one batch, those bytes serve the
next pass instead of a second request (each is taken once), and whatever that
pass does not take is dropped when it ends. Memory is bounded by one batch's
files (a few more with Keras's worker threads asking at once). Keras-free.
"""

from __future__ import annotations

import threading
from typing import Any


class CarriedReads:
    """Bytes fetched early in a pass, handed to the next pass when the first was cut short."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recording: dict[str, Any] | None = None
        self._carried: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {}  # per process: a copy in a worker process carries nothing

    def __setstate__(self, state: dict[str, Any]) -> None:
        CarriedReads.__init__(self)

    def record(self) -> None:
        """A pass begins: what is fetched from now on is recorded (until `stop_recording`)."""
        with self._lock:
            self._recording = {}

    def stop_recording(self) -> None:
        """The pass asked for a second batch: it will not be cut short at its first."""
        with self._lock:
            self._recording = None

    def end_pass(self, cut_short_at_one: bool) -> None:
        """The pass ends: what it recorded is carried if it handed out one batch, else dropped.

        Args:
            cut_short_at_one: Whether the pass handed out only its first batch.
        """
        with self._lock:
            self._carried = (self._recording or {}) if cut_short_at_one else {}
            self._recording = None

    def put(self, path: str, data: Any) -> None:
        """Records `path`'s bytes while a pass records."""
        with self._lock:
            if self._recording is not None:
                self._recording[path] = data

    def take(self, path: str) -> Any:
        """`path`'s carried bytes (once), or `None`."""
        if not self._carried:  # the usual case: no lock taken
            return None
        with self._lock:
            return self._carried.pop(path, None)
