"""lakeFS: pin branches and tags to commits, read objects with one GET, record data versions.

An iterator built from `lakefs://repo/<branch or tag>/...` resolves each
`(repository, ref)` once, at construction, to its commit id and reads every
file at that commit, so commits and staged (uncommitted) writes made during
training never leak into it. `iterator.lakefs_pins` lists the pins, and
`DataVersionCallback` writes them next to a model's checkpoints.

Configuration is lakeFS's own: `storage_options` (`host`, `username`,
`password`, ...), else the `LAKECTL_*` environment variables, else
`~/.lakectl.yaml`, as `lakefs_spec.LakeFSFileSystem` reads them.

The lakeFS SDK keeps `5 * cpu_count` connections per host, fewer than the
iterator's fetch threads (`max_in_flight`, 128 by default); `get_object`
raises that to `POOL_CONNECTIONS` on first use, so connections are reused
instead of discarded (urllib3's "Connection pool is full" warnings).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from typing import Any

import keras

from remote_keras import errors, storage

# Connections the lakeFS client keeps per host, as s3fs's pool (`storage.PROTOCOL_DEFAULTS`).
POOL_CONNECTIONS = 256
# (connect, read) seconds of one object read, as for S3 (`storage.PROTOCOL_DEFAULTS`): a
# stalled read becomes a transient failure that is retried, never a hung batch.
REQUEST_TIMEOUT_S = (10, 60)
_POOL_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class LakeFSPin:
    """One data version: a ref of a lakeFS repository resolved to a commit.

    Attributes:
        endpoint: The lakeFS server's API URL.
        repository: Repository name.
        ref: The ref as requested (branch, tag, commit id, `main~1`, ...).
        commit_id: The commit every read goes to.
    """

    endpoint: str
    repository: str
    ref: str
    commit_id: str

    def url(self, path: str = "") -> str:
        """Returns `lakefs://<repository>/<commit_id>/<path>`."""
        return f"lakefs://{self.repository}/{self.commit_id}/{path}"


def is_lakefs(url: str) -> bool:
    """Returns whether `url` is a `lakefs://` URL."""
    return url.startswith("lakefs://") and "::" not in url


def split(url: str) -> tuple[str, str, str]:
    """Splits `lakefs://repo/ref/path` into its parts, naming the bad part if invalid."""
    from lakefs_spec.util import parse

    if url.removeprefix("lakefs://").count("/") == 1:
        url += "/"  # `lakefs://repo/ref`: the root of the ref
    try:
        return parse(url)
    except ValueError as exc:
        raise ValueError(f"Invalid lakeFS URL {errors.redact(url)!r}: {exc}") from None


class Pinner:
    """Resolves each `(repository, ref)` of `lakefs://` URLs to a commit, once.

    Args:
        filesystems: Resolver carrying the storage options.
    """

    def __init__(self, filesystems: storage.FileSystems) -> None:
        self.filesystems = filesystems
        self.pins: dict[tuple[str, str], LakeFSPin] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"filesystems": self.filesystems, "pins": self.pins}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def pin(self, url: str) -> str:
        """Returns `url` rewritten to read at its ref's commit; other URLs unchanged."""
        if not is_lakefs(url):
            return url
        repository, ref, path = split(url)
        key = (repository, ref)
        with self._lock:
            found = self.pins.get(key)
            if found is None:
                found = self.pins[key] = self._resolve(url, repository, ref)
        return found.url(path)

    def _resolve(self, url: str, repository: str, ref: str) -> LakeFSPin:
        import lakefs

        fs, _ = self.filesystems.resolve(url)
        with errors.reading(f"lakefs://{repository}/{ref}/"):
            commit = lakefs.Reference(repository, ref, client=fs.client).get_commit()
        return LakeFSPin(fs.client.config.host, repository, ref, commit.id)


def get_object(fs: Any, url: str) -> bytes:
    """Reads a whole lakeFS object with a single GET (no HEAD, no repository lookup).

    Args:
        fs: A `lakefs_spec.LakeFSFileSystem`.
        url: `lakefs://repo/ref/path`.

    Returns:
        The object's bytes.
    """
    repository, ref, path = split(url)
    api = fs.client.sdk_client.objects_api
    if getattr(api.api_client, "_remote_keras_pool", 0) < POOL_CONNECTIONS:
        size_pool(fs.client)
    return bytes(
        api.get_object(repository, ref, path, presign=False, _request_timeout=REQUEST_TIMEOUT_S)
    )


# Objects per listing page: lakeFS's maximum (its default, and lakefs-spec's, is 100).
LIST_AMOUNT = 1000


def list_page(
    fs: Any,
    repository: str,
    ref: str,
    prefix: str,
    after: str = "",
    delimiter: str = "",
    amount: int = LIST_AMOUNT,
) -> tuple[list[str], list[str], str | None]:
    """Lists one page of `objects/ls`, keeping only the paths (no per-object models).

    The response's JSON is read directly, not turned into the SDK's
    `ObjectStats` models, and the filesystem's own client makes the request
    (as `get_object` does).

    Args:
        fs: A `lakefs_spec.LakeFSFileSystem`.
        repository: Repository name.
        ref: Ref to list (a commit id, for data that never changes).
        prefix: Paths start with this.
        after: Only paths after this one (exclusive), or `""`.
        delimiter: `"/"` to group sub-folders into common prefixes, `""` for all objects.
        amount: Entries per page (at most 1000).

    Returns:
        `(object paths, common prefixes, next_offset)`, `next_offset` being
        `None` on the last page.
    """
    api = fs.client.sdk_client.objects_api
    if getattr(api.api_client, "_remote_keras_pool", 0) < POOL_CONNECTIONS:
        size_pool(fs.client)
    response = api.list_objects_with_http_info(
        repository,
        ref,
        user_metadata=False,
        presign=False,
        after=after or None,
        amount=amount,
        delimiter=delimiter,
        prefix=prefix,
        _preload_content=False,
        _request_timeout=REQUEST_TIMEOUT_S,
    )
    document = json.loads(response.raw_data)
    paths: list[str] = []
    prefixes: list[str] = []
    for entry in document.get("results") or ():
        (prefixes if entry.get("path_type") == "common_prefix" else paths).append(entry["path"])
    pagination = document.get("pagination") or {}
    more = pagination.get("has_more") and pagination.get("next_offset")
    return paths, prefixes, (str(pagination["next_offset"]) if more else None)


def size_pool(client: Any, connections: int = POOL_CONNECTIONS) -> None:
    """Lets a `lakefs.Client` keep `connections` connections per host (at least).

    The SDK sizes its urllib3 pool once, when the client is made; this gives
    the client a new pool of the new size (requests in flight finish on the
    old one). Clients whose SDK does not have this structure are left alone.

    Args:
        client: A `lakefs.Client`, e.g. `LakeFSFileSystem(...).client`.
        connections: Connections to keep per host.
    """
    from lakefs_sdk import rest

    with _POOL_LOCK:
        api_client = client.sdk_client.objects_api.api_client
        if getattr(api_client, "_remote_keras_pool", 0) >= connections:
            return
        config = client.config
        try:
            if (config.connection_pool_maxsize or 0) < connections:
                config.connection_pool_maxsize = connections
            api_client.rest_client = rest.RESTClientObject(config)
        except (AttributeError, TypeError):  # another SDK layout: keep its pool
            pass
        api_client._remote_keras_pool = connections


class DataVersionCallback(keras.callbacks.Callback):
    """Writes the lakeFS commits an iterator reads to a JSON file when training starts.

    Put the file next to the model's checkpoints so a run can be reproduced:
    the commit ids name exactly the data the model saw.

    Args:
        iterators: One iterator or a list (e.g. training and validation).
        filepath: Where to write, e.g. `"checkpoints/data_version.json"`.
            Folders are created; URLs are written through fsspec.

    Example:

    ```python
    train = gen.flow_from_directory("lakefs://images/main/train")
    model.fit(train, callbacks=[
        keras.callbacks.ModelCheckpoint("ckpt/model.keras"),
        DataVersionCallback(train, "ckpt/data_version.json"),
    ])
    ```
    """

    def __init__(self, iterators: Any, filepath: str | os.PathLike) -> None:
        super().__init__()
        self.iterators = iterators if isinstance(iterators, (list, tuple)) else [iterators]
        self.filepath = os.fspath(filepath)

    def on_train_begin(self, logs: dict | None = None) -> None:
        write_data_version(self.iterators, self.filepath)


def write_data_version(iterators: Any, filepath: str | os.PathLike) -> dict:
    """Writes the lakeFS pins of `iterators` to `filepath` as JSON and returns the record.

    Args:
        iterators: One iterator or a list.
        filepath: Local path or URL of the JSON file.

    Returns:
        `{"data": [{"endpoint", "repository", "ref", "commit_id", "role"}, ...]}`.
    """
    iterators = iterators if isinstance(iterators, (list, tuple)) else [iterators]
    record = {
        "data": [
            dict(dataclasses.asdict(pin), role=getattr(it, "subset", None) or "all")
            for it in iterators
            for pin in getattr(it, "lakefs_pins", [])
        ]
    }
    path = os.fspath(filepath)
    if not storage.is_url(path) and os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    data = json.dumps(record, indent=2).encode()
    storage.write_bytes(path, data, storage.FileSystems())
    return record
