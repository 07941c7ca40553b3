"""A lakeFS stand-in on 127.0.0.1: the REST API subset that `lakefs-spec` and `lakefs` use.

No lakeFS binary can be installed where the tests run, so `LakeFSServer` implements the
lakeFS REST API (`/api/v1`, per lakeFS's OpenAPI spec) over a local folder: repositories,
branches, tags, commits, ref expressions (`main@`, `main~2`, `main^1`, tags, commit ids),
staged vs committed objects, ranged reads, paged listings, diff, merge, revert and
branch protection. Object data lives on disk; metadata lives in memory.

`lakefs_target()` picks where lakeFS tests run: a real lakeFS when
`REMOTE_KERAS_LAKEFS_URL` (plus `REMOTE_KERAS_LAKEFS_ACCESS_KEY_ID` and
`REMOTE_KERAS_LAKEFS_SECRET_ACCESS_KEY`) is set, this stand-in otherwise.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import collections
import contextlib
import email.parser
import email.policy
import email.utils
import fnmatch
import hashlib
import hmac
import itertools
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

logger = logging.getLogger(__name__)

API_PREFIX = "/api/v1"
PRESIGNED_PREFIX = "/_presigned/"
VERSION = "1.70.0"
DEFAULT_PER_PAGE = 100
MAX_PER_PAGE = 1000
MAX_DELETE_OBJECTS = 1000
PRESIGN_EXPIRY_S = 900
META_HEADER_PREFIX = "x-lakefs-meta-"

ENV_URL = "REMOTE_KERAS_LAKEFS_URL"
ENV_ACCESS_KEY_ID = "REMOTE_KERAS_LAKEFS_ACCESS_KEY_ID"
ENV_SECRET_ACCESS_KEY = "REMOTE_KERAS_LAKEFS_SECRET_ACCESS_KEY"  # noqa: S105 - a variable name

_REPO_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
_BRANCH_NAME = re.compile(r"^\w[-\w]*$")
_TAG_NAME = re.compile(r"^\w[-\w.]*$")
_NAMESPACE = re.compile(r"^(s3|gs|https?|mem|local|transient)://.*$")
_REF_EXPR = re.compile(r"^(?P<base>[^~^@]+)(?P<mods>(?:[~^]\d*)*)(?P<at>@?)$")
_HEX = re.compile(r"^[0-9a-f]{6,64}$")
_TRUE = {"1", "t", "true"}
_FALSE = {"0", "f", "false"}


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class _Entry:
    """One object version; immutable, shared by staging areas and commits."""

    address: str
    blob: str
    checksum: str
    size: int
    mtime: int
    content_type: str
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class _Commit:
    id: str
    parents: list[str]
    committer: str
    message: str
    created: float
    seq: int
    meta_range_id: str
    metadata: dict[str, str]
    generation: int
    tree: dict[str, _Entry]  # never mutated after the commit is made


@dataclass
class _Branch:
    commit_id: str
    staging: dict[str, _Entry | None] = field(default_factory=dict)  # None: deleted
    hidden: bool = False


@dataclass
class _Repo:
    id: str
    creation_date: int
    default_branch: str
    storage_namespace: str
    read_only: bool = False
    branches: dict[str, _Branch] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    commits: dict[str, _Commit] = field(default_factory=dict)
    protection: list[str] = field(default_factory=list)


class ApiError(Exception):
    """An error answered as lakeFS does: a status and a JSON `{"message": ...}` body."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclass
class _Request:
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
class _Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    file: tuple[Path, int, int] | None = None  # (path, offset, length) streamed after headers

    @property
    def length(self) -> int:
        return self.file[2] if self.file else len(self.body)


def _json(status: int, payload: Any, headers: dict[str, str] | None = None) -> _Response:
    body = json.dumps(payload).encode()
    return _Response(status, body, {"Content-Type": "application/json", **(headers or {})})


def _identity(entry: _Entry | None) -> str | None:
    """What diff, commit and merge compare: the checksum (not address, mtime or metadata)."""
    return None if entry is None else entry.checksum


def _same_tree(a: dict[str, _Entry], b: dict[str, _Entry]) -> bool:
    return a.keys() == b.keys() and all(_identity(a[p]) == _identity(b[p]) for p in a)


def _changes(left: dict[str, _Entry], right: dict[str, _Entry]) -> list[tuple[str, dict]]:
    """Diff records turning `left` into `right`, sorted by path."""
    out = []
    for path in sorted(left.keys() | right.keys()):
        a, b = left.get(path), right.get(path)
        if _identity(a) == _identity(b):
            continue
        kind = "added" if a is None else "removed" if b is None else "changed"
        size = (b or a).size  # type: ignore[union-attr]
        out.append((path, {"type": kind, "path": path, "path_type": "object", "size_bytes": size}))
    return out


def _page(
    items: list[tuple[str, Any]],
    prefix: str,
    delimiter: str,
    after: str,
    amount: int,
) -> tuple[list[tuple[str, Any]], bool]:
    """One page of sorted `(path, payload)` items; common prefixes get payload `None`."""
    keys = [k for k, _ in items]
    start = (
        bisect.bisect_right(keys, after) if after >= prefix else bisect.bisect_left(keys, prefix)
    )
    page: list[tuple[str, Any]] = []
    last_prefix = None
    for path, payload in items[start:]:
        if not path.startswith(prefix):
            break
        cut = path.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            common = path[: cut + len(delimiter)]
            if common <= after or common == last_prefix:
                continue
            last_prefix = common
            path, payload = common, None
        if len(page) == amount:
            return page, True
        page.append((path, payload))
    return page, False


def _pagination(page: list, has_more: bool, next_offset: str) -> dict[str, Any]:
    return {
        "has_more": has_more,
        "next_offset": next_offset if has_more else "",
        "results": len(page),
        "max_per_page": MAX_PER_PAGE,
    }


def _paged_json(req: _Request, items: list[tuple[str, Any]]) -> _Response:
    """One page of sorted `(key, result)` pairs, after `prefix` / `after` / `amount`."""
    page, more = _page(
        items, req.arg("prefix", "") or "", "", req.arg("after", "") or "", req.amount()
    )
    next_offset = page[-1][0] if page else ""
    results = [result for _, result in page]
    return _json(200, {"pagination": _pagination(page, more, next_offset), "results": results})


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
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


# --------------------------------------------------------------------------- API


_R = "/repositories/{repository}"


class _Api:
    """The lakeFS state and REST handlers; transport-free so it is easy to reason about."""

    ROUTES: tuple[tuple[str, str, str], ...] = (
        ("GET", "/healthcheck", "healthcheck"),
        ("GET", "/config", "get_config"),
        ("GET", "/config/version", "get_version"),
        ("GET", "/config/storage", "get_storage_config"),
        ("GET", "/repositories", "list_repositories"),
        ("POST", "/repositories", "create_repository"),
        ("GET", _R, "get_repository"),
        ("DELETE", _R, "delete_repository"),
        ("GET", _R + "/metadata", "get_repository_metadata"),
        ("GET", _R + "/settings/branch_protection", "get_protection"),
        ("PUT", _R + "/settings/branch_protection", "set_protection"),
        ("GET", _R + "/tags", "list_tags"),
        ("POST", _R + "/tags", "create_tag"),
        ("GET", _R + "/tags/{tag}", "get_tag"),
        ("DELETE", _R + "/tags/{tag}", "delete_tag"),
        ("GET", _R + "/branches", "list_branches"),
        ("POST", _R + "/branches", "create_branch"),
        ("GET", _R + "/branches/{branch}", "get_branch"),
        ("DELETE", _R + "/branches/{branch}", "delete_branch"),
        ("POST", _R + "/branches/{branch}/commits", "commit"),
        ("POST", _R + "/branches/{branch}/revert", "revert_branch"),
        ("GET", _R + "/branches/{branch}/diff", "diff_branch"),
        ("POST", _R + "/branches/{branch}/objects", "upload_object"),
        ("DELETE", _R + "/branches/{branch}/objects", "delete_object"),
        ("POST", _R + "/branches/{branch}/objects/delete", "delete_objects"),
        ("POST", _R + "/branches/{branch}/objects/copy", "copy_object"),
        ("GET", _R + "/branches/{branch}/staging/backing", "get_staging"),
        ("PUT", _R + "/branches/{branch}/staging/backing", "link_staging"),
        ("GET", _R + "/commits/{commitId}", "get_commit"),
        ("GET", _R + "/refs/{ref}/commits", "log_commits"),
        ("GET", _R + "/refs/{leftRef}/diff/{rightRef}", "diff_refs"),
        ("POST", _R + "/refs/{sourceRef}/merge/{destinationBranch}", "merge"),
        ("GET", _R + "/refs/{sourceRef}/merge/{destinationBranch}", "merge_base"),
        ("GET", _R + "/refs/{ref}/objects", "get_object"),
        ("HEAD", _R + "/refs/{ref}/objects", "head_object"),
        ("GET", _R + "/refs/{ref}/objects/stat", "stat_object"),
        ("GET", _R + "/refs/{ref}/objects/ls", "list_objects"),
    )  # fmt: skip

    def __init__(self, root: Path, access_key_id: str, secret: str, presign: bool) -> None:
        self.blobs = root / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.access_key_id = access_key_id
        self.secret = secret
        self.presign = presign
        self.endpoint_url = ""
        self.repos: dict[str, _Repo] = {}
        self.pending: dict[str, str] = {}  # blob id -> repository, for staging uploads
        self.namespaces: set[str] = set()  # storage namespaces ever used
        self.lock = threading.RLock()
        self._seq = itertools.count()
        self._routes = [
            (method, re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", t) + "$"), t, name)
            for method, t, name in self.ROUTES
        ]

    # -- dispatch

    def route(self, method: str, path: str) -> tuple[str, Callable | None, dict[str, str]]:
        """Returns the route key (`METHOD /api/v1/template`), its handler and path params."""
        if path.startswith(PRESIGNED_PREFIX):
            blob = unquote(path[len(PRESIGNED_PREFIX) :])
            return f"{method} {PRESIGNED_PREFIX}{{blob}}", self.presigned_blob, {"blob": blob}
        if path.startswith(API_PREFIX + "/"):
            sub = path[len(API_PREFIX) :]
            for route_method, pattern, template, name in self._routes:
                match = pattern.match(sub)
                if match and route_method == method:
                    params = {k: unquote(v) for k, v in match.groupdict().items()}
                    return f"{method} {API_PREFIX}{template}", getattr(self, name), params
        return f"{method} {path}", None, {}

    def authenticate(self, header: str | None) -> None:
        error = ApiError(401, "error authenticating request")
        if not header or not header.startswith("Basic "):
            raise error
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise error from None
        if not (
            hmac.compare_digest(user, self.access_key_id)
            and hmac.compare_digest(password, self.secret)
        ):
            raise error

    # -- helpers

    def _repo(self, name: str) -> _Repo:
        repo = self.repos.get(name)
        if repo is None:
            raise ApiError(404, "repository not found")
        return repo

    def _branch(self, repo: _Repo, name: str) -> _Branch:
        branch = repo.branches.get(name)
        if branch is None:
            raise ApiError(404, "branch not found")
        return branch

    def _writable(self, repo: _Repo, name: str, action: str = "write to") -> _Branch:
        branch = self._branch(repo, name)
        if repo.read_only:
            raise ApiError(403, "repository is read-only")
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in repo.protection):
            raise ApiError(403, f"cannot {action} protected branch")
        return branch

    def _resolve(self, repo: _Repo, ref: str) -> tuple[_Commit, _Branch | None]:
        """Resolves a ref expression to a commit, plus the branch when staging is visible."""
        match = _REF_EXPR.match(ref)
        if not match:
            raise ApiError(404, f"{ref}: reference not found")
        base, mods, at = match.group("base"), match.group("mods"), match.group("at")
        branch = repo.branches.get(base)
        if branch is not None:
            commit_id = branch.commit_id
        elif base in repo.tags:
            commit_id, branch = repo.tags[base], None
        elif base in repo.commits:
            commit_id = base
        else:
            found = [c for c in repo.commits if _HEX.match(base) and c.startswith(base)]
            if len(found) != 1:
                raise ApiError(404, f"{ref}: reference not found")
            commit_id = found[0]
        commit = repo.commits[commit_id]
        for op, digits in re.findall(r"([~^])(\d*)", mods):
            n = int(digits) if digits else 1
            if op == "~":
                for _ in range(n):
                    if not commit.parents:
                        raise ApiError(404, f"{ref}: reference not found")
                    commit = repo.commits[commit.parents[0]]
            elif n > 0:
                if n > len(commit.parents):
                    raise ApiError(404, f"{ref}: reference not found")
                commit = repo.commits[commit.parents[n - 1]]
        staged = branch if branch is not None and not mods and not at else None
        return commit, staged

    def _view(self, repo: _Repo, ref: str) -> dict[str, _Entry]:
        commit, branch = self._resolve(repo, ref)
        return self._branch_view(repo, branch) if branch else commit.tree

    def _branch_view(self, repo: _Repo, branch: _Branch) -> dict[str, _Entry]:
        view = dict(repo.commits[branch.commit_id].tree)
        for path, entry in branch.staging.items():
            if entry is None:
                view.pop(path, None)
            else:
                view[path] = entry
        return view

    def _new_commit(
        self,
        repo: _Repo,
        parents: list[str],
        message: str,
        tree: dict[str, _Entry],
        metadata: dict[str, str] | None = None,
        created: float | None = None,
        committer: str | None = None,
    ) -> _Commit:
        seq = next(self._seq)
        created = time.time() if created is None else created
        listing = sorted((p, e.checksum) for p, e in tree.items())
        meta_range_id = hashlib.sha256(json.dumps(listing).encode()).hexdigest()
        seed = json.dumps([repo.id, parents, message, metadata, meta_range_id, created, seq])
        commit = _Commit(
            id=hashlib.sha256((seed + uuid.uuid4().hex).encode()).hexdigest(),
            parents=list(parents),
            committer=self.access_key_id if committer is None else committer,
            message=message,
            created=created,
            seq=seq,
            meta_range_id=meta_range_id,
            metadata=dict(metadata or {}),
            generation=max((repo.commits[p].generation for p in parents), default=0) + 1,
            tree=tree,
        )
        repo.commits[commit.id] = commit
        return commit

    @staticmethod
    def _commit_json(commit: _Commit) -> dict[str, Any]:
        return {
            "id": commit.id,
            "parents": commit.parents,
            "committer": commit.committer,
            "message": commit.message,
            "creation_date": int(commit.created),
            "meta_range_id": commit.meta_range_id,
            "metadata": commit.metadata,
            "generation": commit.generation,
            "version": 1,
        }

    @staticmethod
    def _repo_json(repo: _Repo) -> dict[str, Any]:
        return {
            "id": repo.id,
            "creation_date": repo.creation_date,
            "default_branch": repo.default_branch,
            "storage_namespace": repo.storage_namespace,
            "storage_id": "",
            "read_only": repo.read_only,
        }

    def _stats_json(
        self, path: str, entry: _Entry, metadata: bool = True, presign: bool = False
    ) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "path": path,
            "path_type": "object",
            "physical_address": entry.address,
            "checksum": entry.checksum,
            "size_bytes": entry.size,
            "mtime": entry.mtime,
            "content_type": entry.content_type,
        }
        if presign:
            url, expiry = self._presigned_url(entry.blob)
            stats.update(physical_address=url, physical_address_expiry=expiry)
        if metadata:
            stats["metadata"] = dict(entry.metadata)
        return stats

    def _ancestors(self, repo: _Repo, commit: _Commit, first_parent: bool = False) -> list[_Commit]:
        """All commits reachable from `commit`, newest first (ties broken by creation order)."""
        seen: dict[str, _Commit] = {}
        todo = [commit]
        while todo:
            current = todo.pop()
            if current.id in seen:
                continue
            seen[current.id] = current
            parents = current.parents[:1] if first_parent else current.parents
            todo.extend(repo.commits[p] for p in parents)
        return sorted(seen.values(), key=lambda c: (c.created, c.seq), reverse=True)

    def _merge_base(self, repo: _Repo, a: _Commit, b: _Commit) -> _Commit | None:
        reachable = {c.id for c in self._ancestors(repo, a)}
        return next((c for c in self._ancestors(repo, b) if c.id in reachable), None)

    @staticmethod
    def _three_way(
        base: dict[str, _Entry], source: dict[str, _Entry], dest: dict[str, _Entry], strategy: str
    ) -> dict[str, _Entry]:
        """Applies the changes base -> source onto dest; 409 on conflicts (unless a strategy)."""
        result = dict(dest)
        for path in base.keys() | source.keys() | dest.keys():
            b, s, d = (_identity(t.get(path)) for t in (base, source, dest))
            if s == d or s == b:
                continue
            if d != b and strategy != "source-wins":
                if strategy == "dest-wins":
                    continue
                raise ApiError(409, "conflict found")
            if path in source:
                result[path] = source[path]
            else:
                result.pop(path, None)
        return result

    def _commit_tree(
        self,
        repo: _Repo,
        branch: _Branch,
        parents: list[str],
        message: str,
        tree: dict[str, _Entry],
        metadata: dict[str, str] | None,
        allow_empty: bool,
    ) -> _Commit:
        """Commits a merged or reverted `tree` onto a clean `branch`, as lakeFS does."""
        head = repo.commits[branch.commit_id]
        if _changes(head.tree, self._branch_view(repo, branch)):
            raise ApiError(400, "uncommitted changes (dirty branch)")
        if _same_tree(tree, head.tree) and not allow_empty:
            raise ApiError(400, "no changes")
        commit = self._new_commit(repo, parents, message, tree, metadata)
        branch.commit_id, branch.staging = commit.id, {}
        return commit

    def _store_blob(self, body: IO[bytes], blob: str) -> tuple[str, int]:
        """Copies `body` to a blob file; returns its MD5 hex digest and size."""
        digest, size = hashlib.md5(usedforsecurity=False), 0
        with open(self.blobs / blob, "wb") as out:
            while chunk := body.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        return digest.hexdigest(), size

    def _address(self, repo: _Repo, blob: str) -> str:
        return f"{repo.storage_namespace.rstrip('/')}/data/{blob}"

    def _presigned_url(self, blob: str) -> tuple[str, int]:
        expires = int(time.time()) + PRESIGN_EXPIRY_S
        signature = hmac.new(self.secret.encode(), f"{blob}:{expires}".encode(), "sha256")
        query = urlencode({"expires": expires, "signature": signature.hexdigest()})
        return f"{self.endpoint_url}{PRESIGNED_PREFIX}{blob}?{query}", expires

    def _stage(
        self, repo: _Repo, name: str, path: str, entry: _Entry, headers: Any
    ) -> dict[str, Any]:
        """Stages `entry` at `path` on branch `name`, honouring If-None-Match / If-Match."""
        with self.lock:
            branch = self._writable(repo, name)
            current = self._branch_view(repo, branch).get(path)
            if headers.get("If-None-Match") == "*" and current is not None:
                raise ApiError(412, "precondition failed: object exists")
            if_match = headers.get("If-Match")
            if if_match and (current is None or if_match.strip('"') != current.checksum):
                raise ApiError(412, "precondition failed: ETag mismatch")
            branch.staging[path] = entry
        return self._stats_json(path, entry)

    def _sample_data(self, repo: _Repo) -> dict[str, _Entry]:
        """Synthetic stand-ins for lakeFS's sample files (same layout, not the same bytes)."""
        files = {
            "README.md": b"# Sample repository\n\nSynthetic sample data of the lakeFS stand-in.\n",
            "lakes.parquet": b"PAR1" + bytes(range(256)) * 4 + b"PAR1",
            "data/lakes.source.md": b"# Source\n\nPlaceholder describing lakes.parquet.\n",
            "images/axolotl.png": b"\x89PNG\r\n\x1a\n" + b"\x00" * 64,
            "images/waterfall.png": b"\x89PNG\r\n\x1a\n" + b"\x01" * 96,
        }
        now, tree = int(time.time()), {}
        for path, data in files.items():
            blob = uuid.uuid4().hex
            (self.blobs / blob).write_bytes(data)
            checksum = hashlib.md5(data, usedforsecurity=False).hexdigest()
            content_type = "text/markdown" if path.endswith(".md") else "application/octet-stream"
            tree[path] = _Entry(
                self._address(repo, blob), blob, checksum, len(data), now, content_type
            )
        return tree

    # -- config

    def healthcheck(self, req: _Request) -> _Response:
        return _Response(204)

    def _storage_config(self) -> dict[str, Any]:
        return {
            "blockstore_type": "local",
            "blockstore_namespace_example": "local://example-bucket/",
            "blockstore_namespace_ValidityRegex": "^local://",
            "default_namespace_prefix": "local://",
            "pre_sign_support": self.presign,
            "pre_sign_support_ui": False,
            "import_support": False,
            "import_validity_regex": "^local://",
            "pre_sign_multipart_upload": False,
            "blockstore_id": "",
            "blockstore_description": "lakeFS stand-in (remote_keras.testing)",
        }

    def get_config(self, req: _Request) -> _Response:
        storage = self._storage_config()
        return _json(
            200,
            {
                "version_config": {"version": VERSION, "upgrade_recommended": False},
                "storage_config": storage,
                "storage_config_list": [storage],
                "ui_config": {},
                "capabilities_config": {},
            },
        )

    def get_version(self, req: _Request) -> _Response:
        return _json(200, {"version": VERSION, "upgrade_recommended": False})

    def get_storage_config(self, req: _Request) -> _Response:
        return _json(200, self._storage_config())

    # -- repositories

    def list_repositories(self, req: _Request) -> _Response:
        search = req.arg("search", "") or ""
        with self.lock:
            items = [(n, self._repo_json(r)) for n, r in sorted(self.repos.items()) if search in n]
        return _paged_json(req, items)

    def create_repository(self, req: _Request) -> _Response:
        body = req.json()
        name, namespace = body.get("name") or "", body.get("storage_namespace") or ""
        if not _REPO_NAME.match(name):
            raise ApiError(400, f"invalid repository name {name!r}")
        if not _NAMESPACE.match(namespace):
            raise ApiError(400, f"invalid storage namespace {namespace!r}")
        default_branch = body.get("default_branch") or "main"
        if not _BRANCH_NAME.match(default_branch):
            raise ApiError(400, f"invalid branch name {default_branch!r}")
        with self.lock:
            if name in self.repos:
                raise ApiError(409, "repository already exists")
            if namespace.rstrip("/") in self.namespaces:  # lakeFS leaves data behind on delete
                raise ApiError(400, f"storage namespace already in use: {namespace}")
            self.namespaces.add(namespace.rstrip("/"))
            repo = _Repo(name, int(time.time()), default_branch, namespace)
            repo.read_only = bool(body.get("read_only"))
            if not req.flag("bare", False):
                first = self._new_commit(repo, [], "Repository created", {}, committer="")
                repo.branches[default_branch] = _Branch(first.id)
                if body.get("sample_data"):
                    sample = self._new_commit(
                        repo, [first.id], "Add sample data", self._sample_data(repo)
                    )
                    repo.branches[default_branch].commit_id = sample.id
            self.repos[name] = repo
            return _json(201, self._repo_json(repo))

    def get_repository(self, req: _Request) -> _Response:
        with self.lock:
            return _json(200, self._repo_json(self._repo(req.params["repository"])))

    def delete_repository(self, req: _Request) -> _Response:
        with self.lock:
            repo = self._repo(req.params["repository"])
            if repo.read_only and not req.flag("force", False):
                raise ApiError(403, "repository is read-only")
            del self.repos[repo.id]
        return _Response(204)

    def get_repository_metadata(self, req: _Request) -> _Response:
        with self.lock:
            self._repo(req.params["repository"])
        return _json(200, {})

    def get_protection(self, req: _Request) -> _Response:
        with self.lock:
            rules = [{"pattern": p} for p in self._repo(req.params["repository"]).protection]
        etag = hashlib.md5(json.dumps(rules).encode(), usedforsecurity=False).hexdigest()
        return _json(200, rules, {"ETag": f'"{etag}"'})

    def set_protection(self, req: _Request) -> _Response:
        rules = req.json()
        if not isinstance(rules, list) or not all(
            isinstance(r, dict) and r.get("pattern") for r in rules
        ):
            raise ApiError(400, "invalid branch protection rules")
        with self.lock:
            repo = self._repo(req.params["repository"])
            if_match = req.headers.get("If-Match")
            if if_match:
                current = [{"pattern": p} for p in repo.protection]
                etag = hashlib.md5(json.dumps(current).encode(), usedforsecurity=False).hexdigest()
                if if_match.strip('"') != etag:
                    raise ApiError(412, "precondition failed")
            repo.protection = [r["pattern"] for r in rules]
        return _Response(204)

    # -- tags and branches

    def _ref_list(self, req: _Request, refs: Iterable[tuple[str, str]]) -> _Response:
        items = [(name, {"id": name, "commit_id": commit}) for name, commit in sorted(refs)]
        return _paged_json(req, items)

    def list_tags(self, req: _Request) -> _Response:
        with self.lock:
            return self._ref_list(req, self._repo(req.params["repository"]).tags.items())

    def create_tag(self, req: _Request) -> _Response:
        body = req.json()
        name, ref = body.get("id") or "", body.get("ref") or ""
        if not _TAG_NAME.match(name):
            raise ApiError(400, f"invalid tag id {name!r}")
        with self.lock:
            repo = self._repo(req.params["repository"])
            commit, _ = self._resolve(repo, ref)
            if (name in repo.tags and not body.get("force")) or name in repo.branches:
                raise ApiError(409, "tag already exists")
            repo.tags[name] = commit.id
        return _json(201, {"id": name, "commit_id": commit.id})

    def get_tag(self, req: _Request) -> _Response:
        with self.lock:
            repo = self._repo(req.params["repository"])
            commit_id = repo.tags.get(req.params["tag"])
        if commit_id is None:
            raise ApiError(404, "tag not found")
        return _json(200, {"id": req.params["tag"], "commit_id": commit_id})

    def delete_tag(self, req: _Request) -> _Response:
        with self.lock:
            repo = self._repo(req.params["repository"])
            if repo.tags.pop(req.params["tag"], None) is None:
                raise ApiError(404, "tag not found")
        return _Response(204)

    def list_branches(self, req: _Request) -> _Response:
        show_hidden = req.flag("show_hidden", False)
        with self.lock:
            repo = self._repo(req.params["repository"])
            refs = [
                (n, b.commit_id) for n, b in repo.branches.items() if show_hidden or not b.hidden
            ]
            return self._ref_list(req, refs)

    def create_branch(self, req: _Request) -> _Response:
        body = req.json()
        name, source = body.get("name") or "", body.get("source") or ""
        if not _BRANCH_NAME.match(name):
            raise ApiError(400, f"invalid branch name {name!r}")
        with self.lock:
            repo = self._repo(req.params["repository"])
            if name in repo.branches:
                raise ApiError(409, "branch already exists")
            if name in repo.tags:
                raise ApiError(409, "a tag with this name already exists")
            commit, _ = self._resolve(repo, source)
            repo.branches[name] = _Branch(commit.id, hidden=bool(body.get("hidden")))
        # lakeFS answers the new branch's commit id as text, not JSON.
        return _Response(201, commit.id.encode(), {"Content-Type": "text/html"})

    def get_branch(self, req: _Request) -> _Response:
        with self.lock:
            repo = self._repo(req.params["repository"])
            branch = self._branch(repo, req.params["branch"])
            return _json(200, {"id": req.params["branch"], "commit_id": branch.commit_id})

    def delete_branch(self, req: _Request) -> _Response:
        with self.lock:
            repo = self._repo(req.params["repository"])
            name = req.params["branch"]
            self._branch(repo, name)
            if name == repo.default_branch:
                raise ApiError(400, "cannot delete repository default branch")
            if not req.flag("force", False):
                self._writable(repo, name, "delete")
            del repo.branches[name]
        return _Response(204)

    # -- commits, log, diff, merge, revert

    def commit(self, req: _Request) -> _Response:
        body = req.json()
        if not isinstance(body.get("message"), str):
            raise ApiError(400, "commit message is required")
        with self.lock:
            repo = self._repo(req.params["repository"])
            branch = self._writable(repo, req.params["branch"], "commit to")
            head = repo.commits[branch.commit_id]
            tree = self._branch_view(repo, branch)
            if _same_tree(tree, head.tree) and not body.get("allow_empty"):
                raise ApiError(400, "commit: no changes")
            commit = self._new_commit(
                repo, [head.id], body["message"], tree, body.get("metadata"), body.get("date")
            )
            branch.commit_id, branch.staging = commit.id, {}
            return _json(201, self._commit_json(commit))

    def get_commit(self, req: _Request) -> _Response:
        with self.lock:
            repo = self._repo(req.params["repository"])
            commit, _ = self._resolve(repo, req.params["commitId"])
            return _json(200, self._commit_json(commit))

    def log_commits(self, req: _Request) -> _Response:
        objects, prefixes = req.query.get("objects", []), req.query.get("prefixes", [])
        stop_at = req.arg("stop_at") or None
        with self.lock:
            repo = self._repo(req.params["repository"])
            commit, _ = self._resolve(repo, req.params["ref"])
            stop_id = self._resolve(repo, stop_at)[0].id if stop_at else None
            commits = self._ancestors(repo, commit, bool(req.flag("first_parent", False)))
            if stop_id:
                ids = [c.id for c in commits]
                commits = commits[: ids.index(stop_id) + 1] if stop_id in ids else commits
            if objects or prefixes:

                def touches(c: _Commit) -> bool:
                    before = repo.commits[c.parents[0]].tree if c.parents else {}
                    return any(
                        p in objects or any(p.startswith(x) for x in prefixes)
                        for p, _ in _changes(before, c.tree)
                    )

                commits = [c for c in commits if touches(c)]
        after, amount = req.arg("after", "") or "", req.amount()
        ids = [c.id for c in commits]
        start = ids.index(after) + 1 if after in ids else 0
        page = commits[start : start + amount]
        more = start + amount < len(commits) and not req.flag("limit", False)
        next_offset = page[-1].id if page else ""
        results = [self._commit_json(c) for c in page]
        return _json(200, {"pagination": _pagination(page, more, next_offset), "results": results})

    def _diff_response(self, req: _Request, changes: list[tuple[str, dict]]) -> _Response:
        delimiter = req.arg("delimiter", "") or ""
        page, more = _page(
            changes,
            req.arg("prefix", "") or "",
            delimiter,
            req.arg("after", "") or "",
            req.amount(),
        )
        results = [
            rec or {"type": "prefix_changed", "path": path, "path_type": "common_prefix"}
            for path, rec in page
        ]
        next_offset = page[-1][0] if page else ""
        return _json(200, {"pagination": _pagination(page, more, next_offset), "results": results})

    def diff_branch(self, req: _Request) -> _Response:
        with self.lock:
            repo = self._repo(req.params["repository"])
            branch = self._branch(repo, req.params["branch"])
            changes = _changes(repo.commits[branch.commit_id].tree, self._branch_view(repo, branch))
        return self._diff_response(req, changes)

    def diff_refs(self, req: _Request) -> _Response:
        # Ref diffs compare commits: a branch stands for its head commit, staging is ignored.
        with self.lock:
            repo = self._repo(req.params["repository"])
            left, _ = self._resolve(repo, req.params["leftRef"])
            right, _ = self._resolve(repo, req.params["rightRef"])
            if (req.arg("type") or "three_dot") == "three_dot":
                left = self._merge_base(repo, left, right) or left
            changes = _changes(left.tree, right.tree)
        return self._diff_response(req, changes)

    def merge_base(self, req: _Request) -> _Response:
        with self.lock:
            repo = self._repo(req.params["repository"])
            source, _ = self._resolve(repo, req.params["sourceRef"])
            dest = repo.commits[self._branch(repo, req.params["destinationBranch"]).commit_id]
            base = self._merge_base(repo, source, dest)
            if base is None:
                raise ApiError(404, "no merge base found")
        return _json(
            200,
            {
                "source_commit_id": source.id,
                "destination_commit_id": dest.id,
                "base_commit_id": base.id,
            },
        )

    def merge(self, req: _Request) -> _Response:
        body = req.json() or {}
        source_ref, dest_name = req.params["sourceRef"], req.params["destinationBranch"]
        with self.lock:
            repo = self._repo(req.params["repository"])
            source, _ = self._resolve(repo, source_ref)
            branch = self._branch(repo, dest_name)
            if repo.read_only and not body.get("force"):
                raise ApiError(403, "repository is read-only")
            dest = repo.commits[branch.commit_id]
            base = self._merge_base(repo, source, dest)
            tree = self._three_way(
                base.tree if base else {}, source.tree, dest.tree, body.get("strategy") or ""
            )
            message = body.get("message") or f"Merge '{source_ref}' into '{dest_name}'"
            parents = [dest.id] if body.get("squash_merge") else [dest.id, source.id]
            allow_empty = bool(body.get("allow_empty") or body.get("force"))
            commit = self._commit_tree(
                repo, branch, parents, message, tree, body.get("metadata"), allow_empty
            )
        return _json(200, {"reference": commit.id})

    def revert_branch(self, req: _Request) -> _Response:
        body = req.json()
        if not isinstance(body.get("ref"), str):
            raise ApiError(400, "ref is required")
        parent_number = int(body.get("parent_number") or 0)
        with self.lock:
            repo = self._repo(req.params["repository"])
            branch = self._writable(repo, req.params["branch"], "commit to")
            target, _ = self._resolve(repo, body["ref"])
            if not target.parents:
                raise ApiError(400, "cannot revert a commit without parents")
            if len(target.parents) > 1 and parent_number <= 0:
                raise ApiError(400, "must specify 1-based parent number for reverting merge commit")
            if parent_number > len(target.parents):
                raise ApiError(400, "parent number out of range")
            parent = repo.commits[target.parents[max(parent_number, 1) - 1]]
            head = repo.commits[branch.commit_id]
            tree = self._three_way(target.tree, parent.tree, head.tree, "")
            overrides = body.get("commit_overrides") or {}
            message = overrides.get("message") or f"Revert {body['ref']}"
            metadata, allow_empty = overrides.get("metadata"), bool(body.get("allow_empty"))
            self._commit_tree(repo, branch, [head.id], message, tree, metadata, allow_empty)
        return _Response(204)

    # -- objects: reads

    def _lookup(self, req: _Request) -> tuple[_Repo, _Entry]:
        with self.lock:
            repo = self._repo(req.params["repository"])
            entry = self._view(repo, req.params["ref"]).get(req.required("path"))
        if entry is None:
            raise ApiError(404, "object not found")
        return repo, entry

    def stat_object(self, req: _Request) -> _Response:
        _, entry = self._lookup(req)
        presign = bool(req.flag("presign", False)) and self.presign
        stats = self._stats_json(
            req.required("path"), entry, bool(req.flag("user_metadata", True)), presign
        )
        return _json(200, stats)

    def _object_response(self, entry: _Entry, headers: Any) -> _Response:
        meta = {
            "Content-Type": entry.content_type,
            "ETag": f'"{entry.checksum}"',
            "Last-Modified": email.utils.formatdate(entry.mtime, usegmt=True),
            "Accept-Ranges": "bytes",
        }
        if headers.get("If-None-Match", "").strip('"') == entry.checksum:
            return _Response(304, headers=meta)
        span = _parse_range(headers.get("Range"), entry.size)
        if span is None:
            return _Response(200, headers=meta, file=(self.blobs / entry.blob, 0, entry.size))
        start, end = span
        meta["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
        return _Response(206, headers=meta, file=(self.blobs / entry.blob, start, end - start + 1))

    def get_object(self, req: _Request) -> _Response:
        _, entry = self._lookup(req)
        if req.flag("presign", False):
            if not self.presign:
                raise ApiError(405, "operation not supported: presign is disabled")
            return _Response(302, headers={"Location": self._presigned_url(entry.blob)[0]})
        return self._object_response(entry, req.headers)

    def head_object(self, req: _Request) -> _Response:
        _, entry = self._lookup(req)
        return self._object_response(entry, req.headers)

    def list_objects(self, req: _Request) -> _Response:
        with self.lock:
            repo = self._repo(req.params["repository"])
            view = self._view(repo, req.params["ref"])
        items = sorted(view.items())
        page, more = _page(
            items,
            req.arg("prefix", "") or "",
            req.arg("delimiter", "") or "",
            req.arg("after", "") or "",
            req.amount(),
        )
        metadata = bool(req.flag("user_metadata", True))
        presign = bool(req.flag("presign", False)) and self.presign
        results = [
            self._stats_json(path, entry, metadata, presign)
            if entry
            else {
                "path": path,
                "path_type": "common_prefix",
                "physical_address": "",
                "checksum": "",
                "mtime": 0,
            }
            for path, entry in page
        ]
        next_offset = page[-1][0] if page else ""
        return _json(200, {"pagination": _pagination(page, more, next_offset), "results": results})

    # -- objects: writes

    def upload_object(self, req: _Request) -> _Response:
        path = req.required("path")
        with self.lock:
            repo = self._repo(req.params["repository"])
            self._writable(repo, req.params["branch"])
        content_type = req.headers.get("Content-Type") or "application/octet-stream"
        body = req.body
        if content_type.startswith("multipart/form-data"):
            raw = f"Content-Type: {content_type}\r\n\r\n".encode() + req.body.read()
            message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
            part = next(
                (
                    p
                    for p in message.iter_parts()
                    if p.get_param("name", header="content-disposition") == "content"
                ),
                None,
            )
            if part is None:
                raise ApiError(400, "multipart upload needs a part named 'content'")
            content_type = (
                part.get_content_type() if part.get("Content-Type") else "application/octet-stream"
            )
            body = tempfile.SpooledTemporaryFile()
            payload = part.get_payload(decode=True)
            body.write(payload if isinstance(payload, bytes) else b"")
            body.seek(0)
        metadata = {
            k.lower()[len(META_HEADER_PREFIX) :]: v
            for k, v in req.headers.items()
            if k.lower().startswith(META_HEADER_PREFIX)
        }
        blob = uuid.uuid4().hex
        checksum, size = self._store_blob(body, blob)
        entry = _Entry(
            self._address(repo, blob),
            blob,
            checksum,
            size,
            int(time.time()),
            content_type,
            metadata,
        )
        try:
            return _json(201, self._stage(repo, req.params["branch"], path, entry, req.headers))
        except ApiError:
            (self.blobs / blob).unlink(missing_ok=True)
            raise

    def _delete(self, repo: _Repo, branch: _Branch, path: str) -> None:
        if path in repo.commits[branch.commit_id].tree:
            branch.staging[path] = None
        else:
            branch.staging.pop(path, None)

    def delete_object(self, req: _Request) -> _Response:
        path = req.required("path")
        with self.lock:
            repo = self._repo(req.params["repository"])
            self._delete(repo, self._writable(repo, req.params["branch"]), path)
        return _Response(204)

    def delete_objects(self, req: _Request) -> _Response:
        paths = req.json().get("paths")
        if not isinstance(paths, list):
            raise ApiError(400, "paths is required")
        if len(paths) > MAX_DELETE_OBJECTS:
            raise ApiError(400, f"too many paths: {len(paths)} > {MAX_DELETE_OBJECTS}")
        with self.lock:
            repo = self._repo(req.params["repository"])
            branch = self._writable(repo, req.params["branch"])
            for path in paths:
                self._delete(repo, branch, path)
        return _json(200, {"errors": []})

    def copy_object(self, req: _Request) -> _Response:
        dest_path, body = req.required("dest_path"), req.json()
        src_path = body.get("src_path")
        if not isinstance(src_path, str):
            raise ApiError(400, "src_path is required")
        with self.lock:
            repo = self._repo(req.params["repository"])
            self._writable(repo, req.params["branch"])
            source = self._view(repo, body.get("src_ref") or req.params["branch"]).get(src_path)
        if source is None:
            raise ApiError(404, "object not found")
        blob = source.blob
        if not body.get("shallow"):
            blob = uuid.uuid4().hex
            shutil.copyfile(self.blobs / source.blob, self.blobs / blob)
        entry = _Entry(
            self._address(repo, blob),
            blob,
            source.checksum,
            source.size,
            int(time.time()),
            source.content_type,
            dict(source.metadata),
        )
        return _json(201, self._stage(repo, req.params["branch"], dest_path, entry, {}))

    def get_staging(self, req: _Request) -> _Response:
        req.required("path")
        presign = bool(req.flag("presign", False))
        if presign and not self.presign:
            raise ApiError(405, "operation not supported: presign is disabled")
        with self.lock:
            repo = self._repo(req.params["repository"])
            self._writable(repo, req.params["branch"])
            blob = uuid.uuid4().hex
            self.pending[blob] = repo.id
        location: dict[str, Any] = {
            "physical_address": self._address(repo, blob),
            "presigned_url": None,
        }
        if presign:
            url, expiry = self._presigned_url(blob)
            location.update(presigned_url=url, presigned_url_expiry=expiry)
        return _json(200, location)

    def link_staging(self, req: _Request) -> _Response:
        path, body = req.required("path"), req.json()
        staging = body.get("staging") or {}
        address = staging.get("physical_address") or ""
        if not isinstance(body.get("checksum"), str) or not isinstance(body.get("size_bytes"), int):
            raise ApiError(400, "checksum and size_bytes are required")
        with self.lock:
            repo = self._repo(req.params["repository"])
            blob = address.rsplit("/", 1)[-1]
            if self.pending.get(blob) != repo.id or address != self._address(repo, blob):
                raise ApiError(400, "physical address was not issued for this repository")
            if not (self.blobs / blob).exists():
                raise ApiError(400, "nothing was uploaded to the physical address")
            del self.pending[blob]
        entry = _Entry(
            address,
            blob,
            body["checksum"],
            body["size_bytes"],
            int(time.time()),
            body.get("content_type") or "application/octet-stream",
            dict(body.get("user_metadata") or {}),
        )
        return _json(200, self._stage(repo, req.params["branch"], path, entry, req.headers))

    # -- presigned URLs (no lakeFS auth; the signature is the credential)

    def presigned_blob(self, req: _Request) -> _Response:
        blob = req.params["blob"]
        if not re.fullmatch(r"[0-9a-f]{32}", blob):
            raise ApiError(404, "not found")
        expires, signature = req.arg("expires", "") or "", req.arg("signature", "") or ""
        expected = hmac.new(
            self.secret.encode(), f"{blob}:{expires}".encode(), "sha256"
        ).hexdigest()
        if not hmac.compare_digest(signature, expected) or not expires.isdigit():
            raise ApiError(403, "invalid signature")
        if int(expires) < time.time():
            raise ApiError(403, "presigned URL expired")
        if req.method == "PUT":
            with self.lock:
                if blob not in self.pending or (self.blobs / blob).exists():
                    raise ApiError(403, "upload not allowed to this address")
            checksum, _ = self._store_blob(req.body, blob)
            return _Response(200, headers={"ETag": f'"{checksum}"'})
        if req.method not in ("GET", "HEAD"):
            raise ApiError(405, "method not allowed")
        path = self.blobs / blob
        if not path.exists():
            raise ApiError(404, "not found")
        size = path.stat().st_size
        checksum = hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()
        entry = _Entry(
            "", blob, checksum, size, int(path.stat().st_mtime), "application/octet-stream"
        )
        return self._object_response(entry, req.headers)


# --------------------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _HTTPServer

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
        owner = self.server.owner
        parts = urlsplit(self.path)
        key, handler, params = owner.api.route(self.command, parts.path)
        owner.count(key)  # count before answering: the client moves on right after
        try:
            body = self._read_body()
        except (ValueError, ConnectionError):
            self.close_connection = True
            self._send(_json(400, {"message": "malformed request body"}))
            return
        try:
            if handler is None:
                raise ApiError(404, "path not found")
            needs_auth = handler not in (owner.api.healthcheck, owner.api.presigned_blob)
            if needs_auth:
                owner.api.authenticate(self.headers.get("Authorization"))
            query = parse_qs(parts.query, keep_blank_values=True)
            request = _Request(self.command, params, query, self.headers, body)
            response = handler(request)
        except ApiError as error:
            response = _json(error.status, {"message": error.message}, error.headers)
        except Exception as error:  # a bug in the stand-in: answer 500 and keep it for tests
            owner.errors.append(traceback.format_exc())
            logger.exception("lakeFS stand-in failed on %s %s", self.command, self.path)
            response = _json(500, {"message": f"internal error: {error}"})
        finally:
            body.close()
        self._send(response)

    def _send(self, response: _Response) -> None:
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


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    owner: LakeFSServer


class LakeFSServer:
    """A lakeFS stand-in serving the lakeFS REST API on 127.0.0.1, with HTTP Basic auth.

    It speaks the API subset that `lakefs-spec` and the `lakefs` SDK use, with lakeFS's
    semantics: reads at a branch see staged writes, reads at a commit id, a tag,
    `branch@` or `branch~N` see committed data only.

    Args:
        root: Folder for object data; a temporary folder (removed on `stop`) when `None`.
        access_key_id: Access key ID to accept (a fixed test key when `None`).
        secret_access_key: Secret to accept (random per instance when `None`).
        presign: Advertise presigned URL support, like an S3-backed lakeFS: reads then
            redirect (302) to `/_presigned/...` on this server and uploads go through
            the staging API. `False` (the default) matches lakeFS's local blockstore.

    Attributes:
        requests: `collections.Counter` of requests by route, keyed like
            `"GET /api/v1/repositories/{repository}/refs/{ref}/objects"`.
        errors: Tracebacks of internal errors (answered as 500); empty if all is well.

    Example:

    ```python
    with LakeFSServer() as lakefs_server:
        fs = LakeFSFileSystem(**lakefs_server.storage_options)
    ```
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        *,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        presign: bool = False,
    ) -> None:
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="lakefsroot-"))
        self.access_key_id = access_key_id or "AKIAREMOTEKERASTEST0"
        self.secret_access_key = secret_access_key or secrets.token_urlsafe(30)
        self.api = _Api(self.root, self.access_key_id, self.secret_access_key, presign)
        self.requests: collections.Counter[str] = collections.Counter()
        self.errors: list[str] = []
        self.port = 0
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """Keyword arguments of `lakefs_spec.LakeFSFileSystem` that reach this server."""
        return {
            "host": self.endpoint_url,
            "username": self.access_key_id,
            "password": self.secret_access_key,
        }

    def __repr__(self) -> str:
        return f"LakeFSServer(endpoint_url={self.endpoint_url!r}, root={str(self.root)!r})"

    def count(self, key: str) -> None:
        with self._lock:
            self.requests[key] += 1

    def reset(self) -> collections.Counter[str]:
        """Returns the request counts so far and starts counting from zero."""
        with self._lock:
            counts, self.requests = self.requests, collections.Counter()
        return counts

    def start(self) -> LakeFSServer:
        """Starts serving on a free port of 127.0.0.1 (in a daemon thread)."""
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self.port = self._httpd.server_address[1]
        self.api.endpoint_url = self.endpoint_url
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"lakefs-stand-in-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the server (and removes its temporary root)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LakeFSServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- target


@dataclass(repr=False)
class LakeFSTarget:
    """Where lakeFS tests run: this stand-in (`server` is set) or a real lakeFS.

    Attributes:
        name: `"stand-in"` or `"real"`.
        endpoint_url: The lakeFS URL (no `/api/v1`).
        storage_options: Keyword arguments of `lakefs_spec.LakeFSFileSystem`.
        server: The `LakeFSServer` for the stand-in, `None` for a real lakeFS.
    """

    name: str
    endpoint_url: str
    storage_options: dict[str, Any]
    server: LakeFSServer | None = None

    @property
    def is_stand_in(self) -> bool:
        return self.server is not None

    def __str__(self) -> str:
        return f"target={self.name} ({self.endpoint_url})"

    __repr__ = __str__  # no secrets in test reports


@contextlib.contextmanager
def lakefs_target(**server_kwargs: Any) -> Iterator[LakeFSTarget]:
    """Yields the lakeFS to test against: a real one if configured, else a `LakeFSServer`.

    A real lakeFS is used when `REMOTE_KERAS_LAKEFS_URL` is set; it then also needs
    `REMOTE_KERAS_LAKEFS_ACCESS_KEY_ID` and `REMOTE_KERAS_LAKEFS_SECRET_ACCESS_KEY`.

    Args:
        **server_kwargs: Passed to `LakeFSServer` when the stand-in is used.

    Raises:
        RuntimeError: If the URL is set but a credential variable is missing.
    """
    url = os.environ.get(ENV_URL, "").strip()
    if not url:
        with LakeFSServer(**server_kwargs) as server:
            yield LakeFSTarget("stand-in", server.endpoint_url, server.storage_options, server)
        return
    key, secret = os.environ.get(ENV_ACCESS_KEY_ID), os.environ.get(ENV_SECRET_ACCESS_KEY)
    if not key or not secret:
        raise RuntimeError(
            f"{ENV_URL} is set, so {ENV_ACCESS_KEY_ID} and {ENV_SECRET_ACCESS_KEY} must be too"
        )
    yield LakeFSTarget("real", url, {"host": url, "username": key, "password": secret})


def main() -> None:
    """Serves a stand-in from its own process (for benchmarks): prints its options as JSON."""
    import signal

    server = LakeFSServer().start()

    def stop(*_: object) -> None:
        server.stop()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    print(json.dumps(server.storage_options), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
