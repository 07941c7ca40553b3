"""Which files of a dataframe exist: each parent folder listed once, not one request per row.

Rows are grouped by the folder their URL names (the part before the last
`/`), and only the folders are resolved and listed. On S3 and lakeFS
(`remote_keras.storage.listing.parallel_listing`) the folders are listed in parallel, each for the
objects directly in it, unless they are many and hold few rows each: then
their common folder is listed whole, which takes fewer requests. Other
backends list one folder with `ls`, several with one `find` of their
common folder; HTTP, which cannot list, is asked about each file with a HEAD
(`remote_keras.storage.listing.http_exists`), many in flight.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from fsspec import AbstractFileSystem

from remote_keras import errors
from remote_keras.storage import locations
from remote_keras.storage.listing import http_exists, parallel_listing, trees

# Folders listed one by one (in parallel) when there are at most this many, or when they
# hold this many rows each on average; otherwise their common folder is listed whole.
FOLDERS_LISTED_APART = 64
ROWS_PER_FOLDER_APART = 500


def existing(
    urls: Sequence[str], filesystems: locations.FileSystems, bar: Any = None
) -> tuple[list[bool], list[str]]:
    """Tells which of `urls` exist as files, by listing rather than one request each.

    Local paths are checked with `os.path.isfile`, as stock Keras does.
    Only key strings are kept while listing; nothing is kept afterwards.

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
    rows: dict[str, int] = {}  # parent URL -> rows in it
    first: dict[str, str] = {}  # parent URL -> its first URL, to name in errors
    for position, url in enumerate(urls):
        if not locations.is_url(url):
            found[position] = os.path.isfile(url)
            continue
        split = _parent(url)
        if split is not None:
            rows[split[0]] = rows.get(split[0], 0) + 1
            first.setdefault(split[0], url)
    by_fs: dict[AbstractFileSystem, dict[str, str]] = defaultdict(dict)  # fs -> {path: URL}
    for parent in rows:
        try:
            fs, path = filesystems.resolve(parent)
        except Exception:
            filesystems.resolve(first[parent])  # the same error, naming a file of the dataframe
            raise
        by_fs[fs][path.rstrip("/")] = parent
    names: dict[str, set[str] | None] = {}  # parent URL -> names listed (None: ask each)
    missing: list[str] = []
    for fs, paths in by_fs.items():
        listed = _list_parents(fs, {path: rows[url] for path, url in paths.items()})
        for path, url in paths.items():
            names[url] = listed.get(path)
        if listed:
            present = {path for path, listed_names in listed.items() if listed_names}
            missing += _missing_prefixes(fs, sorted(paths), present)
    checked = 0
    alone: list[int] = []  # positions of the URLs no listing covers
    for position, url in enumerate(urls):
        if not locations.is_url(url):
            continue
        split = _parent(url)
        listed_names = names.get(split[0]) if split is not None else None
        if split is None or listed_names is None:
            alone.append(position)
            continue
        found[position] = split[1] in listed_names
        checked += 1
        if bar is not None and checked % 10_000 == 0:
            bar.update(10_000)
    if bar is not None and checked % 10_000:
        bar.update(checked % 10_000)
    _ask_each(urls, alone, found, filesystems, bar)
    return found, missing


def _parent(url: str) -> tuple[str, str] | None:
    """`(parent URL, name)` of a URL checked by listing its folder; `None` for odd ones."""
    if "::" in url:
        return None
    parent, _, name = url.rpartition("/")
    if not name or parent.endswith("/") or "://" not in parent:
        return None
    return parent, name


def _ask_each(
    urls: Sequence[str],
    positions: list[int],
    found: list[bool],
    filesystems: locations.FileSystems,
    bar: Any,
) -> None:
    """Sets `found` for URLs no listing covers: HEADs in parallel on HTTP, else `isfile`."""
    http: dict[AbstractFileSystem, list[tuple[int, str]]] = defaultdict(list)
    for position in positions:
        fs, path = filesystems.resolve(urls[position])
        if locations._protocols(fs) & locations._UNLISTABLE:
            http[fs].append((position, path))
            continue
        with errors.reading(urls[position]):
            found[position] = bool(fs.isfile(path))
        if bar is not None:
            bar.update(1)
    for fs, members in http.items():
        answers = http_exists.exist_many(fs, [path for _, path in members])
        for (position, _), answer in zip(members, answers):
            if isinstance(answer, BaseException):
                with errors.reading(urls[position]):  # raised naming the URL
                    raise answer
            found[position] = answer
        if bar is not None:
            bar.update(len(members))


def _list_parents(fs: AbstractFileSystem, rows: dict[str, int]) -> dict[str, set[str]]:
    """`{parent: names of the files directly in it}`; `{}` if `fs` cannot list."""
    if locations._protocols(fs) & locations._UNLISTABLE:
        return {}
    groups: dict[Any, list[str]] = defaultdict(list)  # by bucket (lakeFS: repository and ref)
    for parent in sorted(rows):
        fast = parallel_listing.lister_for(fs, parent)
        groups[fast[0].scope if fast is not None else None].append(parent)
    listed: dict[str, set[str]] = {}
    for scope, parents in groups.items():
        count = sum(rows[parent] for parent in parents)
        few = len(parents) <= FOLDERS_LISTED_APART
        if scope is not None and (few or count >= ROWS_PER_FOLDER_APART * len(parents)):
            listed.update(_list_apart(fs, parents))
        else:
            listed.update(_list_together(fs, parents))
    return listed


def _list_apart(fs: AbstractFileSystem, parents: list[str]) -> dict[str, set[str]]:
    """Lists each parent for the objects directly in it, in parallel."""
    prefixes: dict[str, str] = {}
    lister: parallel_listing.Lister | None = None
    for parent in parents:
        fast = parallel_listing.lister_for(fs, parent)
        if fast is not None:
            lister, prefix = fast
            prefixes[prefix + "/" if prefix else ""] = parent
    if lister is None:
        return {}
    with errors.reading(fs.unstrip_protocol(locations._common_dir(parents))):
        listed = parallel_listing.list_folders(lister, prefixes)
    return {prefixes[prefix]: set(names) for prefix, names in listed.items()}


def _list_together(fs: AbstractFileSystem, parents: list[str]) -> dict[str, set[str]]:
    """Lists the common folder of `parents` once (`ls` for a single one elsewhere than S3)."""
    root = locations._common_dir(parents)
    if not root and len(parents) > 1:  # nothing in common (several buckets)
        listed: dict[str, set[str]] = {}
        for parent in parents:
            listed.update(_list_together(fs, [parent]))
        return listed
    listed = {parent: set() for parent in parents}
    try:
        with errors.reading(fs.unstrip_protocol(root)):
            if len(parents) == 1 and parallel_listing.lister_for(fs, root) is None:
                try:
                    entries = fs.ls(root, detail=True, refresh=True)
                finally:
                    fs.invalidate_cache(root)
                relative = [
                    e["name"].rstrip("/")[len(root) + 1 :]
                    for e in entries
                    if e.get("type") != "directory"
                ]
            else:
                relative = trees.find(fs, root)
    except FileNotFoundError:
        return listed
    for entry in relative:
        folder, _, name = entry.rpartition("/")
        names = listed.get(f"{root}/{folder}" if folder else root)
        if names is not None and name:
            names.add(name)
    return listed


def _missing_prefixes(
    fs: AbstractFileSystem, parents: Sequence[str], present: set[str]
) -> list[str]:
    """The `parents` with no listed file that do not exist (at most 16 are checked)."""
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
