"""Where paths point: local files or fsspec URLs, joined, resolved and listed.

Paths are always taken literally: no call here glob-expands, so keys holding
`[`, `*`, `?`, `#`, spaces or unicode are read as written.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fsspec
from fsspec import AbstractFileSystem
from fsspec.asyn import AsyncFileSystem

from remote_keras import errors

# Defaults that make common backends fetch an object with a single, cheap GET.
# s3fs sends a HEAD before every GET unless `max_concurrency=1` and caps its
# connection pool at 10; botocore spends about 10% of the client's CPU on
# CRC32 checks of every response body unless told to check only when required.
# User-given options always win.
PROTOCOL_DEFAULTS: dict[str, dict[str, Any]] = {
    "s3": {
        "max_concurrency": 1,
        "config_kwargs": {
            "max_pool_connections": 256,
            "response_checksum_validation": "when_required",
            # s3fs and botocore each retry up to 5 times, multiplied (25 GETs and 40 s for
            # one 503; 250 for a stall). remote_keras's own retries replace them.
            "retries": {"total_max_attempts": 2},
            "connect_timeout": 10,
            "read_timeout": 60,
        },
    },
}

# Filesystems a forked process inherited; kept alive, never used.
_INHERITED: list[AbstractFileSystem] = []

# Protocols whose servers cannot list a prefix; existence is checked per file.
_UNLISTABLE = {"http", "https"}


def is_url(path: str) -> bool:
    """Returns whether `path` is an fsspec URL rather than a local path."""
    return "://" in path or "::" in path


protocol_of = errors.protocol_of


def is_known_protocol(url: str) -> bool:
    """Whether fsspec has a filesystem for `url`'s protocol (installed or not)."""
    return is_url(url) and protocol_of(url) in fsspec.available_protocols()


def join(directory: str | os.PathLike | None, filename: str) -> str:
    """Joins a `directory` and a `filename` like `os.path.join`, URL-aware.

    A `filename` that is a URL or an absolute local path is returned as is,
    as stock Keras does.

    Args:
        directory: Local folder or URL prefix; `None` or empty for none.
        filename: Relative path, absolute path or full URL.

    Returns:
        The path or URL to read.
    """
    if not directory:
        return filename
    directory = os.fspath(directory)
    if is_url(filename):
        return filename
    if is_url(directory):
        if filename.startswith("/"):
            return filename
        return directory.rstrip("/") + "/" + filename
    return os.path.join(directory, filename)


class FileSystems:
    """Resolves URLs to fsspec filesystems, one per protocol and process.

    Instances pickle without their filesystems; after a fork or in a new
    process, filesystems are rebuilt on first use.

    Args:
        storage_options: Keyword arguments for the filesystems, passed
            through to fsspec as in `fsspec.open(url, **storage_options)`.
    """

    def __init__(self, storage_options: Mapping[str, Any] | None = None) -> None:
        self.storage_options = dict(storage_options or {})
        self._cache: dict[str, AbstractFileSystem] = {}
        self._pid = os.getpid()

    def __repr__(self) -> str:  # never shows the options: they hold secrets
        return f"FileSystems(protocols={sorted(self._cache)})"

    def __getstate__(self) -> dict[str, Any]:
        return {"storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        FileSystems.__init__(self, state["storage_options"])

    def _options_for(self, protocol: str) -> dict[str, Any]:
        options = dict(PROTOCOL_DEFAULTS.get(protocol, {}))
        for key, value in self.storage_options.items():
            default = options.get(key)
            merge = isinstance(default, dict) and isinstance(value, dict)
            options[key] = {**default, **value} if merge and default else value
        return options

    def resolve(self, url: str) -> tuple[AbstractFileSystem, str]:
        """Returns the filesystem serving `url` and the path within it.

        Raises:
            MissingBackendError: the protocol's backend is not installed.
            ValueError: the protocol is unknown.
        """
        if os.getpid() != self._pid:
            # Forked: the parent's clients belong to its event loop thread, which does not
            # exist here. Dropping them would run their finalizers on the wrong loop.
            _INHERITED.extend(self._cache.values())
            self._cache.clear()
            self._pid = os.getpid()
        chained = "::" in url
        key = url.rsplit("://", 1)[0] if chained else protocol_of(url)
        fs = self._cache.get(key)
        if fs is not None and not chained:
            return fs, fs._strip_protocol(url)
        with errors.reading(url):
            protocol = protocol_of(url)
            options = self.storage_options if chained else self._options_for(protocol)
            fs, path = fsspec.core.url_to_fs(url, **options)
        self._cache[key] = fs
        return fs, path

    def group(self, urls: Iterable[str]) -> dict[AbstractFileSystem, list[tuple[int, str]]]:
        """Groups URLs by filesystem as `{fs: [(position, path), ...]}`."""
        groups: dict[AbstractFileSystem, list[tuple[int, str]]] = defaultdict(list)
        for position, url in enumerate(urls):
            fs, path = self.resolve(url)
            groups[fs].append((position, path))
        return groups


def is_async(fs: AbstractFileSystem) -> bool:
    """Returns whether `fs` runs its requests on fsspec's event loop."""
    return isinstance(fs, AsyncFileSystem) and getattr(fs, "async_impl", False)


def _protocols(fs: AbstractFileSystem) -> set[str]:
    return set(fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,))


def find(
    fs: AbstractFileSystem, root: str, withdirs: bool = False, bar: Any = None
) -> dict[str, dict]:
    """Lists everything below `root` as `{path: info}` with as few requests as the backend allows.

    fsspec's generic `find` lists folder by folder; S3-like backends
    override it with one paged listing, and lakeFS gets one here
    (`ls(recursive=True)`). On S3, `bar` (a `tqdm` bar) counts the keys of
    each page as it arrives.
    """
    if "lakefs" in _protocols(fs):
        entries = fs.ls(root.rstrip("/") + "/", detail=True, recursive=True, refresh=True)
        return {e["name"]: e for e in entries if withdirs or e.get("type") != "directory"}
    with _counting_s3_pages(fs, bar):
        return fs.find(root, withdirs=withdirs, detail=True)


@contextlib.contextmanager
def _counting_s3_pages(fs: AbstractFileSystem, bar: Any):
    """Adds each S3 listing page's key count to `bar`, through botocore's `after-call` event."""
    if bar is None or "s3" not in _protocols(fs) or not hasattr(fs, "connect"):
        yield
        return
    events = fs.connect().meta.events  # s3fs's aiobotocore client, made once per filesystem
    event, handler_id = "after-call.s3.ListObjectsV2", f"remote_keras-progress-{id(bar)}"

    def count(parsed: dict | None = None, **_: Any) -> None:
        bar.update((parsed or {}).get("KeyCount", 0))

    events.register(event, count, unique_id=handler_id)
    try:
        yield
    finally:
        events.unregister(event, unique_id=handler_id)


def _common_dir(paths: Sequence[str]) -> str:
    parts = [p.split("/") for p in paths]
    common = []
    for column in zip(*parts):
        if len(set(column)) != 1:
            break
        common.append(column[0])
    return "/".join(common)


def existing(
    urls: Sequence[str], filesystems: FileSystems, bar: Any = None
) -> tuple[list[bool], list[str]]:
    """Tells which of `urls` exist as files, by listing rather than one request each.

    Local paths are checked with `os.path.isfile`, as stock Keras does. Remote
    paths are grouped by parent prefix; a single prefix is listed with `ls`,
    several with one recursive `find` of their common prefix (paged LIST
    requests, about 1,000 keys each on S3). Protocols that cannot list
    (HTTP) fall back to one `exists` request per file.

    Args:
        urls: Paths or URLs, in dataframe order.
        filesystems: Resolver carrying the storage options.
        bar: Optional `tqdm` bar counting the URLs checked.

    Returns:
        `(found, missing)`: one boolean per URL, and the URLs of the parent
        prefixes under which nothing of `urls` was found and which do not
        exist at all (no bucket, or nothing stored under the prefix).
    """
    found = [False] * len(urls)
    missing: list[str] = []
    remote = []
    for position, url in enumerate(urls):
        if is_url(url):
            remote.append((position, url))
        else:
            found[position] = os.path.isfile(url)
    if not remote:
        return found, missing
    groups = filesystems.group(url for _, url in remote)
    for fs, members in groups.items():
        positions = [remote[i][0] for i, _ in members]
        paths = [path for _, path in members]
        if _protocols(fs) & _UNLISTABLE:
            for position, path in zip(positions, paths):
                with errors.reading(path):
                    found[position] = fs.isfile(path)
                if bar is not None:
                    bar.update(1)
            continue
        parents = sorted({posixpath.dirname(p) for p in paths})
        listed = _list_files(fs, parents)
        for position, path in zip(positions, paths):
            found[position] = path in listed
        if bar is not None:
            bar.update(len(paths))
        missing += _missing_prefixes(fs, parents, listed)
    return found, missing


def _missing_prefixes(
    fs: AbstractFileSystem, parents: Sequence[str], listed: set[str]
) -> list[str]:
    """The `parents` with no listed file that do not exist (at most 16 are checked)."""
    present = {posixpath.dirname(path) for path in listed}
    empty: list[str] = []
    for parent in sorted(p for p in parents if p not in present):  # ancestors come first
        if not any(parent.startswith(kept + "/") for kept in empty):
            empty.append(parent)
    buckets = sorted({parent.split("/", 1)[0] for parent in empty})
    if empty and len(buckets) == 1 and buckets[0] != empty[0]:
        empty.insert(0, buckets[0])  # a missing bucket is named once, as the bucket
    missing: list[str] = []
    for parent in empty[:16]:
        if any(parent.startswith(gone + "/") for gone in missing):
            continue
        with errors.reading(fs.unstrip_protocol(parent)):
            if not fs.exists(parent):
                missing.append(parent)
    return [fs.unstrip_protocol(parent) for parent in missing]


def _list_files(fs: AbstractFileSystem, parents: Sequence[str]) -> set[str]:
    if len(parents) == 1:
        roots, recursive = parents, False
    else:
        roots, recursive = [_common_dir(parents)], True
    listed: set[str] = set()
    for root in roots:
        fs.invalidate_cache(root)
        try:
            with errors.reading(fs.unstrip_protocol(root)):
                if recursive:
                    listed.update(find(fs, root))
                else:
                    entries = fs.ls(root, detail=True)
                    listed.update(e["name"] for e in entries if e.get("type") != "directory")
        except FileNotFoundError:
            continue
    return listed


def walk_files(url: str, filesystems: FileSystems, bar: Any = None) -> list[str]:
    """Lists every file and folder below `url` with one recursive listing.

    Args:
        url: A folder URL, e.g. `s3://bucket/train`.
        filesystems: Resolver carrying the storage options.
        bar: Optional `tqdm` bar counting the objects listed.

    Returns:
        Paths relative to `url`, with a trailing `/` on folders.

    Raises:
        FileNotFoundError: nothing exists under `url`.
    """
    fs, root = filesystems.resolve(url)
    root = root.rstrip("/")
    fs.invalidate_cache(root)
    counted = bar.n if bar is not None else 0
    with errors.reading(url):
        found = find(fs, root, withdirs=True, bar=bar)
    if bar is not None and bar.n == counted:  # no page-by-page count: count at the end
        bar.update(len(found))
    if not found and not fs.isdir(root):
        raise FileNotFoundError(f"No such directory: {errors.redact(url)!r}")
    prefix = root + "/"
    entries = []
    for name, info in found.items():
        name = name.rstrip("/")
        if not name.startswith(prefix):
            continue
        relative = name[len(prefix) :]
        if not relative:
            continue
        entries.append(relative + "/" if info.get("type") == "directory" else relative)
    return entries


def write_bytes(url: str, data: bytes, filesystems: FileSystems) -> None:
    """Writes `data` to a local path or URL, creating folders as needed."""
    if not is_url(url):
        with open(url, "wb") as f:
            f.write(data)
        return
    fs, path = filesystems.resolve(url)
    with errors.reading(url):
        fs.pipe_file(path, data)
