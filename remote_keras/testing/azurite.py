"""A real Azure Blob Storage emulator on 127.0.0.1: Microsoft's Azurite (`azurite-blob`).

Azurite comes from the npm registry; `.ci/run` installs it into `.venv/azurite`
(`npm install --prefix .venv/azurite azurite`), where `azurite_binary()` finds it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from typing_extensions import Self

from remote_keras.testing.base import HOST, LocalServer, free_port, log_tail, spawn, terminate

__all__ = ["ACCOUNT_NAME", "AzuriteServer", "azurite_binary"]

# Azurite's one built-in account and its well-known key (published in Azurite's docs).
ACCOUNT_NAME = "devstoreaccount1"
_ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def azurite_binary() -> str:
    """Returns the path of `azurite-blob`: `$AZURITE_BLOB`, beside the venv, or on `PATH`."""
    candidates = [
        os.environ.get("AZURITE_BLOB", ""),
        str(Path(sys.prefix) / "azurite" / "node_modules" / ".bin" / "azurite-blob"),
        shutil.which("azurite-blob") or "",
    ]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    raise FileNotFoundError(
        "azurite-blob not found: npm install --prefix .venv/azurite azurite (what .ci/run does)"
    )


class AzuriteServer(LocalServer):
    """Azurite's Blob service on 127.0.0.1 over a folder, with shared-key auth, no telemetry.

    `stop()` keeps the folder, so `start()` serves the same containers on the same port.

    Args:
        root: Azurite's workspace folder; a temporary folder (removed by `close()`) when `None`.
        containers: Containers to create at start.
        port: Port to listen on; `0` picks a free one at the first `start()`.

    Example:

    ```python
    with AzuriteServer(containers=["data"]) as azure:
        fs = adlfs.AzureBlobFileSystem(**azure.storage_options)
    ```
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        containers: tuple[str, ...] = (),
        *,
        port: int = 0,
    ) -> None:
        super().__init__(port)
        self.root = self._data_folder(root, "azurite-")
        self.containers = tuple(containers)
        self.account_name = ACCOUNT_NAME
        self.account_key = _ACCOUNT_KEY
        self._process: subprocess.Popen | None = None

    @property
    def blob_endpoint(self) -> str:
        """The account's Blob endpoint (path-style: the account is the first path segment)."""
        return f"{self.endpoint_url}/{self.account_name}"

    def connection_string(self, endpoint_url: str | None = None, key: str | None = None) -> str:
        """A connection string for this account, optionally via another endpoint or key."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account_name};"
            f"AccountKey={key or self.account_key};"
            f"BlobEndpoint={endpoint_url or self.endpoint_url}/{self.account_name};"
        )

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for `adlfs` (and `loader="obstore"`) that reach this server."""
        return {"connection_string": self.connection_string()}

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _repr_fields(self) -> dict[str, Any]:
        return {"root": str(self.root)}

    def start(self, timeout: float = 60.0) -> Self:
        """Starts Azurite (on the port of the last start, if any), then creates the containers."""
        if self.running:
            return self
        self.port = self.port or free_port()
        command = [
            azurite_binary(), "--blobHost", HOST, "--blobPort", str(self.port),
            "--location", str(self.root), "--disableTelemetry", "--silent",
            "--skipApiVersionCheck", "--loose",
        ]  # fmt: skip
        process = self._process = spawn(command)
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                err = log_tail(process)
                self.stop()
                raise RuntimeError(f"azurite-blob exited: {err}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"azurite did not listen on {self.endpoint_url}") from None
                time.sleep(0.1)
        self._create_containers()
        return self

    def _create_containers(self) -> None:
        if not self.containers:
            return
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(self.connection_string())
        with service:
            for container in self.containers:
                try:
                    service.create_container(container)
                except ResourceExistsError:
                    pass

    def stop(self) -> None:
        """Stops Azurite; the folder stays until `close()`."""
        if self._process is not None:
            terminate(self._process)
            self._process = None
