"""Objects: reads (ranged, conditional), listings, uploads, deletes and copies."""

from __future__ import annotations

import email.parser
import email.policy
import email.utils
import shutil
import tempfile
import time
from typing import Any

from remote_keras.testing.lakefs.model import (
    MAX_DELETE_OBJECTS,
    META_HEADER_PREFIX,
    ApiError,
    Entry,
    Repo,
    page,
)
from remote_keras.testing.lakefs.state import State
from remote_keras.testing.lakefs.transport import (
    Request,
    Response,
    json_response,
    pagination,
    parse_range,
    route,
)

_REF = "/repositories/{repository}/refs/{ref}"
_BRANCH = "/repositories/{repository}/branches/{branch}"


def object_response(state: State, entry: Entry, headers: Any) -> Response:
    """The object's bytes (or the range asked for), with lakeFS's headers."""
    meta = {
        "Content-Type": entry.content_type,
        "ETag": f'"{entry.checksum}"',
        "Last-Modified": email.utils.formatdate(entry.mtime, usegmt=True),
        "Accept-Ranges": "bytes",
    }
    if headers.get("If-None-Match", "").strip('"') == entry.checksum:
        return Response(304, headers=meta)
    path = state.blobs / entry.blob
    span = parse_range(headers.get("Range"), entry.size)
    if span is None:
        return Response(200, headers=meta, file=(path, 0, entry.size))
    start, end = span
    meta["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
    return Response(206, headers=meta, file=(path, start, end - start + 1))


def _lookup(state: State, req: Request) -> tuple[Repo, Entry]:
    with state.lock:
        repo = state.repo(req.params["repository"])
        entry = state.view(repo, req.params["ref"]).get(req.required("path"))
    if entry is None:
        raise ApiError(404, "object not found")
    return repo, entry


@route("GET", _REF + "/objects/stat")
def stat_object(state: State, req: Request) -> Response:
    _, entry = _lookup(state, req)
    presign = bool(req.flag("presign", False)) and state.presign
    metadata = bool(req.flag("user_metadata", True))
    return json_response(200, state.stats_json(req.required("path"), entry, metadata, presign))


@route("GET", _REF + "/objects")
def get_object(state: State, req: Request) -> Response:
    _, entry = _lookup(state, req)
    if req.flag("presign", False):
        if not state.presign:
            raise ApiError(405, "operation not supported: presign is disabled")
        return Response(302, headers={"Location": state.presigned_url(entry.blob)[0]})
    return object_response(state, entry, req.headers)


@route("HEAD", _REF + "/objects")
def head_object(state: State, req: Request) -> Response:
    _, entry = _lookup(state, req)
    return object_response(state, entry, req.headers)


@route("GET", _REF + "/objects/ls")
def list_objects(state: State, req: Request) -> Response:
    prefix, delimiter = req.arg("prefix", "") or "", req.arg("delimiter", "") or ""
    after, amount = req.arg("after", "") or "", req.amount()
    with state.lock:  # the staging area may change under a listing otherwise
        repo = state.repo(req.params["repository"])
        found, more = page(state.view(repo, req.params["ref"]), prefix, delimiter, after, amount)
    metadata = bool(req.flag("user_metadata", True))
    presign = bool(req.flag("presign", False)) and state.presign
    results = [
        state.stats_json(path, entry, metadata, presign)
        if entry
        else {
            "path": path,
            "path_type": "common_prefix",
            "physical_address": "",
            "checksum": "",
            "mtime": 0,
        }
        for path, entry in found
    ]
    next_offset = found[-1][0] if found else ""
    return json_response(
        200, {"pagination": pagination(len(found), more, next_offset), "results": results}
    )


def _multipart_content(req: Request, content_type: str) -> tuple[Any, str]:
    """The part named `content` of a multipart/form-data upload, and its content type."""
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
    return body, content_type


@route("POST", _BRANCH + "/objects")
def upload_object(state: State, req: Request) -> Response:
    path = req.required("path")
    with state.lock:
        repo = state.repo(req.params["repository"])
        state.writable(repo, req.params["branch"])
    content_type = req.headers.get("Content-Type") or "application/octet-stream"
    body = req.body
    if content_type.startswith("multipart/form-data"):
        body, content_type = _multipart_content(req, content_type)
    metadata = {
        k.lower()[len(META_HEADER_PREFIX) :]: v
        for k, v in req.headers.items()
        if k.lower().startswith(META_HEADER_PREFIX)
    }
    blob = state.new_blob()
    checksum, size = state.store_blob(body, blob)
    entry = Entry(
        repo.address(blob), blob, checksum, size, int(time.time()), content_type, metadata
    )
    try:
        return json_response(201, state.stage(repo, req.params["branch"], path, entry, req.headers))
    except ApiError:
        (state.blobs / blob).unlink(missing_ok=True)
        raise


@route("DELETE", _BRANCH + "/objects")
def delete_object(state: State, req: Request) -> Response:
    path = req.required("path")
    with state.lock:
        repo, name = state.repo(req.params["repository"]), req.params["branch"]
        state.unstage(repo, name, state.writable(repo, name), [path])
    return Response(204)


@route("POST", _BRANCH + "/objects/delete")
def delete_objects(state: State, req: Request) -> Response:
    paths = req.json().get("paths")
    if not isinstance(paths, list):
        raise ApiError(400, "paths is required")
    if len(paths) > MAX_DELETE_OBJECTS:
        raise ApiError(400, f"too many paths: {len(paths)} > {MAX_DELETE_OBJECTS}")
    with state.lock:
        repo, name = state.repo(req.params["repository"]), req.params["branch"]
        state.unstage(repo, name, state.writable(repo, name), list(dict.fromkeys(paths)))
    return json_response(200, {"errors": []})


@route("POST", _BRANCH + "/objects/copy")
def copy_object(state: State, req: Request) -> Response:
    dest_path, body = req.required("dest_path"), req.json()
    src_path = body.get("src_path")
    if not isinstance(src_path, str):
        raise ApiError(400, "src_path is required")
    with state.lock:
        repo = state.repo(req.params["repository"])
        state.writable(repo, req.params["branch"])
        source = state.view(repo, body.get("src_ref") or req.params["branch"]).get(src_path)
    if source is None:
        raise ApiError(404, "object not found")
    blob = source.blob
    if not body.get("shallow"):
        blob = state.new_blob()
        shutil.copyfile(state.blobs / source.blob, state.blobs / blob)
    entry = Entry(
        repo.address(blob),
        blob,
        source.checksum,
        source.size,
        int(time.time()),
        source.content_type,
        dict(source.metadata),
    )
    return json_response(201, state.stage(repo, req.params["branch"], dest_path, entry, {}))
