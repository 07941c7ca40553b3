"""Files of a folder served over HTTP on 127.0.0.1, from a daemon thread."""

from __future__ import annotations

import base64
import functools
import hashlib
import os
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any

from remote_keras.testing.base import ThreadedHTTPServer, TrackingHTTPServer


class _QuietHandler(SimpleHTTPRequestHandler):
    content_md5 = False

    def log_message(self, format: str, *args: object) -> None:
        pass

    def end_headers(self) -> None:
        if self.content_md5 and self.command in ("GET", "HEAD"):
            path = self.translate_path(self.path)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    digest = hashlib.md5(f.read(), usedforsecurity=False).digest()
                self.send_header("Content-MD5", base64.b64encode(digest).decode())
        super().end_headers()


class _MD5Handler(_QuietHandler):
    content_md5 = True


class StaticHTTPServer(ThreadedHTTPServer):
    """Serves `root` at `http://127.0.0.1:<port>/`.

    Args:
        root: Folder to serve.
        port: Port to listen on; `0` picks a free one at the first `start()`.
        content_md5: Send each file's MD5 as `Content-MD5` (base64), as some
            servers do; off by default, as on most.
    """

    def __init__(
        self, root: str | os.PathLike, *, port: int = 0, content_md5: bool = False
    ) -> None:
        super().__init__(port)
        self.root = Path(root)
        self.content_md5 = content_md5

    @property
    def url(self) -> str:
        """The same as `endpoint_url`."""
        return self.endpoint_url

    def _repr_fields(self) -> dict[str, Any]:
        return {"root": str(self.root), "content_md5": self.content_md5}

    def _make_httpd(self, address: tuple[str, int]) -> TrackingHTTPServer:
        kind = _MD5Handler if self.content_md5 else _QuietHandler
        handler = functools.partial(kind, directory=os.fspath(self.root))
        return TrackingHTTPServer(address, handler)
