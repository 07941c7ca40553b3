"""The samples an iterator dropped with `on_error="skip"`, from every process that read for it.

With `use_multiprocessing=True`, Keras builds batches in worker processes
that hold copies of the iterator; what they skip would otherwise stay there.
Copies in other processes append one JSON line per skipped sample to a file
of their own in a spool folder that the original iterator reads (and removes
when it is garbage-collected). The folder is only created once a copy skips.

A sample read twice in one epoch (a batch read ahead, thrown away and read
again, or read by the parent and again by a worker process) is listed once:
skips of an epoch's batches carry their place in the epoch's order.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import uuid
import warnings
import weakref
from typing import Any

# (time, url, reason, epoch, position in the epoch's order or `None`)
_Entry = tuple[float, str, str, int, int | None]


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
    ) -> None:
        """Records one skipped sample; warns at the first skip of each `epoch` in this process.

        Args:
            url: The sample's path or URL.
            reason: Why it was skipped (named in the warning).
            epoch: The epoch (or pass) it was skipped in.
            fate: What the warning says becomes of skipped samples; by default
                the iterators' (dropped from their batch, in `iterator.skipped`).
            slot: Its position in the epoch's order, if known: another skip of
                the same `(epoch, slot)` is the same one, read again.
        """
        entry = (time.time(), url, reason, epoch, slot)
        with self._lock:
            first_in_epoch = epoch not in self._warned_epochs
            self._warned_epochs.add(epoch)
            if os.getpid() == self._home_pid:
                self._local.append(entry)
            else:
                os.makedirs(self._spool, exist_ok=True)
                with open(os.path.join(self._spool, f"{os.getpid()}.jsonl"), "a") as f:
                    f.write(json.dumps(entry) + "\n")
        if first_in_epoch:
            fate = fate or "are dropped from their batch and listed in `iterator.skipped`"
            warnings.warn(
                f"Skipped an unreadable sample (on_error='skip'): {reason}. Skipped samples "
                f"{fate}.",
                stacklevel=4,
            )

    def warn_summary(self, before: int | None = None) -> None:
        """Warns how many samples were skipped so far, if any since the last summary.

        Args:
            before: Count only the skips of epochs before this one (`records`).
        """
        records = self.records(before)
        if len(records) > self._summarized:
            self._summarized = len(records)
            warnings.warn(
                f"{len(records)} sample(s) skipped so far (on_error='skip'), "
                f"last: {records[-1][0]}; see `iterator.skipped`.",
                stacklevel=4,
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
