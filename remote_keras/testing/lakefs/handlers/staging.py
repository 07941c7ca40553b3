"""Uploads through the staging API, and presigned URLs (in `presign=True` mode).

A client asks for a physical address (`GET .../staging/backing`), writes the bytes there
(a presigned `PUT /_presigned/{blob}` on this server) and links it to a path
(`PUT .../staging/backing`). Presigned URLs carry no lakeFS credentials: their HMAC
signature, made with the server's secret, is the credential.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from typing import Any

from remote_keras.testing.lakefs.handlers.objects import object_response
from remote_keras.testing.lakefs.model import ApiError, Entry
from remote_keras.testing.lakefs.state import PRESIGNED_PREFIX, State
from remote_keras.testing.lakefs.transport import Request, Response, json_response, route

_BACKING = "/repositories/{repository}/branches/{branch}/staging/backing"
_METHODS = ("GET", "HEAD", "PUT", "POST", "DELETE", "PATCH")


@route("GET", _BACKING)
def get_staging(state: State, req: Request) -> Response:
    req.required("path")
    presign = bool(req.flag("presign", False))
    if presign and not state.presign:
        raise ApiError(405, "operation not supported: presign is disabled")
    with state.lock:
        repo = state.repo(req.params["repository"])
        state.writable(repo, req.params["branch"])
        blob = state.new_blob()
        state.store.add_pending(blob, repo.id)
        state.pending[blob] = repo.id
    location: dict[str, Any] = {"physical_address": repo.address(blob), "presigned_url": None}
    if presign:
        url, expiry = state.presigned_url(blob)
        location.update(presigned_url=url, presigned_url_expiry=expiry)
    return json_response(200, location)


@route("PUT", _BACKING)
def link_staging(state: State, req: Request) -> Response:
    path, body = req.required("path"), req.json()
    staging = body.get("staging") or {}
    address = staging.get("physical_address") or ""
    if not isinstance(body.get("checksum"), str) or not isinstance(body.get("size_bytes"), int):
        raise ApiError(400, "checksum and size_bytes are required")
    with state.lock:
        repo = state.repo(req.params["repository"])
        blob = address.rsplit("/", 1)[-1]
        if state.pending.get(blob) != repo.id or address != repo.address(blob):
            raise ApiError(400, "physical address was not issued for this repository")
        if not (state.blobs / blob).exists():
            raise ApiError(400, "nothing was uploaded to the physical address")
        state.store.remove_pending(blob)
        del state.pending[blob]
    entry = Entry(
        address,
        blob,
        body["checksum"],
        body["size_bytes"],
        int(time.time()),
        body.get("content_type") or "application/octet-stream",
        dict(body.get("user_metadata") or {}),
    )
    return json_response(200, state.stage(repo, req.params["branch"], path, entry, req.headers))


@route(_METHODS, PRESIGNED_PREFIX + "{blob}", auth=False, api=False)
def presigned_blob(state: State, req: Request) -> Response:
    blob = req.params["blob"]
    if not re.fullmatch(r"[0-9a-f]{32}", blob):
        raise ApiError(404, "not found")
    expires, signature = req.arg("expires", "") or "", req.arg("signature", "") or ""
    if not hmac.compare_digest(signature, state.signature(blob, expires)):
        raise ApiError(403, "invalid signature")
    if not expires.isdigit():
        raise ApiError(403, "invalid signature")
    if int(expires) - state.presign_skew_s <= time.time():
        raise ApiError(403, "presigned URL expired")
    if req.method == "PUT":
        with state.lock:
            if blob not in state.pending or (state.blobs / blob).exists():
                raise ApiError(403, "upload not allowed to this address")
        checksum, _ = state.store_blob(req.body, blob)
        return Response(200, headers={"ETag": f'"{checksum}"'})
    if req.method not in ("GET", "HEAD"):
        raise ApiError(405, "method not allowed")
    path = state.blobs / blob
    if not path.exists():
        raise ApiError(404, "not found")
    size = path.stat().st_size
    checksum = hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()
    entry = Entry("", blob, checksum, size, int(path.stat().st_mtime), "application/octet-stream")
    return object_response(state, entry, req.headers)
