"""Branches and tags."""

from __future__ import annotations

import re
from collections.abc import Iterable

from remote_keras.testing.lakefs import refs
from remote_keras.testing.lakefs.handlers.repositories import BRANCH_NAME
from remote_keras.testing.lakefs.model import ApiError, Branch
from remote_keras.testing.lakefs.state import State
from remote_keras.testing.lakefs.transport import (
    Request,
    Response,
    json_response,
    paged_json,
    route,
)

TAG_NAME = re.compile(r"^\w[-\w.]*$")
_R = "/repositories/{repository}"


def _ref_list(req: Request, pairs: Iterable[tuple[str, str]]) -> Response:
    items = [(name, {"id": name, "commit_id": commit}) for name, commit in sorted(pairs)]
    return paged_json(req, items)


# -- tags


@route("GET", _R + "/tags")
def list_tags(state: State, req: Request) -> Response:
    with state.lock:
        return _ref_list(req, state.repo(req.params["repository"]).tags.items())


@route("POST", _R + "/tags")
def create_tag(state: State, req: Request) -> Response:
    body = req.json()
    name, ref = body.get("id") or "", body.get("ref") or ""
    if not TAG_NAME.match(name):
        raise ApiError(400, f"invalid tag id {name!r}")
    with state.lock:
        repo = state.repo(req.params["repository"])
        commit, _ = refs.resolve(repo, ref)
        if (name in repo.tags and not body.get("force")) or name in repo.branches:
            raise ApiError(409, "tag already exists")
        repo.tags[name] = commit.id
        state.store.save_repo(repo)
    return json_response(201, {"id": name, "commit_id": commit.id})


@route("GET", _R + "/tags/{tag}")
def get_tag(state: State, req: Request) -> Response:
    with state.lock:
        commit_id = state.repo(req.params["repository"]).tags.get(req.params["tag"])
    if commit_id is None:
        raise ApiError(404, "tag not found")
    return json_response(200, {"id": req.params["tag"], "commit_id": commit_id})


@route("DELETE", _R + "/tags/{tag}")
def delete_tag(state: State, req: Request) -> Response:
    with state.lock:
        repo = state.repo(req.params["repository"])
        if repo.tags.pop(req.params["tag"], None) is None:
            raise ApiError(404, "tag not found")
        state.store.save_repo(repo)
    return Response(204)


# -- branches


@route("GET", _R + "/branches")
def list_branches(state: State, req: Request) -> Response:
    show_hidden = req.flag("show_hidden", False)
    with state.lock:
        repo = state.repo(req.params["repository"])
        pairs = [(n, b.commit_id) for n, b in repo.branches.items() if show_hidden or not b.hidden]
        return _ref_list(req, pairs)


@route("POST", _R + "/branches")
def create_branch(state: State, req: Request) -> Response:
    body = req.json()
    name, source = body.get("name") or "", body.get("source") or ""
    if not BRANCH_NAME.match(name):
        raise ApiError(400, f"invalid branch name {name!r}")
    with state.lock:
        repo = state.repo(req.params["repository"])
        if name in repo.branches:
            raise ApiError(409, "branch already exists")
        if name in repo.tags:
            raise ApiError(409, "a tag with this name already exists")
        commit, _ = refs.resolve(repo, source)
        branch = Branch(commit.id, hidden=bool(body.get("hidden")))
        state.store.save_branch(repo.id, name, branch)
        repo.branches[name] = branch
    # lakeFS answers the new branch's commit id as text, not JSON.
    return Response(201, commit.id.encode(), {"Content-Type": "text/html"})


@route("GET", _R + "/branches/{branch}")
def get_branch(state: State, req: Request) -> Response:
    with state.lock:
        repo = state.repo(req.params["repository"])
        branch = state.branch(repo, req.params["branch"])
        return json_response(200, {"id": req.params["branch"], "commit_id": branch.commit_id})


@route("DELETE", _R + "/branches/{branch}")
def delete_branch(state: State, req: Request) -> Response:
    with state.lock:
        repo = state.repo(req.params["repository"])
        name = req.params["branch"]
        state.branch(repo, name)
        if name == repo.default_branch:
            raise ApiError(400, "cannot delete repository default branch")
        if not req.flag("force", False):
            state.writable(repo, name, "delete")
        state.store.delete_branch(repo.id, name)
        del repo.branches[name]
    return Response(204)
