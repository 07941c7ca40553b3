"""Filling a running stand-in with many objects at once, as lakeFS's import does.

Uploading 400,000 objects one request each takes tens of minutes on a small machine;
`import_files` stages them directly in the stand-in's state (one SQLite transaction, blob
files hard-linked to their sources when the file system allows) and commits them with the
same code path as `POST .../commits`. What it builds is served exactly as uploaded data is.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from remote_keras.testing.lakefs.model import Entry


def import_files(
    server: Any, repository: str, branch: str, files: Iterable[tuple[str, Path]], message: str
) -> str:
    """Stages `(path, source file)` pairs on `branch` of `repository` and commits them.

    Args:
        server: A started `LakeFSServer`.
        repository: An existing repository.
        branch: An existing branch, which must not be protected.
        files: Object paths and the local files holding their bytes (a source may repeat:
            its checksum is computed once).
        message: The commit message.

    Returns:
        The new commit's id.
    """
    state = server.api
    if state is None:
        raise RuntimeError("start the server before importing into it")
    digests: dict[Path, tuple[str, int]] = {}
    now = int(time.time())
    with state.lock:
        repo = state.repo(repository)
        target = state.writable(repo, branch)
        staged: list[tuple[str, Entry]] = []
        for path, source in files:
            if source not in digests:
                data = source.read_bytes()
                digests[source] = (hashlib.md5(data, usedforsecurity=False).hexdigest(), len(data))
            checksum, size = digests[source]
            blob = state.new_blob()
            _link(source, state.blobs / blob)
            kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
            staged.append((path, Entry(repo.address(blob), blob, checksum, size, now, kind)))
        state.store.stage(repo.id, branch, staged)
        for path, entry in staged:
            target.staging.set(path, entry)
        del staged
        commit = state.commit_staging(repo, branch, target, message, None, None)
    return commit.id


def _link(source: Path, blob: Path) -> None:
    try:
        os.link(source, blob)
    except OSError:  # another file system, or too many links to the source
        shutil.copyfile(source, blob)
