"""Files of a folder served over HTTP on 127.0.0.1, from a daemon thread."""

from __future__ import annotations

import functools
import os
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class StaticHTTPServer:
    """Serves `root` at `http://127.0.0.1:<port>/`.

    Args:
        root: Folder to serve.
    """

    def __init__(self, root: str | os.PathLike) -> None:
        handler = functools.partial(_QuietHandler, directory=os.fspath(root))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> StaticHTTPServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
