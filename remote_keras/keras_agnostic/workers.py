"""Keras's forked worker processes (`use_multiprocessing=True`): inherited garbage and deaths.

Two fork-time failures, both handled here through `os.register_at_fork`
while an iterator is open in the process:

- Garbage inherited from the parent. Objects left in reference cycles by an
  earlier `fit` (TensorFlow's traced functions among them) are collected in
  the forked child when its first reads allocate enough, and their
  finalizers call into a runtime whose threads did not survive the fork
  (`Fatal Python error: Segmentation fault` in `atomic_function.__del__`).
  A forked child therefore freezes everything it inherited (`gc.freeze`):
  the garbage collector never looks at the parent's objects there (their
  memory stays shared with the parent), only at what the child creates.
- A worker that dies. `multiprocessing.Pool` replaces a worker killed by a
  signal but never completes the batch it was building, and Keras waits for
  that batch without a timeout. Each forked child holds the write end of a
  pipe; when it closes while the child is dead by a signal (other than
  SIGTERM and SIGINT, which stop a pool or a run on purpose), a watcher
  thread fails the batches Keras still waits for with `WorkerDiedError`, so
  `fit` ends with an error naming the process and the signal.

A worker also leaves Ctrl-C to its parent (`leave_interrupts_to_parent`). A
terminal's Ctrl-C signals every process of the foreground group: a worker
that dies of it in the middle of a batch loses that batch, and the parent's
main thread, waiting inside TensorFlow for it, never gets back to Python to
raise its own `KeyboardInterrupt`, so `fit` would hang. The parent stops its
workers when it stops.

Failing those batches reads Keras's registry of its pools
(`remote_keras.keras_lines.worker_pools`) and completes their pending results
(`Pool._cache`, `ApplyResult._set`): the standard library offers no public
way to complete a task whose process died (CPython issue gh-66587), and
Keras none to end its wait.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import select
import signal
import threading
import weakref
from typing import Any

from remote_keras.errors import WorkerDiedError
from remote_keras.keras_lines.worker_pools import keras_worker_pools

logger = logging.getLogger("remote_keras")

# Open iterators (any: a user's own `fork` of one is just as exposed) and those whose Keras
# workers are processes (only then are forked children watched).
_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()
_MULTIPROCESS: weakref.WeakSet[Any] = weakref.WeakSet()
_STOPPING = (signal.SIGTERM, signal.SIGINT)  # a pool's `terminate()`, or Ctrl-C
_interrupts_checked_in = 0  # the process `leave_interrupts_to_parent` last looked at


def track(iterator: Any, multiprocess: bool) -> None:
    """Registers an open iterator; `multiprocess`: its Keras workers are processes."""
    _install()
    _OPEN.add(iterator)
    if multiprocess:
        _MULTIPROCESS.add(iterator)


def open_iterators() -> list[Any]:
    """This process's open iterators (`BackupAndRestore` looks for the ones `fit` reads)."""
    return [it for it in list(_OPEN) if not getattr(it, "closed", False)]


def leave_interrupts_to_parent() -> None:
    """In a pool's worker process, ignores SIGINT (Ctrl-C); elsewhere does nothing.

    Called by an iterator before each batch it reads (once per process does the work).
    """
    global _interrupts_checked_in
    if _interrupts_checked_in == os.getpid():
        return
    _interrupts_checked_in = os.getpid()
    process = multiprocessing.current_process()
    in_pool = "PoolWorker" in process.name or process.name.startswith("Keras_worker")
    if (
        in_pool
        and multiprocessing.parent_process() is not None
        and threading.current_thread() is threading.main_thread()
    ):
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def untrack(iterator: Any) -> None:
    """Forgets a closed iterator."""
    _OPEN.discard(iterator)
    _MULTIPROCESS.discard(iterator)


class _Watcher:
    """Reads the pids of forked children from their pipes and notices their deaths."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[int, int] = {}  # forking thread -> write end, between hooks
        self.children: dict[int, dict[str, Any]] = {}  # read end -> {"pid", "process"}
        self.thread: threading.Thread | None = None
        self.wake_r, self.wake_w = os.pipe()

    # ---------------------------------------------------------------- fork hooks

    def before(self) -> None:
        if not _MULTIPROCESS:
            return
        read, write = os.pipe()
        with self.lock:
            self.pending[threading.get_ident()] = write
            self.children[read] = {"pid": None, "process": None}

    def in_parent(self) -> None:
        with self.lock:
            write = self.pending.pop(threading.get_ident(), None)
        if write is None:
            return
        os.close(write)
        self._start()
        os.write(self.wake_w, b"x")

    def in_child(self) -> None:
        if _OPEN:
            gc.freeze()  # never collect (finalize) what the parent left behind
        mine = self.pending.pop(threading.get_ident(), None)
        for fd in [*self.pending.values(), *self.children, self.wake_r, self.wake_w]:
            _close(fd)
        self.__init__()  # type: ignore[misc]  # the parent's watcher thread is not here
        if mine is not None:
            try:
                os.write(mine, str(os.getpid()).encode() + b"\n")
            except OSError:
                _close(mine)
            # `mine` stays open until this process ends: its end is the parent's news.

    # ---------------------------------------------------------------- watching

    def _start(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(
                target=self._run, name="remote_keras-workers", daemon=True
            )
            self.thread.start()

    def _run(self) -> None:
        while True:
            with self.lock:
                fds = list(self.children)
            if not fds:
                return  # started again by the next fork
            readable, _, _ = select.select([self.wake_r, *fds], [], [], 5.0)
            if self.wake_r in readable:
                os.read(self.wake_r, 4096)
            for fd in readable:
                if fd != self.wake_r:
                    self._read(fd)

    def _read(self, fd: int) -> None:
        child = self.children[fd]
        data = os.read(fd, 64)
        if data:
            child["pid"] = int(data.split(b"\n")[0])
            child["process"] = _process_of(child["pid"])
            return
        with self.lock:
            self.children.pop(fd, None)
        _close(fd)
        process = child["process"]
        if process is None:
            return  # not a multiprocessing process (or already gone): not Keras's
        process.join(5)  # the pipe closes as it exits; its status follows at once
        code = process.exitcode
        if code is not None and code < 0 and -code not in _STOPPING:
            _fail_pending(WorkerDiedError(_message(process, -code)))


def _process_of(pid: int) -> Any:
    # `Process.start()` lists the child just after `fork` returns: look again for a moment.
    for _ in range(50):
        for process in multiprocessing.active_children():
            if process.pid == pid:
                return process if "PoolWorker" in process.name else None
        threading.Event().wait(0.01)
    return None


def _message(process: Any, signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    iterators = ", ".join(repr(it) for it in list(_MULTIPROCESS)) or "an iterator"
    return (
        f"A Keras worker process (pid {process.pid}) reading batches of {iterators} was "
        f"killed by {name} (see its output above, e.g. 'Fatal Python error'). The batch it "
        "was building is lost, so `fit` stops here instead of waiting for it forever. "
        "Run again, or use `use_multiprocessing=False` (threads) on `flow_from_*`."
    )


def _fail_pending(error: WorkerDiedError) -> None:
    """Completes every batch Keras's worker pools still owe with `error`."""
    logger.error("%s", error)
    for pool in keras_worker_pools():
        for result in list(getattr(pool, "_cache", {}).values()):
            try:
                result._set(0, (False, error))
            except (KeyError, AttributeError, TypeError):
                pass  # completed meanwhile, or not an `apply_async` result


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


_watcher: _Watcher | None = None


def _install() -> None:
    global _watcher
    if _watcher is None and hasattr(os, "register_at_fork"):
        _watcher = _Watcher()
        os.register_at_fork(
            before=_watcher.before,
            after_in_parent=_watcher.in_parent,
            after_in_child=_watcher.in_child,
        )
