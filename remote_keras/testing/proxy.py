"""An HTTP-aware TCP proxy on 127.0.0.1 that counts requests and can add latency.

It parses only request heads and bodies (Content-Length or chunked) on the way
in, so it can count each request and delay it; responses are copied back as
raw bytes. Requests are classified as `GET`, `HEAD`, `PUT`, ... and `LIST`
(an S3 `GET` on a bucket, e.g. `ListObjectsV2`, or lakeFS's `objects/ls`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from urllib.parse import urlsplit

# Requests to this path are answered by the proxy itself with its counts (JSON).
COUNTS_PATH = "/__proxy__/counts"


def request_kind(method: str, target: str) -> str:
    """Classifies a request line; S3 listings count as `LIST`."""
    parts = urlsplit(target)
    s3_listing = "list-type=" in parts.query or parts.path.strip("/").count("/") == 0
    if method == "GET" and (s3_listing or parts.path.endswith("/objects/ls")):  # S3, lakeFS
        return "LIST"
    return method


class CountingProxy:
    """Forwards 127.0.0.1:`port` to `upstream_port`, counting requests.

    Args:
        upstream_port: Port of the server on 127.0.0.1 to forward to.
        delay_s: Seconds to wait before forwarding each request.

    Attributes:
        counts: `collections.Counter` of requests by kind.
    """

    def __init__(self, upstream_port: int, delay_s: float = 0.0) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.counts: Counter[str] = Counter()
        self.port = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> Counter[str]:
        """Returns the counts so far and starts counting from zero."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
        return counts

    def start(self) -> CountingProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def _stop() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(_stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> CountingProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _handle(self, client_reader, client_writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        back = asyncio.create_task(_copy(up_reader, client_writer))
        try:
            while True:
                head = await client_reader.readuntil(b"\r\n\r\n")
                request_line, _, header_block = head.decode("latin-1").partition("\r\n")
                method, target = (request_line.split(" ") + ["", ""])[:2]
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in header_block.split("\r\n"))
                    if k
                }
                if target.startswith(COUNTS_PATH):
                    counts = self.reset() if "reset=1" in target else Counter(self.counts)
                    body = json.dumps(counts).encode()
                    client_writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                    await client_writer.drain()
                    continue
                with self._lock:
                    self.counts[request_kind(method, target)] += 1
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                up_writer.write(head)
                await _forward_body(client_reader, up_writer, headers)
                await up_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            back.cancel()
        finally:
            up_writer.close()
            await asyncio.gather(back, return_exceptions=True)
            client_writer.close()


async def _forward_body(reader, writer, headers: dict[str, str]) -> None:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readuntil(b"\r\n")
            writer.write(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    line = await reader.readuntil(b"\r\n")
                    writer.write(line)
                    if line == b"\r\n":
                        return
            writer.write(await reader.readexactly(size + 2))
            await writer.drain()
    remaining = int(headers.get("content-length", "0") or 0)
    while remaining:
        chunk = await reader.read(min(remaining, 1 << 16))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", remaining)
        writer.write(chunk)
        remaining -= len(chunk)
        await writer.drain()


async def _copy(reader, writer) -> None:
    try:
        while chunk := await reader.read(1 << 16):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


class ProxyProcess:
    """A `CountingProxy` in its own process, so its CPU is not the client's.

    Args:
        upstream_port: Port of the server on 127.0.0.1 to forward to.
        delay_s: Seconds to wait before forwarding each request.
    """

    def __init__(self, upstream_port: int, delay_s: float = 0.0) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.port = 0
        self._process: subprocess.Popen | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ProxyProcess:
        command = [sys.executable, __file__, "--upstream-port", str(self.upstream_port),
                   "--delay-ms", str(self.delay_s * 1000)]  # fmt: skip
        self._process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.port = int(self._process.stdout.readline())
        return self

    def counts(self, reset: bool = False) -> Counter[str]:
        """Returns the requests counted so far (and restarts from zero if `reset`)."""
        url = self.endpoint_url + COUNTS_PATH + ("?reset=1" if reset else "")
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - 127.0.0.1
            return Counter(json.load(response))

    def reset(self) -> Counter[str]:
        return self.counts(reset=True)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
            self._process.stdout.close()
            self._process = None

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Counting, latency-adding HTTP proxy")
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    proxy = CountingProxy(args.upstream_port, args.delay_ms / 1000).start()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # connections die with the process
    print(proxy.port, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
