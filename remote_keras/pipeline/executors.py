"""Executors for the dataset function's reads: daemon threads that leave when idle, or none.

`DaemonExecutor` backs `image_dataset_from_directory`'s reads. Its threads are
daemons, so a request that stalls never holds up the interpreter's exit after
Ctrl-C, and a thread with no work for `prefetch.IDLE_RELEASE_S` seconds exits (the
next task starts one again). A pass abandoned without being closed, for
example a dataset iterator that an exception's traceback keeps alive in a
notebook, so holds no threads for long.

`InlineExecutor` runs each task in the thread that submits it.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Executor, Future
from typing import Any

from remote_keras.pipeline import prefetch

_IDLE = object()  # a wait for work that timed out


class DaemonExecutor(Executor):
    """A thread pool of daemon threads, started as work needs them and ended when idle.

    `ThreadPoolExecutor`'s threads are joined when the interpreter exits, so a
    request that stalls (or a retry waiting for its deadline) would hold up the
    exit after Ctrl-C for minutes; these never do.

    Args:
        workers: The most threads.
        name: Their names' prefix.
        idle_s: Seconds a thread waits for work before it exits (default:
            `IDLE_RELEASE_S`, as the iterators' pools).
    """

    def __init__(self, workers: int, name: str, idle_s: float | None = None) -> None:
        self._workers, self._name = max(1, workers), name
        self._idle_s = prefetch.IDLE_RELEASE_S if idle_s is None else idle_s
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._waiting = 0  # threads waiting for a task (counted under the lock)
        self._started = 0
        self._shutdown = False

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.put((future, fn, args, kwargs))
            # Every queued task has a thread waiting for it, or one more starts (up to `workers`);
            # a busy thread takes the rest when its task ends.
            if self._queue.qsize() > self._waiting and len(self._threads) < self._workers:
                thread = threading.Thread(
                    target=self._run, name=f"{self._name}_{self._started}", daemon=True
                )
                self._started += 1
                self._threads.add(thread)
                thread.start()
        return future

    def _run(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            try:
                item = self._queue.get(timeout=self._idle_s)
            except queue.Empty:
                item = _IDLE
            with self._lock:
                self._waiting -= 1
                # A task queued after the wait timed out is taken, never left without a thread.
                if item is None or (item is _IDLE and self._queue.empty()):
                    self._threads.discard(threading.current_thread())
                    return
            if item is _IDLE:
                continue
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # handed to whoever waits, as in Executor
                    future.set_exception(exc)
            del item, future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stops the threads once their task ends; `cancel_futures` drops queued work."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                thread.join()


class InlineExecutor(Executor):
    """Runs each task in the thread that submits it: for callers that are pool threads already.

    grain's read threads each fetch one file: a pool of their own would only add
    a thread hop per file, and threads to shut down. A request's time is then
    bounded by the loader's client timeout alone.
    """

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to whoever waits, as in Executor
            future.set_exception(exc)
        return future
