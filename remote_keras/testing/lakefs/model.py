"""The lakeFS stand-in's data model: repositories, branches, commits, trees and staging areas.

Object versions (`Entry`) are immutable and shared by staging areas and commits. A commit's
`Tree` never changes once made and sorts its paths once, on first listing, so each page of a
listing is a bisection, not a sort. A branch's `Staging` takes writes without copying
anything; a `View` is what a ref shows: a commit's tree, plus the staging area when reading
at a branch.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")

VERSION = "1.70.0"  # the lakeFS version the stand-in reports
DEFAULT_PER_PAGE = 100
MAX_PER_PAGE = 1000
MAX_DELETE_OBJECTS = 1000
PRESIGN_EXPIRY_S = 900
META_HEADER_PREFIX = "x-lakefs-meta-"


class ApiError(Exception):
    """An error answered as lakeFS does: a status and a JSON `{"message": ...}` body."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclass(frozen=True, slots=True)
class Entry:
    """One object version."""

    address: str
    blob: str
    checksum: str
    size: int
    mtime: int
    content_type: str
    metadata: dict[str, str] = field(default_factory=dict)


class Tree(Generic[T]):
    """An immutable `path -> value` mapping whose sorted paths are computed once."""

    __slots__ = ("_paths", "entries")

    def __init__(self, entries: dict[str, T] | None = None) -> None:
        self.entries: dict[str, T] = entries if entries is not None else {}
        self._paths: list[str] | None = None

    @property
    def paths(self) -> list[str]:
        """The paths, sorted (computed on first use, then cached)."""
        if self._paths is None:
            self._paths = sorted(self.entries)
        return self._paths

    def __len__(self) -> int:
        return len(self.entries)


class Staging:
    """A branch's uncommitted changes: `path -> Entry`, or `None` for a deletion.

    Writes go into a dict; the sorted paths a listing needs are merged in on demand
    (new paths sorted alone, then one linear merge), so neither writes nor listings copy
    or re-sort the whole area.
    """

    __slots__ = ("_new", "_sorted", "changes")

    def __init__(self, changes: dict[str, Entry | None] | None = None) -> None:
        self.changes: dict[str, Entry | None] = changes if changes is not None else {}
        self._sorted: list[str] | None = None
        self._new: list[str] = []

    def __len__(self) -> int:
        return len(self.changes)

    def __contains__(self, path: str) -> bool:
        return path in self.changes

    def set(self, path: str, entry: Entry | None) -> None:
        if path not in self.changes and self._sorted is not None:
            self._new.append(path)
        self.changes[path] = entry

    def discard(self, path: str) -> None:
        if self.changes.pop(path, False) is not False:
            self._sorted, self._new = None, []  # rebuilt on the next listing

    @property
    def paths(self) -> list[str]:
        if self._sorted is None:
            self._sorted, self._new = sorted(self.changes), []
        elif self._new:
            self._new.sort()
            self._sorted.extend(self._new)
            self._sorted.sort()  # two sorted runs: a linear merge
            self._new = []
        return self._sorted


def identity(entry: Entry | None) -> str | None:
    """What diff, commit and merge compare: the checksum (not address, mtime or metadata)."""
    return None if entry is None else entry.checksum


@dataclass
class Commit:
    id: str
    parents: list[str]
    committer: str
    message: str
    created: float
    seq: int
    meta_range_id: str
    metadata: dict[str, str]
    generation: int
    tree: Tree[Entry]
    # What changed against the first parent (or everything, for a root commit): `None` for
    # removals; some paths may hold an equal version. Persisted; used by the log's filters.
    delta: dict[str, Entry | None]


@dataclass
class Branch:
    commit_id: str
    staging: Staging = field(default_factory=Staging)
    hidden: bool = False


@dataclass
class Repo:
    id: str
    creation_date: int
    default_branch: str
    storage_namespace: str
    read_only: bool = False
    branches: dict[str, Branch] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    protection: list[str] = field(default_factory=list)

    def address(self, blob: str) -> str:
        """The physical address of a blob of this repository."""
        return f"{self.storage_namespace.rstrip('/')}/data/{blob}"


class View(Generic[T]):
    """What a ref shows, in path order: a tree, overlaid with a staging area if any."""

    __slots__ = ("staging", "tree")

    def __init__(self, tree: Tree[T], staging: Staging | None = None) -> None:
        self.tree = tree
        self.staging = staging

    @classmethod
    def of(cls, items: Mapping[str, T]) -> View[T]:
        return cls(Tree(dict(items)))

    def get(self, path: str) -> T | None:
        if self.staging is not None and path in self.staging.changes:
            return self.staging.changes[path]  # type: ignore[return-value]
        return self.tree.entries.get(path)

    def walk(self, start: str, strict: bool) -> Iterator[tuple[str, T]]:
        """Visible `(path, value)` pairs from `start` on (after it, if `strict`), in order."""
        find = bisect.bisect_right if strict else bisect.bisect_left
        keys, entries = self.tree.paths, self.tree.entries
        staged = self.staging.paths if self.staging is not None else []
        changes: dict[str, Any] = self.staging.changes if self.staging is not None else {}
        i, j, n, m = find(keys, start), find(staged, start), len(keys), len(staged)
        while i < n or j < m:
            if j >= m or (i < n and keys[i] < staged[j]):
                path, value = keys[i], entries[keys[i]]
                i += 1
            else:
                path, value = staged[j], changes[staged[j]]
                j += 1
                if i < n and keys[i] == path:
                    i += 1
            if value is not None:
                yield path, value

    def materialize(self) -> dict[str, T]:
        """The whole view as a new dict (O(size): for commits, merges and diffs)."""
        view = dict(self.tree.entries)
        if self.staging is not None:
            for path, entry in self.staging.changes.items():
                if entry is None:
                    view.pop(path, None)
                else:
                    view[path] = entry  # type: ignore[assignment]
        return view


def _successor(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with `prefix`."""
    while prefix and ord(prefix[-1]) == 0x10FFFF:
        prefix = prefix[:-1]
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else None


def page(
    view: View[T], prefix: str, delimiter: str, after: str, amount: int
) -> tuple[list[tuple[str, T | None]], bool]:
    """One page of `view` under `prefix`, after `after`; common prefixes get value `None`.

    Seeks by bisection: the cost is the page's, not the view's size. Returns the page and
    whether more follows.
    """
    start, strict = (after, True) if after >= prefix else (prefix, False)
    out: list[tuple[str, T | None]] = []
    while True:
        seek: str | None = None
        for path, value in view.walk(start, strict):
            if not path.startswith(prefix):
                return out, False
            cut = path.find(delimiter, len(prefix)) if delimiter else -1
            if cut < 0:
                if len(out) == amount:
                    return out, True
                out.append((path, value))
                continue
            common = path[: cut + len(delimiter)]
            if common > after:
                if len(out) == amount:
                    return out, True
                out.append((common, None))
            seek = _successor(common)  # skip the rest of this common prefix
            break
        if seek is None:
            return out, False
        start, strict = seek, False


def changes(left: Mapping[str, Entry], right: Mapping[str, Entry]) -> list[tuple[str, dict]]:
    """Diff records turning `left` into `right`, sorted by path."""
    out = []
    for path in sorted(left.keys() | right.keys()):
        record = change_record(path, left.get(path), right.get(path))
        if record is not None:
            out.append((path, record))
    return out


def staged_changes(head: Tree[Entry], staging: Staging) -> list[tuple[str, dict]]:
    """Diff records of a branch's staging area against its head commit, sorted by path."""
    out = []
    for path in staging.paths:
        record = change_record(path, head.entries.get(path), staging.changes[path])
        if record is not None:
            out.append((path, record))
    return out


def is_dirty(head: Tree[Entry], staging: Staging) -> bool:
    """Whether the staging area changes anything in `head` (by checksum)."""
    entries = head.entries
    return any(identity(entries.get(p)) != identity(e) for p, e in staging.changes.items())


def change_record(path: str, a: Entry | None, b: Entry | None) -> dict | None:
    if identity(a) == identity(b):
        return None
    kind = "added" if a is None else "removed" if b is None else "changed"
    size = (b or a).size  # type: ignore[union-attr]
    return {"type": kind, "path": path, "path_type": "object", "size_bytes": size}
