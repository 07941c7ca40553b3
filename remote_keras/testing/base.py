"""What the local servers share: a port on 127.0.0.1, start / stop, and a context manager.

`LocalServer` is the base of `S3Server`, `StaticHTTPServer`, `LakeFSServer`,
`CountingProxy` and `ProxyProcess`. `ThreadedHTTPServer` adds an HTTP server on a daemon
thread of this process that can stop and start again on the same port (for outage tests):
`stop()` closes the listening socket and drops every open connection, as a server whose
process died would; `start()` listens on the same port again.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from typing_extensions import Self

HOST = "127.0.0.1"


def free_port() -> int:
    """Returns a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class LoggedProcess(subprocess.Popen):
    """A server process whose log (stderr) goes to a temporary file, `log`."""

    log: Any = None


def spawn(command: list[str]) -> LoggedProcess:
    """Starts a server process whose log (stderr) goes to a temporary file.

    Never to a pipe: nobody reads it while the server runs, and once 64 KiB of
    log lines (a broken-pipe error per dropped client, in fault tests) fill a
    pipe, the server blocks at its next log line, mid-request.
    """
    log = tempfile.TemporaryFile()
    process = LoggedProcess(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log
    )
    process.log = log
    return process


def log_tail(process: subprocess.Popen, limit: int = 2000) -> str:
    """The last `limit` bytes a process started by `spawn` logged, decoded."""
    log = getattr(process, "log", None)
    if log is None or log.closed:
        return ""
    log.seek(max(0, os.fstat(log.fileno()).st_size - limit))
    return log.read().decode(errors="replace")


def terminate(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """Terminates a child process (killing it if it lingers) and closes its pipes and log."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for stream in (process.stdin, process.stdout, process.stderr, getattr(process, "log", None)):
        if stream is not None:
            stream.close()


class LocalServer:
    """A server on 127.0.0.1: `start()`, `stop()`, `with` (start, then `close()`).

    `stop()` stops serving and keeps the server's data, so `start()` can serve it again
    on the same port; `close()` also removes a temporary data folder the server made.
    The `repr` shows where it listens, never its credentials.

    Args:
        port: Port to listen on; `0` picks a free one at the first `start()`.
    """

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self._remove_root: Callable[[], object] = lambda: None

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        raise NotImplementedError

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def restart(self) -> Self:
        """Stops and starts again, on the same port."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stops, and removes the temporary data folder if the server made one."""
        self.stop()
        self._remove_root()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _repr_fields(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        fields = {"endpoint_url": self.endpoint_url, **self._repr_fields()}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in fields.items())})"

    def _data_folder(self, root: str | os.PathLike | None, prefix: str) -> Path:
        """`root`, or a new temporary folder that `close()` (or garbage collection) removes."""
        if root is not None:
            return Path(root)
        path = Path(tempfile.mkdtemp(prefix=prefix))
        self._remove_root = weakref.finalize(self, shutil.rmtree, path, True)
        return path


class TrackingHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that knows its open connections, to drop them on stop."""

    daemon_threads = True
    request_queue_size = 1024  # a loader's 128 threads may connect at once (see proxy.py)

    def __init__(self, address: tuple[str, int], handler: Callable[..., Any]) -> None:
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Shuts every open connection down; clients see a reset or an early end."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a dropped connection is no news
            super().handle_error(request, client_address)


class ThreadedHTTPServer(LocalServer):
    """A `LocalServer` whose HTTP server runs on a daemon thread of this process."""

    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self._httpd: TrackingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def _make_httpd(self, address: tuple[str, int]) -> TrackingHTTPServer:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def start(self, port: int | None = None, bind_timeout: float = 10.0) -> Self:
        """Starts serving, on `port` or else on the port of the last start (if any).

        Args:
            port: Port to listen on; by default the server's `port` (a free one if 0).
            bind_timeout: Seconds to keep trying while a fixed port is still taken.
        """
        if self._httpd is not None:
            return self
        port = self.port if port is None else port
        deadline = time.monotonic() + bind_timeout
        while True:
            try:
                httpd = self._make_httpd((HOST, port))
                break
            except OSError as error:  # e.g. a client's ephemeral port took it for a moment
                if port == 0 or error.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self._httpd, self.port = httpd, httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops listening and drops open connections; the port is free until `start()`."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            httpd.drop_connections()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
