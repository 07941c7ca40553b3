"""The samples an iterator dropped with `on_error="skip"`, from every process that read for it.

With `use_multiprocessing=True`, Keras builds batches in worker processes
that hold copies of the iterator; what they skip would otherwise stay there.
Copies in other processes append one JSON line per skipped sample to a file
of their own in a spool folder that the original iterator reads (and removes
when it is garbage-collected). The folder is only created once a copy skips.

A sample read twice in one epoch (a batch read ahead, thrown away and read
again, or read by the parent and again by a worker process) is listed once:
skips of an epoch's batches carry their place in the epoch's order.

The warnings name the user's line. `warnings.warn(stacklevel=...)` counts
frames of the calling thread (as does Python 3.12's `skip_file_prefixes`),
and a batch is built on the iterator's pool threads, and asked for by
TensorFlow's `from_generator` thread or Keras's `workers` threads, none of
which holds a frame of the user's code: the location would be
`concurrent/futures/thread.py` or a Keras module. So a skip's warning waits
for the thread that hands its batch out (`SkipLog.warn_pending`), and
`warn_at_user_line` issues it at the innermost frame outside the packages
that call the iterator on the user's behalf (remote_keras, Keras,
TensorFlow, JAX, PyTorch, grain, the standard library): in that thread, or
else in the main thread, which is then inside the user's `fit` call. The
warning is issued as `warnings.warn` would from that frame (its module's
filters and registry apply; its source line is read from its file).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
import warnings
import weakref
from types import FrameType
from typing import Any

# (time, url, reason, epoch, position in the epoch's order or `None`)
_Entry = tuple[float, str, str, int, int | None]
# Top-level packages whose frames are not the user's code (beside the standard library's).
LIBRARIES = frozenset(
    {"remote_keras", "keras", "tf_keras", "tensorflow", "jax", "jaxlib", "torch", "grain"}
)


class SkipLog:
    """Thread- and process-safe record of skipped samples as `(url, reason)`, once per epoch."""

    def __init__(self) -> None:
        self._home_pid = os.getpid()
        self._spool = os.path.join(tempfile.gettempdir(), f"remote_keras-skips-{uuid.uuid4().hex}")
        self._init_local()
        weakref.finalize(self, _remove_spool, self._spool, self._home_pid)

    def _init_local(self) -> None:
        self._lock = threading.Lock()
        self._local: list[_Entry] = []
        self._warned_epochs: set[int] = set()
        self._pending: list[str] = []  # warnings held for `warn_pending`
        self._summarized = 0  # skips counted in the last summary

    def __getstate__(self) -> dict[str, Any]:
        return {"_home_pid": self._home_pid, "_spool": self._spool}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_local()

    def add(
        self,
        url: str,
        reason: str,
        epoch: int = 0,
        fate: str | None = None,
        slot: int | None = None,
        hold: bool = False,
    ) -> None:
        """Records one skipped sample; warns at the first skip of each `epoch` in this process.

        The warning names the user's line (`warn_at_user_line`); with `hold`,
        it waits for `warn_pending`, which the thread handing out the batch
        calls.

        Args:
            url: The sample's path or URL.
            reason: Why it was skipped (named in the warning).
            epoch: The epoch (or pass) it was skipped in.
            fate: What the warning says becomes of skipped samples; by default
                the iterators' (dropped from their batch, in `iterator.skipped`).
            slot: Its position in the epoch's order, if known: another skip of
                the same `(epoch, slot)` is the same one, read again.
            hold: Hold the warning for `warn_pending` (a batch being built
                on a pool thread, ahead of the call that hands it out).
        """
        entry = (time.time(), url, reason, epoch, slot)
        fate = fate or "are dropped from their batch and listed in `iterator.skipped`"
        message = (
            f"Skipped an unreadable sample (on_error='skip'): {reason}. Skipped samples {fate}."
        )
        with self._lock:
            first_in_epoch = epoch not in self._warned_epochs
            self._warned_epochs.add(epoch)
            if first_in_epoch and hold:  # with the entry: a summary never counts it first
                self._pending.append(message)
            if os.getpid() == self._home_pid:
                self._local.append(entry)
            else:
                os.makedirs(self._spool, exist_ok=True)
                with open(os.path.join(self._spool, f"{os.getpid()}.jsonl"), "a") as f:
                    f.write(json.dumps(entry) + "\n")
        if first_in_epoch and not hold:
            warn_at_user_line(message)

    def warn_pending(self) -> None:
        """Issues the warnings `add(hold=True)` held, each once, at the user's line.

        Called where a batch is handed out (and where an epoch ends, for a
        batch read ahead and dropped): after the batch's build finished, so
        its own skips are among them.
        """
        if not self._pending:  # the usual case: no lock taken
            return
        with self._lock:
            pending, self._pending = self._pending, []
        for message in pending:
            warn_at_user_line(message)

    def warn_summary(self, before: int | None = None) -> None:
        """Warns how many samples were skipped so far, if any since the last summary.

        Args:
            before: Count only the skips of epochs before this one (`records`).
        """
        self.warn_pending()
        records = self.records(before)
        if len(records) > self._summarized:
            self._summarized = len(records)
            warn_at_user_line(
                f"{len(records)} sample(s) skipped so far (on_error='skip'), "
                f"last: {records[-1][0]}; see `iterator.skipped`."
            )

    def records(self, before: int | None = None) -> list[tuple[str, str]]:
        """Every skip seen by this process, plus (in the original) those of its copies.

        Args:
            before: List only the skips of epochs before this one; `None`: all.

        Returns:
            `(url, reason)` pairs, oldest first, each `(epoch, slot)` once.
        """
        with self._lock:
            entries = list(self._local)
        if os.getpid() == self._home_pid and os.path.isdir(self._spool):
            for name in sorted(os.listdir(self._spool)):
                with open(os.path.join(self._spool, name)) as f:
                    entries += [tuple(json.loads(line)) for line in f if line.endswith("\n")]
        seen: set[tuple[int, int]] = set()
        listed = []
        for _, url, reason, epoch, slot in sorted(entries, key=lambda entry: entry[0]):
            if before is not None and epoch >= before:
                continue
            if slot is not None:
                if (epoch, slot) in seen:
                    continue
                seen.add((epoch, slot))
            listed.append((url, reason))
        return listed


def _remove_spool(spool: str, home_pid: int) -> None:
    if os.getpid() == home_pid:  # a forked child's copy runs this at exit too
        shutil.rmtree(spool, ignore_errors=True)


def warn_at_user_line(message: str) -> None:
    """Issues a `UserWarning` at the user's innermost line (see the module docstring).

    Without any such frame (in Keras's worker processes), it is issued as
    `warnings.warn(message, stacklevel=2)` would from the caller.

    Args:
        message: The warning's text.
    """
    frame = user_frame()
    if frame is None:
        warnings.warn(message, stacklevel=3)
        return
    module_globals = frame.f_globals
    warnings.warn_explicit(
        message,
        UserWarning,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=module_globals.get("__name__"),
        registry=module_globals.setdefault("__warningregistry__", {}),
    )  # no `module_globals`: a `python -c` script's loader has no source, and raises


def user_frame() -> FrameType | None:
    """The innermost frame of the user's code in this thread, else in the main thread."""
    found = _outside_libraries(sys._getframe(1))
    main = threading.main_thread().ident
    if found is None and main is not None and main != threading.get_ident():
        found = _outside_libraries(sys._current_frames().get(main))
    return found


def _outside_libraries(frame: FrameType | None) -> FrameType | None:
    while frame is not None:
        package = str(frame.f_globals.get("__name__") or "").partition(".")[0]
        if package not in LIBRARIES and package not in sys.stdlib_module_names:
            return frame
        frame = frame.f_back
    return None
