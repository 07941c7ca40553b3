"""Where paths point: local files or fsspec URLs, joined, resolved and listed.

Paths are always taken literally: no call here glob-expands, so keys holding
`[`, `*`, `?`, `#`, spaces or unicode are read as written.
"""

from __future__ import annotations

import copy
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import fsspec
from fsspec import AbstractFileSystem
from fsspec.asyn import AsyncFileSystem

from remote_keras import errors
from remote_keras.storage import connections

# Defaults that make common backends fetch an object with a single, cheap GET.
# s3fs sends a HEAD before every GET unless `max_concurrency=1` and caps its
# connection pool at 10; botocore spends about 10% of the client's CPU on
# CRC32 checks of every response body unless told to check only when required.
# User-given options always win.
PROTOCOL_DEFAULTS: dict[str, dict[str, Any]] = {
    "s3": {
        "max_concurrency": 1,
        "config_kwargs": {
            **connections.botocore_config(),
            "response_checksum_validation": "when_required",
            # s3fs and botocore each retry up to 5 times, multiplied (25 GETs and 40 s for
            # one 503; 250 for a stall). Listings keep botocore's one retry; reads make none
            # (`connections.fsspec_reading_options`): remote_keras retries them, counted,
            # after Retry-After.
            "retries": {"total_max_attempts": 2},
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
        timeout_s: For the filesystems a loader reads through: seconds a
            connection or a read of S3 or HTTP may take
            (`RetryPolicy.timeout_s`), and no retries by s3fs or botocore, as
            `RetryPolicy` makes them; options in `storage_options` win.
            `None` (listing): the clients' timeouts and retries.
    """

    def __init__(
        self, storage_options: Mapping[str, Any] | None = None, timeout_s: float | None = None
    ) -> None:
        self.storage_options = dict(storage_options or {})
        self.timeout_s = timeout_s
        self._cache: dict[str, AbstractFileSystem] = {}
        self._pid = os.getpid()

    def __repr__(self) -> str:  # never shows the options: they hold secrets
        return f"FileSystems(protocols={sorted(self._cache)})"

    def __getstate__(self) -> dict[str, Any]:
        return {"storage_options": self.storage_options, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        FileSystems.__init__(self, state["storage_options"], state.get("timeout_s"))

    def _options_for(self, protocol: str) -> dict[str, Any]:
        # A deep copy: botocore adds to the dicts it is given (`retries["mode"]`), which would
        # change the token of every later filesystem, so none would reuse the first one.
        options = copy.deepcopy(PROTOCOL_DEFAULTS.get(protocol, {}))
        for key, value in connections.fsspec_reading_options(protocol, self.timeout_s).items():
            options[key] = {**options.get(key, {}), **value}
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
        attribute = connections.NO_CLIENT_RETRIES.get(protocol_of(url))
        if attribute is not None and not chained and self.timeout_s is not None:
            setattr(fs, attribute, 1)
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


def _common_dir(paths: Sequence[str]) -> str:
    parts = [p.split("/") for p in paths]
    common = []
    for column in zip(*parts):
        if len(set(column)) != 1:
            break
        common.append(column[0])
    return "/".join(common)


def write_bytes(url: str, data: bytes, filesystems: FileSystems) -> None:
    """Writes `data` to a local path or URL, creating folders as needed."""
    if not is_url(url):
        with open(url, "wb") as f:
            f.write(data)
        return
    fs, path = filesystems.resolve(url)
    with errors.reading(url):
        fs.pipe_file(path, data)
