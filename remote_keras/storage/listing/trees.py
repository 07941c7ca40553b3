"""Every object below a folder: S3 and lakeFS from key strings alone, other stores by `find`."""

from __future__ import annotations

import contextlib
from typing import Any

from fsspec import AbstractFileSystem

from remote_keras import errors
from remote_keras.storage import locations
from remote_keras.storage.listing import parallel_listing
from remote_keras.storage.locations import FileSystems


def walk_files(url: str, filesystems: FileSystems, bar: Any = None) -> list[str]:
    """Lists every object below `url` (see `find`).

    Args:
        url: A folder URL, e.g. `s3://bucket/train`.
        filesystems: Resolver carrying the storage options.
        bar: Optional `tqdm` bar counting the objects listed.

    Returns:
        Paths relative to `url`; folder markers (and, from backends other
        than S3 and lakeFS, folders) end with `/`.

    Raises:
        FileNotFoundError: nothing exists under `url`.
    """
    fs, root = filesystems.resolve(url)
    root = root.rstrip("/")
    counted = bar.n if bar is not None else 0
    with errors.reading(url):
        entries = find(fs, root, bar=bar)
    if bar is not None and bar.n == counted:  # no page-by-page count: count at the end
        bar.update(len(entries))
    if not entries:
        with errors.reading(url):
            there = fs.isdir(root)
        if not there:
            raise FileNotFoundError(f"No such directory: {errors.redact(url)!r}")
    return entries


def find(fs: AbstractFileSystem, root: str, bar: Any = None) -> list[str]:
    """Lists every object below the folder `root`, as paths relative to it.

    S3 and lakeFS are listed by `parallel_listing.list_tree`: key strings
    only, one request when everything fits on one page, else the folders of
    `root` in parallel. Other backends use their own `find` (one paged
    listing on GCS and Azure); their info dicts are dropped and the
    filesystem's directory cache is cleared afterwards. `bar` (a `tqdm`
    bar) counts the keys as pages arrive.

    Returns:
        Relative paths, sorted on S3 and lakeFS; folder markers (and, from
        other backends, folders) end with `/`.
    """
    root = root.rstrip("/")
    fast = parallel_listing.lister_for(fs, root)
    if fast is not None:
        lister, prefix = fast
        return parallel_listing.list_tree(lister, prefix + "/" if prefix else "", bar)
    try:
        with _counting_s3_pages(fs, bar):
            found = fs.find(root, withdirs=True, detail=True)
    finally:
        fs.invalidate_cache(root)  # never keep an info dict per object alive
    start = len(root) + 1
    entries = []
    for name, info in found.items():
        name = name.rstrip("/")
        if name.startswith(root + "/") and len(name) > start:
            directory = info.get("type") == "directory"
            entries.append(name[start:] + "/" if directory else name[start:])
    return entries


@contextlib.contextmanager
def _counting_s3_pages(fs: AbstractFileSystem, bar: Any):
    """Adds each S3 listing page's key count to `bar`, through botocore's `after-call` event."""
    if bar is None or "s3" not in locations._protocols(fs) or not hasattr(fs, "connect"):
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
