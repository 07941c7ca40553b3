"""An HTTP-aware TCP proxy on 127.0.0.1 that counts requests, can add latency and faults.

It parses only request heads and bodies (Content-Length or chunked) on the way
in, so it can count each request and delay it; responses are copied back as
raw bytes. Requests are classified as `GET`, `HEAD`, `PUT`, ... and `LIST`
(an S3 `GET` on a bucket, e.g. `ListObjectsV2`, or lakeFS's `objects/ls`).

With a `FaultPlan` it also injects faults into some requests, drawn from a seeded
random generator in request-arrival order: S3-style error statuses, connection
resets before or during the response, truncated bodies and stalls, or silent
corruption: a few bytes flipped in the middle of a body (same status, same length).

Magic paths, answered by the proxy itself (never forwarded, counted or faulted):

- `GET /__proxy__/counts[?reset=1]`: the counts so far as JSON, injected faults
  under keys `fault:<kind>`; `reset=1` restarts both from zero.
- `GET /__proxy__/faults`: the fault plan as JSON (`null` when none).
- `POST /__proxy__/faults` with a JSON body (`FaultPlan` fields, or `null`): replaces
  the fault plan, as `CountingProxy.set_faults` does; answers the new plan (400 if invalid).
- `POST /__proxy__/outage` with a JSON body `{"seconds": 10}`: an outage, as
  `CountingProxy.outage` does; answered (`{"seconds": 10}`, 400 if invalid) once the
  proxy is down, then that connection closes too.

Outages (`CountingProxy.outage(seconds)`, `ProxyProcess.outage(seconds)`, or the magic
path) stand in for a server restart: the proxy closes its listening socket, so new
connections are refused (`ECONNREFUSED`), and resets (RST) every open connection, so
requests in flight and pooled keep-alive connections fail with a reset. After `seconds`
it listens again on the same port; counts and the fault plan carry on. During an outage
the magic paths cannot be reached either. A new outage while one lasts extends it.

As a program: `python -m remote_keras.testing.proxy --upstream-port N [--delay-ms MS]
[--faults JSON]` prints its port, then serves until terminated (this is how `ProxyProcess`
runs it).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

from typing_extensions import Self

from remote_keras.testing.base import LocalServer, terminate

# Requests to this path are answered by the proxy itself with its counts (JSON).
COUNTS_PATH = "/__proxy__/counts"
# Requests to this path read (GET) or replace (POST, JSON body) the fault plan.
FAULTS_PATH = "/__proxy__/faults"
# A POST to this path (JSON body `{"seconds": N}`) takes the proxy down for N seconds.
OUTAGE_PATH = "/__proxy__/outage"

# Faults that make a request fail; and those that corrupt its answer without failing it.
# Connections the kernel queues for `accept`. asyncio's default, 100, is less than a loader's
# 128 request threads: when they all reconnect at once after an outage while this loop is
# starved of the GIL, the kernel drops the SYNs past the queue and clients resend them after 1,
# 3, 7, 15 s... (CI once saw 26 s to recover from a 10 s outage on lakeFS). Stores queue more.
LISTEN_BACKLOG = 1024
FAULT_KINDS = ("503", "500", "429", "reset-before", "reset-mid-body", "truncate", "stall")
CORRUPTION_KINDS = ("flip",)
# kind -> (reason phrase, S3 error code, message)
_STATUS_FAULTS = {
    "503": ("Slow Down", "SlowDown", "Please reduce your request rate."),
    "500": ("Internal Server Error", "InternalError", "We encountered an internal error."),
    "429": ("Too Many Requests", "TooManyRequests", "Please reduce your request rate."),
}
_CLOSE = "Connection: close\r\n"
_LAKEFS_API = "/api/v1/"
# lakeFS object reads (refs) and writes/deletes (branches); `?path=` names the object.
_LAKEFS_OBJECT = re.compile(r"^/api/v1/repositories/[^/]+/(refs|branches)/[^/]+/objects$")


def request_kind(method: str, target: str) -> str:
    """Classifies a request line; S3 listings count as `LIST`."""
    parts = urlsplit(target)
    s3_listing = "list-type=" in parts.query or parts.path.strip("/").count("/") == 0
    if method == "GET" and (s3_listing or parts.path.endswith("/objects/ls")):  # S3, lakeFS
        return "LIST"
    return method


def is_object_request(method: str, target: str) -> bool:
    """Whether a request is about one object's data, not a listing or other API call.

    S3: any request on `/bucket/key` except listings. lakeFS: `.../refs/{ref}/objects`
    and `.../branches/{branch}/objects` (`?path=...`); every other `/api/v1/` call is not.
    """
    path = urlsplit(target).path
    if path.startswith(_LAKEFS_API):
        return bool(_LAKEFS_OBJECT.match(path))
    return request_kind(method, target) != "LIST" and path.strip("/").count("/") >= 1


@dataclasses.dataclass(frozen=True)
class FaultPlan:
    """Which requests the proxy breaks, and how.

    Args:
        rate: Probability (0..1) that an eligible request gets a fault.
        seed: Seed of the generator that draws the decisions, in request-arrival order;
            each eligible request takes one draw (and one more for the kind if faulted),
            so the same requests in the same order meet the same faults.
        kinds: Faults to choose from (uniformly), a subset of `FAULT_KINDS` and
            `CORRUPTION_KINDS`:
            `"503"`, `"500"`, `"429"`: an error response (S3-style XML, or lakeFS-style
            JSON on `/api/v1/`) with `Connection: close`, then the connection closes.
            `"reset-before"`: the connection is reset (RST) before anything is forwarded.
            `"reset-mid-body"`: the request is forwarded, the response head and half its
            body are relayed, then the connection is reset.
            `"truncate"`: like `"reset-mid-body"`, but the connection is closed cleanly
            (FIN), so the body ends short of its `Content-Length`.
            `"stall"`: nothing is forwarded or answered for `stall_s`, then it closes.
            Where a response has no body to cut, the cutting kinds cut its head instead.
            `"flip"`: the request is forwarded and the whole response relayed with
            `flip_bytes` bytes in the middle of its body changed (see `flip_middle`),
            same status, headers and length, plus `Connection: close`, then the
            connection closes. Bodies without `Content-Length` (chunked, or ended by
            closing), and answers other than 200 and 206, are relayed unchanged.
        methods: Only requests with these methods are eligible.
        only_objects: Only object requests are eligible (see `is_object_request`): never
            S3 listings or bucket calls, never lakeFS API calls other than objects.
        max_faults_per_key: Fault one request target (path and query) at most this many
            times, so that retries eventually succeed; `None` for no limit.
        stall_s: Seconds a `"stall"` holds the request.
        retry_after_s: If set, `"503"` and `"429"` responses carry `Retry-After`.
        targets: If not empty, only requests whose target (path and query) contains
            one of these strings are eligible, e.g. one object's key.
        flip_bytes: Bytes a `"flip"` changes.
    """

    rate: float
    seed: int = 0
    kinds: tuple[str, ...] = ("503",)
    methods: tuple[str, ...] = ("GET",)
    only_objects: bool = True
    max_faults_per_key: int | None = None
    stall_s: float = 30.0
    retry_after_s: int | None = None
    targets: tuple[str, ...] = ()
    flip_bytes: int = 3

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", tuple(self.kinds))
        object.__setattr__(self, "methods", tuple(m.upper() for m in self.methods))
        object.__setattr__(self, "targets", tuple(self.targets))
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], got {self.rate}")
        known = FAULT_KINDS + CORRUPTION_KINDS
        unknown = set(self.kinds) - set(known)
        if unknown or not self.kinds:
            raise ValueError(f"kinds must be a non-empty subset of {known}: {self.kinds}")
        if self.flip_bytes < 1:
            raise ValueError(f"flip_bytes must be >= 1, got {self.flip_bytes}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> FaultPlan | None:
        """Parses `to_json`'s output (or `null`, giving `None`)."""
        fields = json.loads(text)
        return None if fields is None else cls(**fields)


class CountingProxy(LocalServer):
    """Forwards 127.0.0.1:`port` to `upstream_port`, counting requests.

    Args:
        upstream_port: Port of the server on 127.0.0.1 to forward to.
        delay_s: Seconds to wait before forwarding each request.
        faults: Faults to inject, or `None` for a faithful proxy.

    Attributes:
        counts: `collections.Counter` of requests by kind (faulted ones included).
        faults_injected: `collections.Counter` of injected faults by kind.
        outages: `(start, end)` of each outage so far, in `time.monotonic()` seconds;
            `end` is `None` while it lasts.
    """

    def __init__(
        self, upstream_port: int, delay_s: float = 0.0, faults: FaultPlan | None = None
    ) -> None:
        super().__init__()
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.counts: Counter[str] = Counter()
        self.faults_injected: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._clients: set[asyncio.StreamWriter] = set()
        self._returning: asyncio.Task | None = None
        self._up_at = 0.0  # loop time the current outage ends
        self.outages: list[tuple[float, float | None]] = []
        self.set_faults(faults)

    def _repr_fields(self) -> dict[str, Any]:
        return {"upstream_port": self.upstream_port, "delay_s": self.delay_s}

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def faults(self) -> FaultPlan | None:
        return self._faults

    def set_faults(self, plan: FaultPlan | None) -> None:
        """Replaces the fault plan, restarting its generator and per-target limits."""
        with self._lock:
            self._faults = plan
            self._rng = random.Random(plan.seed if plan else 0)  # noqa: S311 - not crypto
            self._faults_per_key: Counter[str] = Counter()

    def reset(self) -> Counter[str]:
        """Returns the counts so far (and faults as `fault:<kind>`) and restarts from zero."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
            faults, self.faults_injected = self.faults_injected, Counter()
        return counts + Counter({f"fault:{k}": n for k, n in faults.items()})

    @property
    def is_down(self) -> bool:
        """Whether an outage is under way (the port refuses connections)."""
        return self._server is None and self._thread.is_alive()

    def outage(self, seconds: float) -> None:
        """Stops serving for `seconds`, then listens again on the same port.

        New connections are refused and open ones are reset; returns once the proxy
        is down. An outage while one lasts extends it to end `seconds` from now at
        the earliest.

        Args:
            seconds: How long the port stays closed.
        """
        if not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        asyncio.run_coroutine_threadsafe(self._go_down(seconds), self._loop).result(10)

    def start(self) -> Self:
        """Starts the proxy (once: a stopped proxy does not start again; see `outage`)."""
        if self._thread.is_alive():
            return self
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, backlog=LISTEN_BACKLOG
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _go_down(self, seconds: float, keep: asyncio.StreamWriter | None = None) -> None:
        """Closes the listening socket and resets every client connection but `keep`."""
        loop = asyncio.get_running_loop()
        self._up_at = max(self._up_at, loop.time() + seconds)
        if self._server is not None:
            self._server.close()
            self._server = None
            self.outages.append((time.monotonic(), None))
        for writer in list(self._clients):
            if writer is not keep:
                _reset(writer)
        if self._returning is None or self._returning.done():
            self._returning = self._track(self._come_back())

    async def _come_back(self) -> None:
        """Listens on the same port again once the outage is over."""
        loop = asyncio.get_running_loop()
        while self._server is None:
            wait = self._up_at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                await self._start()
            except OSError:  # e.g. an outgoing connection's ephemeral port, for a moment
                await asyncio.sleep(0.05)
        start, _ = self.outages[-1]
        self.outages[-1] = (start, time.monotonic())

    def _track(self, coroutine) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

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

    def _draw_fault(self, method: str, target: str) -> str | None:
        """Decides (under the lock) whether this request gets a fault, and which."""
        plan = self._faults
        if plan is None or method not in plan.methods:
            return None
        if plan.only_objects and not is_object_request(method, target):
            return None
        if plan.targets and not any(wanted in target for wanted in plan.targets):
            return None
        if self._rng.random() >= plan.rate:
            return None
        kind = self._rng.choice(plan.kinds)
        if plan.max_faults_per_key is not None:
            if self._faults_per_key[target] >= plan.max_faults_per_key:
                return None
            self._faults_per_key[target] += 1
        self.faults_injected[kind] += 1
        return kind

    async def _handle(self, client_reader, client_writer) -> None:
        # The loop holds tasks weakly; once the client's connection is lost, nothing else
        # would hold this one, which may still be finishing (and be garbage-collected).
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if self._server is None:  # accepted just before an outage, handled after it began
            _reset(client_writer)
            return
        self._clients.add(client_writer)
        try:
            await self._serve(client_reader, client_writer)
        finally:
            self._clients.discard(client_writer)

    async def _serve(self, client_reader, client_writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        back = asyncio.create_task(_copy(up_reader, client_writer))
        try:
            while True:
                head = await client_reader.readuntil(b"\r\n\r\n")
                request_line, headers = _parse_head(head)
                method, target = (request_line.split(" ") + ["", ""])[:2]
                if target.startswith(OUTAGE_PATH):
                    body = await _read_body(client_reader, headers)
                    await self._answer_outage(method, body, client_writer)
                    return
                if target.startswith((COUNTS_PATH, FAULTS_PATH)):
                    body = await _read_body(client_reader, headers)
                    client_writer.write(self._answer_magic(method, target, body))
                    await client_writer.drain()
                    continue
                with self._lock:
                    self.counts[request_kind(method, target)] += 1
                    fault = self._draw_fault(method, target)
                    plan = self._faults
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                if fault is not None and plan is not None:
                    await self._inject(fault, plan, head, headers, client_reader, client_writer)
                    return
                up_writer.write(head)
                await _forward_body(client_reader, up_writer, headers)
                await up_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            back.cancel()
        finally:
            up_writer.close()
            try:
                await asyncio.gather(back, return_exceptions=True)
            except asyncio.CancelledError:  # stopped meanwhile: a handler must not end cancelled
                back.cancel()
            client_writer.close()

    async def _answer_outage(self, method: str, body: bytes, writer: asyncio.StreamWriter) -> None:
        """Goes down as a POST on `OUTAGE_PATH` asks, then answers it and closes."""
        try:
            if method != "POST":
                raise ValueError(f"{OUTAGE_PATH} takes a POST, not a {method}")
            seconds = json.loads(body.decode() or "null")["seconds"]
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
                raise ValueError(f"seconds must be a number >= 0, got {seconds!r}")
        except (ValueError, TypeError, KeyError) as error:
            answer = _response(400, "Bad Request", json.dumps(str(error)).encode(), _CLOSE)
        else:
            await self._go_down(seconds, keep=writer)
            answer = _response(200, "OK", json.dumps({"seconds": seconds}).encode(), _CLOSE)
        writer.write(answer)
        await writer.drain()  # the caller closes the connection

    def _answer_magic(self, method: str, target: str, body: bytes) -> bytes:
        """The response to a request on `COUNTS_PATH` or `FAULTS_PATH`."""
        if target.startswith(COUNTS_PATH):
            if "reset=1" in target:
                return _response(200, "OK", json.dumps(self.reset()).encode())
            with self._lock:
                counts = self.counts + Counter(
                    {f"fault:{k}": n for k, n in self.faults_injected.items()}
                )
            return _response(200, "OK", json.dumps(counts).encode())
        if method == "POST":
            try:
                self.set_faults(FaultPlan.from_json(body.decode() or "null"))
            except (ValueError, TypeError) as error:
                return _response(400, "Bad Request", json.dumps(str(error)).encode())
        plan = self._faults
        return _response(200, "OK", plan.to_json().encode() if plan else b"null")

    async def _inject(
        self,
        fault: str,
        plan: FaultPlan,
        head: bytes,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Answers one request with `fault`; the client connection is finished after it."""
        if fault in _STATUS_FAULTS:
            if "100-continue" not in headers.get("expect", "").lower():
                await _read_body(reader, headers)
            method, target = head.decode("latin-1").split(" ", 2)[:2]
            response = _fault_response(fault, target, plan.retry_after_s)
            if method == "HEAD":  # the same head, without the body
                response = response[: response.index(b"\r\n\r\n") + 4]
            writer.write(response)
            await writer.drain()
            await _lingering_close(reader, writer)
        elif fault == "reset-before":
            _reset(writer)
        elif fault == "stall":
            await asyncio.sleep(plan.stall_s)
        else:  # reset-mid-body, truncate, flip: a fresh upstream connection for this response
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            verb = head.split(b" ", 1)[0]
            try:
                up_writer.write(head)
                await _forward_body(reader, up_writer, headers)
                await up_writer.drain()
                if fault == "flip":
                    writer.write(await _flipped_response(up_reader, verb, plan.flip_bytes))
                else:
                    writer.write(await _cut_response(up_reader, verb))
                await writer.drain()
            finally:
                up_writer.close()
            if fault == "flip":
                await _lingering_close(reader, writer)
            if fault == "reset-mid-body":
                while writer.transport.get_write_buffer_size():
                    await asyncio.sleep(0.001)
                await asyncio.sleep(0.05)  # let the client read what was sent, then reset
                _reset(writer)


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    """Splits a request or response head into its first line and lower-cased headers."""
    first_line, _, header_block = head.decode("latin-1").partition("\r\n")
    headers = {
        k.strip().lower(): v.strip()
        for k, _, v in (line.partition(":") for line in header_block.split("\r\n"))
        if k
    }
    return first_line, headers


def _response(
    status: int, reason: str, body: bytes, extra: str = "", content_type: str = "application/json"
) -> bytes:
    """A complete HTTP/1.1 response; `extra` holds more header lines, each ending in CRLF."""
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def _fault_response(kind: str, target: str, retry_after_s: int | None) -> bytes:
    """A well-formed error response: S3-style XML, or lakeFS-style JSON on its API."""
    reason, code, message = _STATUS_FAULTS[kind]
    if urlsplit(target).path.startswith(_LAKEFS_API):
        body = json.dumps({"message": f"{code}: {message}"}).encode()
    else:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            "<RequestId>remote-keras-fault</RequestId></Error>"
        ).encode()
    extra = "Connection: close\r\n"
    if retry_after_s is not None and kind in ("503", "429"):
        extra += f"Retry-After: {retry_after_s}\r\n"
    content_type = "application/json" if body.startswith(b"{") else "application/xml"
    return _response(int(kind), reason, body, extra, content_type)


async def _cut_response(reader: asyncio.StreamReader, method: bytes) -> bytes:
    """Reads one response and returns its head plus half its body (or half its head)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, headers = _parse_head(head)
    status = int(status_line.split(" ")[1])
    if method == b"HEAD" or status in (204, 304) or status < 200:
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower() or (
        "content-length" not in headers
    ):
        first = await reader.read(1 << 16)
        body = first[: len(first) // 2]
    else:
        body = await reader.readexactly(int(headers["content-length"]) // 2)
    return head + body if body else head[: len(head) // 2]


def flip_middle(body: bytes, count: int = 3) -> bytes:
    """`body` with `count` bytes from its middle on changed (the lowest bit flipped).

    A byte that would become `0xFF` (a JPEG marker) gets its second bit flipped
    instead, so a flipped JPEG still decodes, to other pixels.

    Args:
        body: The bytes to damage.
        count: How many consecutive bytes to change (fewer if the body is shorter).

    Returns:
        A copy of the same length that differs in exactly `min(count, len(body))` bytes.
    """
    damaged = bytearray(body)
    start = max(0, len(body) // 2 - count // 2)
    for i in range(start, min(len(body), start + count)):
        damaged[i] ^= 0x02 if damaged[i] == 0xFE else 0x01
    return bytes(damaged)


async def _flipped_response(reader: asyncio.StreamReader, method: bytes, count: int) -> bytes:
    """Reads one response; returns it with its body flipped (`flip_middle`), and closing."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, headers = _parse_head(head)
    status = int(status_line.split(" ")[1])
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    if method == b"HEAD" or status in (204, 304) or status < 200:
        body = b""
    elif chunked or "content-length" in headers:
        body = await _read_body(reader, headers)
    else:
        body = await reader.read()  # delimited by the server closing the connection
    if status in (200, 206) and "content-length" in headers and not chunked:
        body = flip_middle(body, count)
    lines = [
        line for line in head[:-4].split(b"\r\n") if not line.lower().startswith(b"connection:")
    ]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body


def _reset(writer: asyncio.StreamWriter) -> None:
    """Closes a connection abruptly: RST (SO_LINGER 0), dropping unsent data."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


async def _lingering_close(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout_s: float = 2.0
) -> None:
    """Half-closes, then reads until the client closes, so the close is a FIN, not a RST."""
    try:
        writer.write_eof()
        await asyncio.wait_for(_read_to_eof(reader), timeout_s)
    except (OSError, RuntimeError, asyncio.TimeoutError):
        pass
    writer.close()


async def _read_to_eof(reader: asyncio.StreamReader) -> None:
    while await reader.read(1 << 16):
        pass


class _Sink:
    """A stand-in stream writer that collects what is written."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    """Reads a request body (chunked bodies stay chunk-encoded)."""
    sink = _Sink()
    await _forward_body(reader, sink, headers)
    return bytes(sink.data)


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


class ProxyProcess(LocalServer):
    """A `CountingProxy` in its own process, so its CPU is not the client's.

    Args:
        upstream_port: Port of the server on 127.0.0.1 to forward to.
        delay_s: Seconds to wait before forwarding each request.
        faults: Faults to inject, or `None` for a faithful proxy.
    """

    def __init__(
        self, upstream_port: int, delay_s: float = 0.0, faults: FaultPlan | None = None
    ) -> None:
        super().__init__()
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.faults = faults
        self._process: subprocess.Popen | None = None

    def _repr_fields(self) -> dict[str, Any]:
        return {"upstream_port": self.upstream_port, "delay_s": self.delay_s}

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        if self.running:
            return self
        command = [sys.executable, "-m", "remote_keras.testing.proxy",
                   "--upstream-port", str(self.upstream_port),
                   "--delay-ms", str(self.delay_s * 1000)]  # fmt: skip
        if self.faults is not None:
            command += ["--faults", self.faults.to_json()]
        self._process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        if self._process.stdout is None:  # cannot happen: stdout=PIPE
            raise RuntimeError("the proxy process has no stdout")
        self.port = int(self._process.stdout.readline())
        return self

    def counts(self, reset: bool = False) -> Counter[str]:
        """Returns the requests counted so far (and restarts from zero if `reset`).

        Injected faults are included under keys `fault:<kind>`.
        """
        url = self.endpoint_url + COUNTS_PATH + ("?reset=1" if reset else "")
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - 127.0.0.1
            return Counter(json.load(response))

    def reset(self) -> Counter[str]:
        return self.counts(reset=True)

    def faults_injected(self) -> Counter[str]:
        """Returns the faults injected so far, by kind (without the `fault:` prefix)."""
        counts = self.counts()
        return Counter({k[6:]: n for k, n in counts.items() if k.startswith("fault:")})

    def outage(self, seconds: float) -> None:
        """Takes the running proxy down for `seconds` (see `CountingProxy.outage`).

        Returns once it is down.

        Args:
            seconds: How long the port stays closed.
        """
        body = json.dumps({"seconds": seconds}).encode()
        url = self.endpoint_url + OUTAGE_PATH
        request = urllib.request.Request(url, body, method="POST")  # noqa: S310 - 127.0.0.1
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - 127.0.0.1
            response.read()

    def set_faults(self, plan: FaultPlan | None) -> None:
        """Replaces the running proxy's fault plan (see `CountingProxy.set_faults`)."""
        body = plan.to_json().encode() if plan is not None else b"null"
        url = self.endpoint_url + FAULTS_PATH
        request = urllib.request.Request(url, body, method="POST")  # noqa: S310 - 127.0.0.1
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310 - 127.0.0.1
            self.faults = plan

    def stop(self) -> None:
        if self._process is not None:
            terminate(self._process)
            self._process = None


def main() -> None:
    parser = argparse.ArgumentParser(description="Counting, latency-adding, faulty HTTP proxy")
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--faults", default="null", help="a FaultPlan as JSON (FaultPlan.to_json)")
    args = parser.parse_args()
    faults = FaultPlan.from_json(args.faults)
    proxy = CountingProxy(args.upstream_port, args.delay_ms / 1000, faults).start()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # connections die with the process
    print(proxy.port, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
