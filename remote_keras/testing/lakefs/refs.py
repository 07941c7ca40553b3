"""The commit graph: ref expressions, ancestry, merge bases and three-way merges.

Ref expressions are resolved as lakeFS does: a branch, tag, commit id or unique commit id
prefix, then any of `~N` (N first parents back), `^N` (the N-th parent) and a final `@`
(the committed state of a branch, without its staging area).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping

from remote_keras.testing.lakefs.model import (
    ApiError,
    Branch,
    Commit,
    Entry,
    Repo,
    Tree,
    View,
    identity,
)

REF_EXPR = re.compile(r"^(?P<base>[^~^@]+)(?P<mods>(?:[~^]\d*)*)(?P<at>@?)$")
HEX = re.compile(r"^[0-9a-f]{6,64}$")
_MODIFIER = re.compile(r"([~^])(\d*)")


def resolve(repo: Repo, ref: str) -> tuple[Commit, Branch | None]:
    """Resolves a ref expression to a commit, plus the branch when staging is visible."""
    match = REF_EXPR.match(ref)
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
        found = [c for c in repo.commits if HEX.match(base) and c.startswith(base)]
        if len(found) != 1:
            raise ApiError(404, f"{ref}: reference not found")
        commit_id = found[0]
    commit = repo.commits[commit_id]
    for op, digits in _MODIFIER.findall(mods):
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


def view(repo: Repo, ref: str) -> View[Entry]:
    """What `ref` shows: a branch's staged state, or a commit's tree."""
    commit, branch = resolve(repo, ref)
    return View(commit.tree, branch.staging if branch is not None else None)


def head(repo: Repo, branch: Branch) -> Commit:
    return repo.commits[branch.commit_id]


def ancestors(repo: Repo, commit: Commit, first_parent: bool = False) -> list[Commit]:
    """All commits reachable from `commit`, newest first (ties broken by creation order)."""
    seen: dict[str, Commit] = {}
    todo = [commit]
    while todo:
        current = todo.pop()
        if current.id in seen:
            continue
        seen[current.id] = current
        parents = current.parents[:1] if first_parent else current.parents
        todo.extend(repo.commits[p] for p in parents)
    return sorted(seen.values(), key=lambda c: (c.created, c.seq), reverse=True)


def merge_base(repo: Repo, a: Commit, b: Commit) -> Commit | None:
    reachable = {c.id for c in ancestors(repo, a)}
    return next((c for c in ancestors(repo, b) if c.id in reachable), None)


def three_way(
    base: Mapping[str, Entry],
    source: Mapping[str, Entry],
    dest: Mapping[str, Entry],
    strategy: str,
) -> dict[str, Entry]:
    """Applies the changes base -> source onto dest; 409 on conflicts (unless a strategy)."""
    result = dict(dest)
    for path in base.keys() | source.keys() | dest.keys():
        b, s, d = (identity(t.get(path)) for t in (base, source, dest))
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


def delta(parent: Mapping[str, Entry], tree: Mapping[str, Entry]) -> dict[str, Entry | None]:
    """The versions of `tree` that are not those of `parent` (`None`: removed)."""
    out: dict[str, Entry | None] = {p: e for p, e in tree.items() if parent.get(p) is not e}
    out.update((p, None) for p in parent.keys() - tree.keys())
    return out


def meta_range_id(tree: Tree[Entry]) -> str:
    """A content hash of a tree (paths and checksums), like lakeFS's meta-range id."""
    digest = hashlib.sha256()
    entries = tree.entries
    for path in tree.paths:
        digest.update(f"{path}\0{entries[path].checksum}\n".encode())
    return digest.hexdigest()


def new_commit_id(repo: Repo, parents: list[str], message: str, seed: object) -> str:
    text = json.dumps([repo.id, parents, message, seed], default=str) + uuid.uuid4().hex
    return hashlib.sha256(text.encode()).hexdigest()
