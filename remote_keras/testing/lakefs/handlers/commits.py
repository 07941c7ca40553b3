"""Commits, the log, diffs, merges and reverts."""

from __future__ import annotations

from remote_keras.testing.lakefs import refs
from remote_keras.testing.lakefs.model import (
    ApiError,
    Branch,
    Commit,
    Entry,
    Repo,
    Tree,
    View,
    changes,
    identity,
    is_dirty,
    page,
    staged_changes,
)
from remote_keras.testing.lakefs.state import State
from remote_keras.testing.lakefs.transport import (
    Request,
    Response,
    json_response,
    pagination,
    route,
)

_R = "/repositories/{repository}"


@route("POST", _R + "/branches/{branch}/commits")
def commit(state: State, req: Request) -> Response:
    body = req.json()
    if not isinstance(body.get("message"), str):
        raise ApiError(400, "commit message is required")
    with state.lock:
        repo, name = state.repo(req.params["repository"]), req.params["branch"]
        branch = state.writable(repo, name, "commit to")
        if not is_dirty(refs.head(repo, branch).tree, branch.staging) and not body.get(
            "allow_empty"
        ):
            raise ApiError(400, "commit: no changes")
        made = state.commit_staging(
            repo, name, branch, body["message"], body.get("metadata"), body.get("date")
        )
        return json_response(201, state.commit_json(made))


@route("GET", _R + "/commits/{commitId}")
def get_commit(state: State, req: Request) -> Response:
    with state.lock:
        found, _ = refs.resolve(state.repo(req.params["repository"]), req.params["commitId"])
        return json_response(200, state.commit_json(found))


@route("GET", _R + "/refs/{ref}/commits")
def log_commits(state: State, req: Request) -> Response:
    objects, prefixes = req.query.get("objects", []), req.query.get("prefixes", [])
    stop_at = req.arg("stop_at") or None
    with state.lock:
        repo = state.repo(req.params["repository"])
        start, _ = refs.resolve(repo, req.params["ref"])
        stop_id = refs.resolve(repo, stop_at)[0].id if stop_at else None
        commits = refs.ancestors(repo, start, bool(req.flag("first_parent", False)))
        if stop_id:
            ids = [c.id for c in commits]
            commits = commits[: ids.index(stop_id) + 1] if stop_id in ids else commits
        if objects or prefixes:

            def touches(c: Commit) -> bool:
                before = repo.commits[c.parents[0]].tree.entries if c.parents else {}
                return any(
                    (p in objects or any(p.startswith(x) for x in prefixes))
                    and identity(before.get(p)) != identity(e)
                    for p, e in c.delta.items()
                )

            commits = [c for c in commits if touches(c)]
    after, amount = req.arg("after", "") or "", req.amount()
    ids = [c.id for c in commits]
    first = ids.index(after) + 1 if after in ids else 0
    found = commits[first : first + amount]
    more = first + amount < len(commits) and not req.flag("limit", False)
    next_offset = found[-1].id if found else ""
    results = [state.commit_json(c) for c in found]
    return json_response(
        200, {"pagination": pagination(len(found), more, next_offset), "results": results}
    )


def _diff_response(req: Request, records: list[tuple[str, dict]]) -> Response:
    found, more = page(
        View.of(dict(records)),
        req.arg("prefix", "") or "",
        req.arg("delimiter", "") or "",
        req.arg("after", "") or "",
        req.amount(),
    )
    results = [
        record or {"type": "prefix_changed", "path": path, "path_type": "common_prefix"}
        for path, record in found
    ]
    next_offset = found[-1][0] if found else ""
    return json_response(
        200, {"pagination": pagination(len(found), more, next_offset), "results": results}
    )


@route("GET", _R + "/branches/{branch}/diff")
def diff_branch(state: State, req: Request) -> Response:
    with state.lock:
        repo = state.repo(req.params["repository"])
        branch = state.branch(repo, req.params["branch"])
        records = staged_changes(refs.head(repo, branch).tree, branch.staging)
    return _diff_response(req, records)


@route("GET", _R + "/refs/{leftRef}/diff/{rightRef}")
def diff_refs(state: State, req: Request) -> Response:
    # Ref diffs compare commits: a branch stands for its head commit, staging is ignored.
    with state.lock:
        repo = state.repo(req.params["repository"])
        left, _ = refs.resolve(repo, req.params["leftRef"])
        right, _ = refs.resolve(repo, req.params["rightRef"])
        if (req.arg("type") or "three_dot") == "three_dot":
            left = refs.merge_base(repo, left, right) or left
        records = changes(left.tree.entries, right.tree.entries)
    return _diff_response(req, records)


@route("GET", _R + "/refs/{sourceRef}/merge/{destinationBranch}")
def merge_base(state: State, req: Request) -> Response:
    with state.lock:
        repo = state.repo(req.params["repository"])
        source, _ = refs.resolve(repo, req.params["sourceRef"])
        dest = refs.head(repo, state.branch(repo, req.params["destinationBranch"]))
        base = refs.merge_base(repo, source, dest)
        if base is None:
            raise ApiError(404, "no merge base found")
    return json_response(
        200,
        {
            "source_commit_id": source.id,
            "destination_commit_id": dest.id,
            "base_commit_id": base.id,
        },
    )


def _commit_tree(
    state: State,
    repo: Repo,
    name: str,
    branch: Branch,
    parents: list[str],
    message: str,
    tree: dict[str, Entry],
    metadata: dict[str, str] | None,
    allow_empty: bool,
) -> Commit:
    """Commits a merged or reverted `tree` onto a clean branch, as lakeFS does."""
    head = refs.head(repo, branch)
    if is_dirty(head.tree, branch.staging):
        raise ApiError(400, "uncommitted changes (dirty branch)")
    current = head.tree.entries
    same = tree.keys() == current.keys() and all(
        identity(tree[p]) == identity(current[p]) for p in tree
    )
    if same and not allow_empty:
        raise ApiError(400, "no changes")
    made = state.new_commit(repo, parents, message, Tree(tree), metadata=metadata)
    state.advance(repo, name, branch, made)
    return made


@route("POST", _R + "/refs/{sourceRef}/merge/{destinationBranch}")
def merge(state: State, req: Request) -> Response:
    body = req.json() or {}
    source_ref, dest_name = req.params["sourceRef"], req.params["destinationBranch"]
    with state.lock:
        repo = state.repo(req.params["repository"])
        source, _ = refs.resolve(repo, source_ref)
        branch = state.branch(repo, dest_name)
        if repo.read_only and not body.get("force"):
            raise ApiError(403, "repository is read-only")
        dest = refs.head(repo, branch)
        base = refs.merge_base(repo, source, dest)
        tree = refs.three_way(
            base.tree.entries if base else {},
            source.tree.entries,
            dest.tree.entries,
            body.get("strategy") or "",
        )
        message = body.get("message") or f"Merge '{source_ref}' into '{dest_name}'"
        parents = [dest.id] if body.get("squash_merge") else [dest.id, source.id]
        allow_empty = bool(body.get("allow_empty") or body.get("force"))
        made = _commit_tree(
            state,
            repo,
            dest_name,
            branch,
            parents,
            message,
            tree,
            body.get("metadata"),
            allow_empty,
        )
    return json_response(200, {"reference": made.id})


@route("POST", _R + "/branches/{branch}/revert")
def revert_branch(state: State, req: Request) -> Response:
    body = req.json()
    if not isinstance(body.get("ref"), str):
        raise ApiError(400, "ref is required")
    parent_number = int(body.get("parent_number") or 0)
    with state.lock:
        repo, name = state.repo(req.params["repository"]), req.params["branch"]
        branch = state.writable(repo, name, "commit to")
        target, _ = refs.resolve(repo, body["ref"])
        if not target.parents:
            raise ApiError(400, "cannot revert a commit without parents")
        if len(target.parents) > 1 and parent_number <= 0:
            raise ApiError(400, "must specify 1-based parent number for reverting merge commit")
        if parent_number > len(target.parents):
            raise ApiError(400, "parent number out of range")
        parent = repo.commits[target.parents[max(parent_number, 1) - 1]]
        head = refs.head(repo, branch)
        tree = refs.three_way(target.tree.entries, parent.tree.entries, head.tree.entries, "")
        overrides = body.get("commit_overrides") or {}
        message = overrides.get("message") or f"Revert {body['ref']}"
        metadata, allow_empty = overrides.get("metadata"), bool(body.get("allow_empty"))
        _commit_tree(state, repo, name, branch, [head.id], message, tree, metadata, allow_empty)
    return Response(204)
