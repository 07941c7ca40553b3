"""Files of a folder served over HTTP on 127.0.0.1, from a daemon thread."""

from __future__ import annotations

import functools
import os
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any

from remote_keras.testing.base import ThreadedHTTPServer, TrackingHTTPServer


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class StaticHTTPServer(ThreadedHTTPServer):
    """Serves `root` at `http://127.0.0.1:<port>/`.

    Args:
        root: Folder to serve.
        port: Port to listen on; `0` picks a free one at the first `start()`.
    """

    def __init__(self, root: str | os.PathLike, *, port: int = 0) -> None:
        super().__init__(port)
        self.root = Path(root)

    @property
    def url(self) -> str:
        """The same as `endpoint_url`."""
        return self.endpoint_url

    def _repr_fields(self) -> dict[str, Any]:
        return {"root": str(self.root)}

    def _make_httpd(self, address: tuple[str, int]) -> TrackingHTTPServer:
        handler = functools.partial(_QuietHandler, directory=os.fspath(self.root))
        return TrackingHTTPServer(address, handler)
