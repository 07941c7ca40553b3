"""Health, configuration, repositories and branch protection."""

from __future__ import annotations

import hashlib
import json
import re
import time

from remote_keras.testing.lakefs.model import VERSION, ApiError, Branch, Repo, Tree
from remote_keras.testing.lakefs.state import State
from remote_keras.testing.lakefs.transport import (
    Request,
    Response,
    json_response,
    paged_json,
    route,
)

REPO_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
BRANCH_NAME = re.compile(r"^\w[-\w]*$")
NAMESPACE = re.compile(r"^(s3|gs|https?|mem|local|transient)://.*$")
_R = "/repositories/{repository}"


@route("GET", "/healthcheck", auth=False)
def healthcheck(state: State, req: Request) -> Response:
    return Response(204)


@route("GET", "/config")
def get_config(state: State, req: Request) -> Response:
    storage = state.storage_config()
    return json_response(
        200,
        {
            "version_config": {"version": VERSION, "upgrade_recommended": False},
            "storage_config": storage,
            "storage_config_list": [storage],
            "ui_config": {},
            "capabilities_config": {},
        },
    )


@route("GET", "/config/version")
def get_version(state: State, req: Request) -> Response:
    return json_response(200, {"version": VERSION, "upgrade_recommended": False})


@route("GET", "/config/storage")
def get_storage_config(state: State, req: Request) -> Response:
    return json_response(200, state.storage_config())


@route("GET", "/repositories")
def list_repositories(state: State, req: Request) -> Response:
    search = req.arg("search", "") or ""
    with state.lock:
        items = [(n, state.repo_json(r)) for n, r in sorted(state.repos.items()) if search in n]
    return paged_json(req, items)


@route("POST", "/repositories")
def create_repository(state: State, req: Request) -> Response:
    body = req.json()
    name, namespace = body.get("name") or "", body.get("storage_namespace") or ""
    if not REPO_NAME.match(name):
        raise ApiError(400, f"invalid repository name {name!r}")
    if not NAMESPACE.match(namespace):
        raise ApiError(400, f"invalid storage namespace {namespace!r}")
    default_branch = body.get("default_branch") or "main"
    if not BRANCH_NAME.match(default_branch):
        raise ApiError(400, f"invalid branch name {default_branch!r}")
    with state.lock:
        if name in state.repos:
            raise ApiError(409, "repository already exists")
        if namespace.rstrip("/") in state.namespaces:  # lakeFS leaves data behind on delete
            raise ApiError(400, f"storage namespace already in use: {namespace}")
        state.store.add_namespace(namespace.rstrip("/"))
        state.namespaces.add(namespace.rstrip("/"))
        repo = Repo(name, int(time.time()), default_branch, namespace)
        repo.read_only = bool(body.get("read_only"))
        state.store.save_repo(repo)
        if not req.flag("bare", False):
            first = state.new_commit(repo, [], "Repository created", Tree(), committer="")
            branch = Branch(first.id)
            if body.get("sample_data"):
                sample = state.new_commit(
                    repo, [first.id], "Add sample data", state.sample_data(repo)
                )
                branch.commit_id = sample.id
            state.store.save_branch(repo.id, default_branch, branch)
            repo.branches[default_branch] = branch
        state.repos[name] = repo
        return json_response(201, state.repo_json(repo))


@route("GET", _R)
def get_repository(state: State, req: Request) -> Response:
    with state.lock:
        return json_response(200, state.repo_json(state.repo(req.params["repository"])))


@route("DELETE", _R)
def delete_repository(state: State, req: Request) -> Response:
    with state.lock:
        repo = state.repo(req.params["repository"])
        if repo.read_only and not req.flag("force", False):
            raise ApiError(403, "repository is read-only")
        state.store.delete_repo(repo.id)
        del state.repos[repo.id]
    return Response(204)


@route("GET", _R + "/metadata")
def get_repository_metadata(state: State, req: Request) -> Response:
    with state.lock:
        state.repo(req.params["repository"])
    return json_response(200, {})


def _rules_etag(patterns: list[str]) -> str:
    rules = [{"pattern": p} for p in patterns]
    return hashlib.md5(json.dumps(rules).encode(), usedforsecurity=False).hexdigest()


@route("GET", _R + "/settings/branch_protection")
def get_protection(state: State, req: Request) -> Response:
    with state.lock:
        patterns = list(state.repo(req.params["repository"]).protection)
    rules = [{"pattern": p} for p in patterns]
    return json_response(200, rules, {"ETag": f'"{_rules_etag(patterns)}"'})


@route("PUT", _R + "/settings/branch_protection")
def set_protection(state: State, req: Request) -> Response:
    rules = req.json()
    if not isinstance(rules, list) or not all(
        isinstance(r, dict) and r.get("pattern") for r in rules
    ):
        raise ApiError(400, "invalid branch protection rules")
    with state.lock:
        repo = state.repo(req.params["repository"])
        if_match = req.headers.get("If-Match")
        if if_match and if_match.strip('"') != _rules_etag(repo.protection):
            raise ApiError(412, "precondition failed")
        repo.protection = [r["pattern"] for r in rules]
        state.store.save_repo(repo)
    return Response(204)
