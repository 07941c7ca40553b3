"""The samples an iterator dropped with `on_error="skip"`, from every process that read for it.

With `use_multiprocessing=True`, Keras builds batches in worker processes
that hold copies of the iterator; what they skip would otherwise stay there.
Copies in other processes append one JSON line per skipped sample to a file
of their own in a spool folder that the original iterator reads (and removes
when it is garbage-collected). The folder is only created once a copy skips.

A sample read twice in one epoch (a batch read ahead, thrown away and read
again, or read by the parent and again by a worker process) is listed once:
skips of an epoch's batches carry their place in the epoch's order.

Where the warnings point: a batch is built on the iterator's pool threads,
so a skip's warning waits for the call that hands the batch out
(`SkipLog.warn_pending`). Each public entry point passes the `stacklevel`
that names its caller, counted from its code: your `it[i]`, `next(it)`,
`on_epoch_end()` or `BatchReader.batch(...)` line. Under `fit`, that caller
is Keras's (or TensorFlow's) line; on Python 3.12 and newer, a warning
issued in the main thread skips the files of remote_keras, Keras,
TensorFlow, JAX, PyTorch, grain and the standard library instead
(`skip_file_prefixes`), and so names your `fit` line. No call stack is
inspected: another thread's (TensorFlow's, Keras's `workers`') is never
seen, and its warnings keep the counted location.
"""

from __future__ import annotations

import functools
import importlib.util
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
from typing import Any

# (time, url, reason, epoch, position in the epoch's order or `None`)
_Entry = tuple[float, str, str, int, int | None]
# Packages whose files are not the user's code (beside the standard library's), on 3.12+.
LIBRARIES = ("remote_keras", "keras", "tf_keras", "tensorflow", "jax", "jaxlib", "torch", "grain")


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

        With `hold`, the warning waits for `warn_pending`, which the call
        handing out the batch makes. Without it (datasets' skips, made on
        tf.data's or grain's threads), the warning names the line that called
        `add`, a line of remote_keras; on Python 3.12 and newer, in the main
        thread, the first line outside the libraries (`warn`).

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
            warn(message, stacklevel=2)

    def warn_pending(self, stacklevel: int) -> None:
        """Issues the warnings `add(hold=True)` held, each once.

        Called where a batch is handed out (and where an epoch ends, for a
        batch read ahead and dropped): after the batch's build finished, so
        its own skips are among them.

        Args:
            stacklevel: Whose line the warnings name, counted as `warn` counts:
                1 is the line calling this method. The public entry point's
                caller is passed (the frames between are fixed).
        """
        if not self._pending:  # the usual case: no lock taken
            return
        with self._lock:
            pending, self._pending = self._pending, []
        for message in pending:
            warn(message, stacklevel + 1)

    def warn_summary(self, before: int | None = None, *, stacklevel: int) -> None:
        """Warns how many samples were skipped so far, if any since the last summary.

        Args:
            before: Count only the skips of epochs before this one (`records`).
            stacklevel: Whose line the warnings name, as in `warn_pending`.
        """
        self.warn_pending(stacklevel + 1)
        records = self.records(before)
        if len(records) > self._summarized:
            self._summarized = len(records)
            warn(
                f"{len(records)} sample(s) skipped so far (on_error='skip'), "
                f"last: {records[-1][0]}; see `iterator.skipped`.",
                stacklevel + 1,
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


def warn(message: str, stacklevel: int) -> None:
    """Issues a `UserWarning` at a line given by its distance from the caller.

    `stacklevel` counts as `warnings.warn`'s does from the caller of this
    function: 1 is the line calling `warn`, 2 that function's caller, and so
    on. On Python 3.12 and newer, in the main thread, the warning names the
    first line outside `library_dirs()` instead (`skip_file_prefixes`), such
    as your `fit` line: under `fit` the counted caller is Keras's. Other
    threads (TensorFlow's, Keras's `workers`', tf.data's) have no frame of the
    user's code, and keep the counted line. No frame is looked at here.

    Args:
        message: The warning's text.
        stacklevel: Whose line it names (see above); past the thread's first
            frame, Python names `sys`.
    """
    if sys.version_info >= (3, 12):
        if threading.current_thread() is threading.main_thread():
            # Python counts only the frames outside the prefixes: 2 is the first of them.
            warnings.warn(message, UserWarning, stacklevel=2, skip_file_prefixes=library_dirs())
            return
    warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)


@functools.cache
def library_dirs() -> tuple[str, ...]:
    """The folders of the standard library and of the installed `LIBRARIES` (none imported)."""
    folders = [os.path.dirname(threading.__file__)]  # the standard library's
    for name in LIBRARIES:
        try:
            spec = importlib.util.find_spec(name)  # a top-level name: imports nothing
        except (ImportError, ValueError):  # ValueError: in `sys.modules` without a spec
            continue
        if spec is not None:  # a package: its folders; namespace packages have several
            folders += spec.submodule_search_locations or ()
    return tuple(os.path.join(folder, "") for folder in folders)  # "keras/", not "keras_hub"
