"""`LakeFSServer`, the lakeFS stand-in; `lakefs_target()`, where lakeFS tests run."""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import secrets
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from typing_extensions import Self

from remote_keras.testing.base import ThreadedHTTPServer
from remote_keras.testing.lakefs import handlers  # noqa: F401 - registers the routes
from remote_keras.testing.lakefs.model import PRESIGN_EXPIRY_S
from remote_keras.testing.lakefs.state import PRESIGNED_PREFIX, State
from remote_keras.testing.lakefs.transport import HTTPServer

ENV_URL = "REMOTE_KERAS_LAKEFS_URL"
ENV_ACCESS_KEY_ID = "REMOTE_KERAS_LAKEFS_ACCESS_KEY_ID"
ENV_SECRET_ACCESS_KEY = "REMOTE_KERAS_LAKEFS_SECRET_ACCESS_KEY"  # noqa: S105 - a variable name
DEFAULT_ACCESS_KEY_ID = "AKIAREMOTEKERASTEST0"


class LakeFSDataServer(ThreadedHTTPServer):
    """The object store behind a presigning stand-in: it serves presigned URLs, nothing else.

    Made by `LakeFSServer(presign=True, data_server=True)`, which starts and stops it with
    itself. It answers `/_presigned/{blob}` (GET, HEAD, and PUT for uploads) on its own port,
    checking the signature and the expiry (an expired URL gets 403, as S3 answers), and no
    lakeFS API route, so requests to it are the reads that bypassed the lakeFS server.

    Attributes:
        requests: `collections.Counter` of requests by route, e.g. `"GET /_presigned/{blob}"`.
        errors: Tracebacks of internal errors (answered as 500).
    """

    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self.requests: collections.Counter[str] = collections.Counter()
        self.errors: list[str] = []
        self.state: State | None = None
        self._count_lock = threading.Lock()

    def count(self, key: str) -> None:
        with self._count_lock:
            self.requests[key] += 1

    def reset(self) -> collections.Counter[str]:
        """Returns the request counts so far and starts counting from zero."""
        with self._count_lock:
            counts, self.requests = self.requests, collections.Counter()
        return counts

    def _make_httpd(self, address: tuple[str, int]) -> HTTPServer:
        if self.state is None:
            raise RuntimeError("LakeFSServer.start() starts its data server")
        return HTTPServer(address, self, self.state, only_prefix=PRESIGNED_PREFIX)


class LakeFSServer(ThreadedHTTPServer):
    """A lakeFS stand-in serving the lakeFS REST API on 127.0.0.1, with HTTP Basic auth.

    It speaks the API subset that `lakefs-spec` and the `lakefs` SDK use, with lakeFS's
    semantics: reads at a branch see staged writes, reads at a commit id, a tag,
    `branch@` or `branch~N` see committed data only. Object data and metadata live in
    its data folder (`blobs/`, `metadata.sqlite3`), so `stop()` then `start()` serves the
    same data on the same port, as does a new `LakeFSServer` on the same folder.

    Args:
        root: Data folder; a temporary folder (removed by `close()`, or on leaving a
            `with` block) when `None`.
        access_key_id: Access key ID to accept (a fixed test key when `None`).
        secret_access_key: Secret to accept (random per instance when `None`).
        presign: Advertise presigned URL support, like an S3-backed lakeFS: reads then
            redirect (302) to `/_presigned/...` on this server and uploads go through
            the staging API. `False` (the default) matches lakeFS's local blockstore.
        port: Port to listen on; `0` picks a free one at the first `start()`.
        data_server: With `presign`, serve the presigned URLs from a separate
            `LakeFSDataServer` (`self.data`) instead of this server, as lakeFS hands out
            URLs of its object store.
        data_port: The data server's port; `0` picks a free one.
        presign_url: Base URL written into presigned URLs instead of the data server's
            (or this server's), e.g. a latency proxy in front of it.
        presign_expiry_s: Lifetime of presigned URLs (`physical_address_expiry`).
        presign_skew_s: Presigned URLs stop working this many seconds before the expiry
            they carry, as with a store whose clock runs ahead of the client's.
        presign_s3_url: With `presign`, the URL of an S3 server without auth that serves
            this server's data folder (`S3Server(root, auth=False)`, bucket `blobs`):
            presigned URLs point there, S3-style. That server checks neither signature
            nor expiry.

    Attributes:
        requests: `collections.Counter` of requests by route, keyed like
            `"GET /api/v1/repositories/{repository}/refs/{ref}/objects"`.
        errors: Tracebacks of internal errors (answered as 500); empty if all is well.
        api: The served state while running (`None` before the first `start()`).

    Example:

    ```python
    with LakeFSServer() as lakefs_server:
        fs = LakeFSFileSystem(**lakefs_server.storage_options)
        lakefs_server.stop()  # an outage: connections are refused ...
        lakefs_server.start()  # ... until it is back, same port, same data
    ```
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        *,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        presign: bool = False,
        port: int = 0,
        data_server: bool = False,
        data_port: int = 0,
        presign_url: str | None = None,
        presign_expiry_s: float = PRESIGN_EXPIRY_S,
        presign_skew_s: float = 0.0,
        presign_s3_url: str | None = None,
    ) -> None:
        super().__init__(port)
        self.data = LakeFSDataServer(data_port) if presign and data_server else None
        self.presign_url = presign_url
        self.presign_expiry_s = presign_expiry_s
        self.presign_skew_s = presign_skew_s
        self.presign_s3_url = presign_s3_url
        self.root = self._data_folder(root, "lakefsroot-")
        self.access_key_id = access_key_id or DEFAULT_ACCESS_KEY_ID
        self.secret_access_key = secret_access_key or secrets.token_urlsafe(30)
        self.presign = presign
        self.requests: collections.Counter[str] = collections.Counter()
        self.errors: list[str] = []
        self.api: State | None = None
        self._loaded: State | None = None
        self._count_lock = threading.Lock()

    @property
    def storage_options(self) -> dict[str, Any]:
        """Keyword arguments of `lakefs_spec.LakeFSFileSystem` that reach this server."""
        return {
            "host": self.endpoint_url,
            "username": self.access_key_id,
            "password": self.secret_access_key,
        }

    def _repr_fields(self) -> dict[str, Any]:
        return {"root": str(self.root)}

    def count(self, key: str) -> None:
        with self._count_lock:
            self.requests[key] += 1

    def reset(self) -> collections.Counter[str]:
        """Returns the request counts so far and starts counting from zero."""
        with self._count_lock:
            counts, self.requests = self.requests, collections.Counter()
        return counts

    def _make_httpd(self, address: tuple[str, int]) -> HTTPServer:
        if self._loaded is None:
            raise RuntimeError("LakeFSServer.start() loads the state first")
        httpd = HTTPServer(address, self, self._loaded)
        self._loaded.endpoint_url = f"http://{address[0]}:{httpd.server_address[1]}"
        return httpd

    def start(self, port: int | None = None, bind_timeout: float = 10.0) -> Self:
        """Starts serving the data folder, on `port` or else the port of the last start.

        Args:
            port: Port to listen on; by default the server's `port` (a free one if 0).
            bind_timeout: Seconds to keep trying while a fixed port is still taken.
        """
        if self.running:
            return self
        state = State(self.root, self.access_key_id, self.secret_access_key, self.presign, "")
        state.presign_expiry_s = self.presign_expiry_s
        state.presign_skew_s = self.presign_skew_s
        state.presign_s3_url = (self.presign_s3_url or "").rstrip("/")
        self._loaded = state  # loaded once, however long binding the port takes
        try:
            if self.data is not None:
                self.data.state = state
                self.data.start(bind_timeout=bind_timeout)
                state.presign_base = self.data.endpoint_url
            state.presign_base = self.presign_url or state.presign_base
            super().start(port, bind_timeout)
        except BaseException:
            if self.data is not None:
                self.data.stop()
            state.close()
            raise
        finally:
            self._loaded = None
        self.api = state
        return self

    def stop(self) -> None:
        """Stops serving (open connections are dropped); the data stays for `start()`."""
        super().stop()
        if self.data is not None:
            self.data.stop()
        if self.api is not None:
            self.api.close()  # waits for a request that holds the state lock


@dataclass(repr=False)
class LakeFSTarget:
    """Where lakeFS tests run: this stand-in (`server` is set) or a real lakeFS.

    Attributes:
        name: `"stand-in"` or `"real"`.
        endpoint_url: The lakeFS URL (no `/api/v1`).
        storage_options: Keyword arguments of `lakefs_spec.LakeFSFileSystem`.
        server: The `LakeFSServer` for the stand-in, `None` for a real lakeFS.
    """

    name: str
    endpoint_url: str
    storage_options: dict[str, Any]
    server: LakeFSServer | None = None

    @property
    def is_stand_in(self) -> bool:
        return self.server is not None

    def __str__(self) -> str:
        return f"target={self.name} ({self.endpoint_url})"

    __repr__ = __str__  # no secrets in test reports


@contextlib.contextmanager
def lakefs_target(**server_kwargs: Any) -> Iterator[LakeFSTarget]:
    """Yields the lakeFS to test against: a real one if configured, else a `LakeFSServer`.

    A real lakeFS is used when `REMOTE_KERAS_LAKEFS_URL` is set; it then also needs
    `REMOTE_KERAS_LAKEFS_ACCESS_KEY_ID` and `REMOTE_KERAS_LAKEFS_SECRET_ACCESS_KEY`.

    Args:
        **server_kwargs: Passed to `LakeFSServer` when the stand-in is used.

    Raises:
        RuntimeError: If the URL is set but a credential variable is missing.
    """
    url = os.environ.get(ENV_URL, "").strip()
    if not url:
        with LakeFSServer(**server_kwargs) as server:
            yield LakeFSTarget("stand-in", server.endpoint_url, server.storage_options, server)
        return
    key, secret = os.environ.get(ENV_ACCESS_KEY_ID), os.environ.get(ENV_SECRET_ACCESS_KEY)
    if not key or not secret:
        raise RuntimeError(
            f"{ENV_URL} is set, so {ENV_ACCESS_KEY_ID} and {ENV_SECRET_ACCESS_KEY} must be too"
        )
    yield LakeFSTarget("real", url, {"host": url, "username": key, "password": secret})


def main(argv: list[str] | None = None) -> None:
    """Serves a stand-in from its own process: prints its storage options as one JSON line.

    `python -m remote_keras.testing.lakefs [--root DIR] [--port N] [--presign]
    [--data-server] [--data-port N] [--presign-url URL] [--presign-expiry S]
    [--presign-s3-url URL]`; the secret
    comes from `REMOTE_KERAS_LAKEFS_SECRET_ACCESS_KEY` if set (so a restarted process
    accepts the same credentials), else it is random. Serves until SIGTERM or SIGINT.
    """
    parser = argparse.ArgumentParser(description="lakeFS stand-in (remote_keras.testing)")
    parser.add_argument("--root", help="data folder (default: a temporary one)")
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument("--presign", action="store_true", help="offer presigned URLs")
    parser.add_argument(
        "--data-server", action="store_true", help="serve presigned URLs on a separate port"
    )
    parser.add_argument("--data-port", type=int, default=0, help="the data server's port")
    parser.add_argument("--presign-url", help="base URL of presigned URLs (e.g. a proxy)")
    parser.add_argument(
        "--presign-expiry", type=float, default=PRESIGN_EXPIRY_S, help="URL lifetime, seconds"
    )
    parser.add_argument("--presign-s3-url", help="an S3 server without auth serving --root")
    args = parser.parse_args(argv)
    server = LakeFSServer(
        args.root,
        access_key_id=os.environ.get(ENV_ACCESS_KEY_ID) or None,
        secret_access_key=os.environ.get(ENV_SECRET_ACCESS_KEY) or None,
        presign=args.presign,
        port=args.port,
        data_server=args.data_server,
        data_port=args.data_port,
        presign_url=args.presign_url,
        presign_expiry_s=args.presign_expiry,
        presign_s3_url=args.presign_s3_url,
    ).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print(json.dumps(server.storage_options), flush=True)
    done.wait()
    server.close()
