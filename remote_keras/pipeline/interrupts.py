"""Ctrl-C seen by the package's waiting threads at once, not when Python's main thread next runs.

Python runs its SIGINT handler (`KeyboardInterrupt`) in the main thread, between
bytecodes. While TensorFlow's main thread waits in C++ for the next element of
a dataset, it runs none: if that element waits on requests that stall, Ctrl-C
does nothing until they give up. `watch()` asks Python to also write each
signal's number to a socket (`signal.set_wakeup_fd`, which its C-level handler
does at once, from any thread), read by a daemon thread; a thread of the
package waiting on requests (`wait`) then stops waiting, so the main thread
gets back to Python, where its `KeyboardInterrupt` is raised.

It is used only where nobody else does this: when the SIGINT handler is
Python's own and no wakeup descriptor is set (asyncio's event loops and
frameworks set their own; then Ctrl-C behaves as without the package).
"""

from __future__ import annotations

import signal
import socket
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

POLL_S = 0.2  # how often a wait looks for Ctrl-C

_lock = threading.Lock()
_watching = False
_interrupts = 0


def watch() -> bool:
    """From the main thread: lets `wait` see Ctrl-C at once. Returns whether it can.

    Returns:
        True if Ctrl-C is watched (now or already); False outside the main
        thread, when SIGINT has a handler of its own, or when another
        wakeup descriptor is set.
    """
    global _watching
    with _lock:
        if _watching:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return False
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            reader.close()
            writer.close()
            return False
        if previous != -1:  # someone else's: put it back and leave Ctrl-C to them
            signal.set_wakeup_fd(previous)
            reader.close()
            writer.close()
            return False
        thread = threading.Thread(
            target=_drain, args=(reader, writer), name="remote_keras-interrupts", daemon=True
        )
        thread.start()
        _watching = True
        return True


def _drain(reader: socket.socket, writer: socket.socket) -> None:
    """Counts the SIGINTs written to the wakeup socket (`writer` is kept open with it)."""
    global _interrupts
    while True:
        try:
            data = reader.recv(64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            with _lock:
                _interrupts += data.count(signal.SIGINT)


def count() -> int:
    """Ctrl-Cs seen so far (pass it to `wait` as `since`)."""
    with _lock:
        return _interrupts


def wait(future: Future, since: int) -> Any:
    """`future.result()`, or `Interrupted` if Ctrl-C comes after `count()` was `since`.

    Raises:
        Interrupted: Ctrl-C was pressed while waiting (the main thread raises
            its `KeyboardInterrupt` once it runs Python again).
    """
    while True:
        try:
            return future.result(timeout=POLL_S)
        except FutureTimeout:
            if count() != since:
                raise Interrupted from None


class Interrupted(Exception):
    """A wait of the package's stopped because Ctrl-C was pressed."""
