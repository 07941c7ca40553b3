"""HTTP plumbing of the stand-in: the route registry, requests, responses and the handler.

Handlers declare their routes where they are defined::

    @route("GET", "/repositories/{repository}")
    def get_repository(state: State, req: Request) -> Response: ...

Templates are relative to `/api/v1` unless `api=False`; `{name}` matches one path
segment, URL-decoded into `req.params`. Requests are counted by route, keyed like
`"GET /api/v1/repositories/{repository}"`.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from remote_keras.testing.base import TrackingHTTPServer
from remote_keras.testing.lakefs.model import DEFAULT_PER_PAGE, MAX_PER_PAGE, ApiError, View, page
from remote_keras.testing.lakefs.store import StoreClosed

if TYPE_CHECKING:
    from remote_keras.testing.lakefs.state import State

logger = logging.getLogger("remote_keras.testing.lakefs")

API_PREFIX = "/api/v1"


class Counting(Protocol):
    """What a server's owner offers its handler: request counts and internal errors."""

    errors: list[str]

    def count(self, key: str) -> None: ...


_TRUE = {"1", "t", "true"}
_FALSE = {"0", "f", "false"}


@dataclass
class Request:
    method: str
    params: dict[str, str]
    query: dict[str, list[str]]
    headers: Any  # email.message.Message from http.server
    body: IO[bytes]

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default

    def required(self, name: str) -> str:
        value = self.arg(name)
        if value is None:
            raise ApiError(400, f"parameter {name!r} is required")
        return value

    def flag(self, name: str, default: bool | None = None) -> bool | None:
        """A boolean query parameter, parsed like Go's `strconv.ParseBool` (`True` works)."""
        value = self.arg(name)
        if value is None or value == "":
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise ApiError(400, f"invalid boolean for {name!r}: {value!r}")

    def amount(self) -> int:
        """The page size: `amount`, 100 by default, at most 1000 (as lakeFS)."""
        value = self.arg("amount")
        try:
            amount = DEFAULT_PER_PAGE if value in (None, "") else int(value)
        except ValueError:
            raise ApiError(400, f"invalid amount: {value!r}") from None
        return MAX_PER_PAGE if amount <= 0 or amount > MAX_PER_PAGE else amount

    def json(self) -> Any:
        raw = self.body.read()
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "invalid JSON body") from None


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    file: tuple[Path, int, int] | None = None  # (path, offset, length) streamed after headers

    @property
    def length(self) -> int:
        return self.file[2] if self.file else len(self.body)


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(payload).encode()
    return Response(status, body, {"Content-Type": "application/json", **(headers or {})})


def pagination(results: int, has_more: bool, next_offset: str) -> dict[str, Any]:
    return {
        "has_more": has_more,
        "next_offset": next_offset if has_more else "",
        "results": results,
        "max_per_page": MAX_PER_PAGE,
    }


def paged_json(req: Request, items: list[tuple[str, Any]]) -> Response:
    """One page of `(key, result)` pairs, after `prefix` / `after` / `amount`."""
    prefix, after = req.arg("prefix", "") or "", req.arg("after", "") or ""
    found, more = page(View.of(dict(items)), prefix, "", after, req.amount())
    next_offset = found[-1][0] if found else ""
    results = [result for _, result in found]
    return json_response(
        200, {"pagination": pagination(len(found), more, next_offset), "results": results}
    )


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """Parses one `bytes=a-b` / `a-` / `-n` range (inclusive); `None` for no header."""
    if not header:
        return None
    unsatisfiable = ApiError(
        416, "Requested Range Not Satisfiable", {"Content-Range": f"bytes */{size}"}
    )
    match = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", header)
    if not match or match.group(1) == match.group(2) == "":
        raise unsatisfiable
    first, last = match.groups()
    if first == "":
        start, end = max(size - int(last), 0), size - 1
        if int(last) == 0:
            raise unsatisfiable
    else:
        start = int(first)
        end = size - 1 if last == "" else min(int(last), size - 1)
        if last != "" and int(last) < start:
            raise unsatisfiable
    if start >= size:
        raise unsatisfiable
    return start, end


# --------------------------------------------------------------------------- routes

HandlerFunction = Callable[["State", Request], Response]


@dataclass(frozen=True)
class Route:
    method: str
    template: str  # the full path template, e.g. "/api/v1/repositories/{repository}"
    pattern: re.Pattern[str]
    handler: HandlerFunction
    auth: bool


ROUTES: list[Route] = []


def route(
    methods: str | tuple[str, ...], template: str, *, auth: bool = True, api: bool = True
) -> Callable[[HandlerFunction], HandlerFunction]:
    """Registers the decorated function as the handler of `methods` on `template`.

    Args:
        methods: An HTTP method, or several.
        template: Path template; `{name}` matches one segment (`{name:path}`: the rest).
        auth: Whether the request must carry the server's HTTP Basic credentials.
        api: Whether `template` is relative to `/api/v1`.
    """
    full = (API_PREFIX if api else "") + template

    def segment(match: re.Match[str]) -> str:
        name, _, kind = match.group(1).partition(":")
        return f"(?P<{name}>{'.+' if kind == 'path' else '[^/]+'})"

    pattern = re.compile("^" + re.sub(r"\{([\w:]+)\}", segment, full) + "$")
    key_template = re.sub(r"\{(\w+):\w+\}", r"{\1}", full)

    def register(handler: HandlerFunction) -> HandlerFunction:
        for method in (methods,) if isinstance(methods, str) else methods:
            if any(r.method == method and r.template == key_template for r in ROUTES):
                raise ValueError(f"route {method} {key_template} is declared twice")
            ROUTES.append(Route(method, key_template, pattern, handler, auth))
        return handler

    return register


def match(method: str, path: str) -> tuple[str, Route | None, dict[str, str]]:
    """Returns the route key (`METHOD /api/v1/template`), its route and path params."""
    for candidate in ROUTES:
        if candidate.method != method:
            continue
        found = candidate.pattern.match(path)
        if found:
            params = {k: unquote(v) for k, v in found.groupdict().items()}
            return f"{method} {candidate.template}", candidate, params
    return f"{method} {path}", None, {}


# --------------------------------------------------------------------------- HTTP


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: HTTPServer

    def do_GET(self) -> None:
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _read_body(self) -> IO[bytes]:
        """Reads the whole request body (Content-Length or chunked) into a spool."""
        spool = tempfile.SpooledTemporaryFile(max_size=1 << 20)
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            while True:
                size = int(self.rfile.readline(65537).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                self._copy(spool, size)
                self.rfile.readline()
        else:
            self._copy(spool, int(self.headers.get("Content-Length") or 0))
        spool.seek(0)
        return spool

    def _copy(self, out: IO[bytes], size: int) -> None:
        while size > 0:
            chunk = self.rfile.read(min(size, 1 << 20))
            if not chunk:
                raise ConnectionError("request body ended early")
            out.write(chunk)
            size -= len(chunk)

    def _dispatch(self) -> None:
        owner, state = self.server.owner, self.server.state
        parts = urlsplit(self.path)
        key, found, params = match(self.command, parts.path)
        if found is not None and not parts.path.startswith(self.server.only_prefix):
            found = None  # a data server answers its own routes only
        owner.count(key)  # count before answering: the client moves on right after
        try:
            body = self._read_body()
        except (ValueError, ConnectionError):
            self.close_connection = True
            self._send(json_response(400, {"message": "malformed request body"}))
            return
        try:
            if found is None:
                raise ApiError(404, "path not found")
            if found.auth:
                state.authenticate(self.headers.get("Authorization"))
            query = parse_qs(parts.query, keep_blank_values=True)
            response = found.handler(
                state, Request(self.command, params, query, self.headers, body)
            )
        except ApiError as error:
            response = json_response(error.status, {"message": error.message}, error.headers)
        except StoreClosed:  # the server stopped under this request: no answer, as a crash
            self.close_connection = True
            return
        except Exception as error:  # a bug in the stand-in: answer 500 and keep it for tests
            owner.errors.append(traceback.format_exc())
            logger.exception("lakeFS stand-in failed on %s %s", self.command, self.path)
            response = json_response(500, {"message": f"internal error: {error}"})
        finally:
            body.close()
        self._send(response)

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(response.length))
        self.end_headers()
        if self.command == "HEAD" or response.status in (204, 304):
            return
        if response.file is None:
            self.wfile.write(response.body)
            return
        path, offset, remaining = response.file
        with open(path, "rb") as source:
            source.seek(offset)
            while remaining > 0:
                chunk = source.read(min(remaining, 1 << 20))
                self.wfile.write(chunk)
                remaining -= len(chunk)


class HTTPServer(TrackingHTTPServer):
    """The stand-in's HTTP server: `owner` counts requests, `state` answers them.

    `only_prefix` limits it to the routes under that path (the data server's).
    """

    def __init__(
        self, address: tuple[str, int], owner: Counting, state: State, only_prefix: str = ""
    ) -> None:
        self.owner, self.state, self.only_prefix = owner, state, only_prefix
        super().__init__(address, Handler)
