"""The stand-in's state and the operations handlers share: lookups, staging, commits, blobs.

`State` holds the repositories in memory under one lock and writes every change through
to its `Store` (SQLite in the data folder); object data lives in `<root>/blobs/`.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import hmac
import itertools
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlencode

from remote_keras.testing.lakefs import refs
from remote_keras.testing.lakefs.model import (
    PRESIGN_EXPIRY_S,
    ApiError,
    Branch,
    Commit,
    Entry,
    Repo,
    Staging,
    Tree,
    View,
)
from remote_keras.testing.lakefs.store import Store

PRESIGNED_PREFIX = "/_presigned/"
METADATA_FILE = "metadata.sqlite3"


class State:
    """Repositories, credentials and the blob folder of one stand-in.

    Args:
        root: The data folder (`blobs/` and `metadata.sqlite3`); loaded if it has data.
        access_key_id: The access key ID to accept.
        secret: The secret to accept (it also signs presigned URLs).
        presign: Whether presigned URLs are offered.
        endpoint_url: The server's URL, for presigned URLs.
    """

    def __init__(
        self, root: Path, access_key_id: str, secret: str, presign: bool, endpoint_url: str
    ) -> None:
        self.blobs = root / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.access_key_id = access_key_id
        self.secret = secret
        self.presign = presign
        self.endpoint_url = endpoint_url
        # Where presigned URLs point (a separate data server), and how long they last.
        self.presign_base = ""
        self.presign_expiry_s: float = PRESIGN_EXPIRY_S
        self.presign_skew_s = 0.0  # presigned URLs stop working this long before their expiry
        self.presign_s3_url = ""  # an S3 server (no auth) serving `root`: URLs point there
        self.lock = threading.RLock()
        self.store = Store(root / METADATA_FILE)
        snapshot = self.store.load()
        self.repos: dict[str, Repo] = snapshot.repos
        self.pending: dict[str, str] = snapshot.pending  # blob id -> repository
        self.namespaces: set[str] = snapshot.namespaces  # storage namespaces ever used
        self._seq = itertools.count(snapshot.next_seq)

    def close(self) -> None:
        """Closes the store once no request holds the lock; later writes fail."""
        with self.lock:
            self.store.close()

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

    # -- lookups (call with the lock held)

    def repo(self, name: str) -> Repo:
        repo = self.repos.get(name)
        if repo is None:
            raise ApiError(404, "repository not found")
        return repo

    @staticmethod
    def branch(repo: Repo, name: str) -> Branch:
        branch = repo.branches.get(name)
        if branch is None:
            raise ApiError(404, "branch not found")
        return branch

    def writable(self, repo: Repo, name: str, action: str = "write to") -> Branch:
        branch = self.branch(repo, name)
        if repo.read_only:
            raise ApiError(403, "repository is read-only")
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in repo.protection):
            raise ApiError(403, f"cannot {action} protected branch")
        return branch

    @staticmethod
    def view(repo: Repo, ref: str) -> View[Entry]:
        return refs.view(repo, ref)

    # -- commits (call with the lock held)

    def new_commit(
        self,
        repo: Repo,
        parents: list[str],
        message: str,
        tree: Tree[Entry],
        *,
        delta: dict[str, Entry | None] | None = None,
        metadata: dict[str, str] | None = None,
        created: float | None = None,
        committer: str | None = None,
        from_staging: str | None = None,
    ) -> Commit:
        """Makes and saves a commit of `tree`; `delta` against the first parent if known."""
        seq = next(self._seq)
        created = time.time() if created is None else created
        if delta is None:
            base = repo.commits[parents[0]].tree.entries if parents else {}
            delta = refs.delta(base, tree.entries)
        meta_range = refs.meta_range_id(tree)
        commit = Commit(
            id=refs.new_commit_id(repo, parents, message, [metadata, meta_range, created, seq]),
            parents=list(parents),
            committer=self.access_key_id if committer is None else committer,
            message=message,
            created=created,
            seq=seq,
            meta_range_id=meta_range,
            metadata=dict(metadata or {}),
            generation=max((repo.commits[p].generation for p in parents), default=0) + 1,
            tree=tree,
            delta=delta,
        )
        self.store.save_commit(repo.id, commit, from_staging)
        repo.commits[commit.id] = commit
        return commit

    def commit_staging(
        self,
        repo: Repo,
        name: str,
        branch: Branch,
        message: str,
        metadata: dict[str, str] | None,
        created: float | None,
    ) -> Commit:
        """Commits a branch's staging area onto its head and empties it."""
        head = refs.head(repo, branch)
        # Trees are immutable, so an empty commit shares its parent's (and its sorted paths).
        tree = Tree(View(head.tree, branch.staging).materialize()) if branch.staging else head.tree
        commit = self.new_commit(
            repo,
            [head.id],
            message,
            tree,
            delta=dict(branch.staging.changes),
            metadata=metadata,
            created=created,
            from_staging=name,
        )
        self.advance(repo, name, branch, commit)
        return commit

    def advance(self, repo: Repo, name: str, branch: Branch, commit: Commit) -> None:
        """Moves a branch to `commit`, with an empty staging area."""
        branch.commit_id, branch.staging = commit.id, Staging()
        self.store.advance(repo.id, name, branch)

    # -- objects (call `unstage` with the lock held)

    def stage(self, repo: Repo, name: str, path: str, entry: Entry, headers: Any) -> dict[str, Any]:
        """Stages `entry` at `path` on branch `name`, honouring If-None-Match / If-Match."""
        with self.lock:
            if self.repos.get(repo.id) is not repo:  # deleted while the body was read
                raise ApiError(404, "repository not found")
            branch = self.writable(repo, name)
            current = View(refs.head(repo, branch).tree, branch.staging).get(path)
            if headers.get("If-None-Match") == "*" and current is not None:
                raise ApiError(412, "precondition failed: object exists")
            if_match = headers.get("If-Match")
            if if_match and (current is None or if_match.strip('"') != current.checksum):
                raise ApiError(412, "precondition failed: ETag mismatch")
            self.store.stage(repo.id, name, [(path, entry)])
            branch.staging.set(path, entry)
        return self.stats_json(path, entry)

    def unstage(self, repo: Repo, name: str, branch: Branch, paths: list[str]) -> None:
        """Deletes `paths` on a branch: a staged deletion if committed, else unstaged."""
        committed = refs.head(repo, branch).tree.entries
        deleted = [p for p in paths if p in committed]
        dropped = [p for p in paths if p not in committed and p in branch.staging]
        self.store.stage(repo.id, name, [(p, None) for p in deleted])
        self.store.unstage(repo.id, name, dropped)
        for path in deleted:
            branch.staging.set(path, None)
        for path in dropped:
            branch.staging.discard(path)

    def store_blob(self, body: IO[bytes], blob: str) -> tuple[str, int]:
        """Copies `body` to a blob file; returns its MD5 hex digest and size."""
        digest, size = hashlib.md5(usedforsecurity=False), 0
        with open(self.blobs / blob, "wb") as out:
            while chunk := body.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        return digest.hexdigest(), size

    @staticmethod
    def new_blob() -> str:
        return uuid.uuid4().hex

    def presigned_url(self, blob: str) -> tuple[str, int]:
        """A signed URL of `blob` on the data server (else this one) and its expiry (Unix s)."""
        expires = int(time.time() + self.presign_expiry_s)
        signature = self.signature(blob, str(expires))
        if self.presign_s3_url:  # S3-style, as a lakeFS on S3 hands out; the store checks it
            lifetime = max(1, int(self.presign_expiry_s))
            query = urlencode({"X-Amz-Expires": lifetime, "X-Amz-Signature": signature})
            return f"{self.presign_s3_url}/{self.blobs.name}/{blob}?{query}", expires
        query = urlencode({"expires": expires, "signature": signature})
        base = self.presign_base or self.endpoint_url
        return f"{base}{PRESIGNED_PREFIX}{blob}?{query}", expires

    def signature(self, blob: str, expires: str) -> str:
        return hmac.new(self.secret.encode(), f"{blob}:{expires}".encode(), "sha256").hexdigest()

    def stats_json(
        self, path: str, entry: Entry, metadata: bool = True, presign: bool = False
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
            url, expiry = self.presigned_url(entry.blob)
            stats.update(physical_address=url, physical_address_expiry=expiry)
        if metadata:
            stats["metadata"] = dict(entry.metadata)
        return stats

    # -- JSON of repositories and commits

    @staticmethod
    def commit_json(commit: Commit) -> dict[str, Any]:
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
    def repo_json(repo: Repo) -> dict[str, Any]:
        return {
            "id": repo.id,
            "creation_date": repo.creation_date,
            "default_branch": repo.default_branch,
            "storage_namespace": repo.storage_namespace,
            "storage_id": "",
            "read_only": repo.read_only,
        }

    def storage_config(self) -> dict[str, Any]:
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

    def sample_data(self, repo: Repo) -> Tree[Entry]:
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
            blob = self.new_blob()
            (self.blobs / blob).write_bytes(data)
            checksum = hashlib.md5(data, usedforsecurity=False).hexdigest()
            content_type = "text/markdown" if path.endswith(".md") else "application/octet-stream"
            tree[path] = Entry(repo.address(blob), blob, checksum, len(data), now, content_type)
        return Tree(tree)
