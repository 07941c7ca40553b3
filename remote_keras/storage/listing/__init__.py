"""What a dataset holds: remote folders listed into classes, dataframe rows checked.

`list_classes` is what Keras's `DirectoryIterator.__init__` finds, from one
listing instead of `os.walk` (`trees.walk_files`: the class folders in
parallel, keys only); `valid_rows` is `_filter_valid_filepaths` for URLs,
listing parent folders instead of one request per row
(`existence.existing`). Both reuse what `listing_cache` holds: the
listing (or check) of the other subset of the same generator, and lakeFS
listings at a commit from disk.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, Literal, Protocol

import fsspec
import numpy as np

from remote_keras import errors
from remote_keras.storage import lakefs, locations
from remote_keras.storage.listing import existence, http_exists, listing_cache, trees
from remote_keras.storage.loaders import FsspecLoader, ObstoreLoader
from remote_keras.storage.packed_paths import PackedNames, PrefixedPaths
from remote_keras.storage.progress import progress_bar

# The file extensions Keras's iterators read (their `white_list_formats`).
IMAGE_FORMATS = ("png", "jpg", "jpeg", "bmp", "ppm", "tif", "tiff")


class ListingOptions(Protocol):
    """The options a listing reads (the fields of `remote_keras.LoaderOptions` it uses)."""

    @property
    def progress(self) -> bool: ...
    @property
    def storage_options(self) -> Mapping[str, Any] | None: ...
    @property
    def listing_cache_s(self) -> float | None: ...
    @property
    def listing_cache_dir(self) -> str | os.PathLike[str] | Literal[False] | None: ...
    @property
    def cache_dir(self) -> str | os.PathLike[str] | None: ...


@dataclasses.dataclass(frozen=True)
class ListingScope:
    """What one dataset's listings read through, and whom they share results with.

    Attributes:
        options: The dataset's options (progress bars, listing cache).
        filesystems: The fsspec filesystems listings go through.
        pin: Rewrites a URL to the commit it is read at (lakeFS; others unchanged).
        loader: The dataset's loader: a custom one's `exists(path)` checks rows.
        formats: The file extensions kept.
        generator: The `ImageDataGenerator` whose other subset may reuse a
            listing or check, or `None` (nothing shared).
        subset: `"training"`, `"validation"` or `None`.
        directory: The folder dataframe rows are relative to, or `None`.
        checks: Gives the threads for a custom loader's `exists` (one call
            per row); `None` checks the rows one after another.
    """

    options: ListingOptions
    filesystems: locations.FileSystems
    pin: Callable[[str], str]
    loader: Any = None
    formats: tuple[str, ...] = IMAGE_FORMATS
    generator: Any = None
    subset: str | None = None
    directory: Any = None
    checks: Callable[[], Executor] | None = None


def list_classes(
    scope: ListingScope,
    directory: str,
    classes: list[str] | None = None,
    split: tuple[float, float] | None = None,
) -> tuple[PackedNames, np.ndarray, dict[str, int], str]:
    """Lists `directory`'s class folders as Keras's `DirectoryIterator.__init__` walks them.

    Classes, file order (sorted as `os.walk` would give them) and `subset`
    splits are stock. A folder-marker object (`name/`, zero bytes, as the S3
    console, MinIO and lakeFS make) makes `name` a class even when empty, as
    an empty local folder does; an empty folder without one is invisible to
    a listing, shared with the other subset of the same generator.

    Args:
        scope: What the listing reads through.
        directory: The folder's URL.
        classes: The class folders to read, in label order; by default all, sorted.
        split: The `(start, stop)` fractions of each class's files to keep.

    Returns:
        `(filenames, labels, class_indices, prefix)`: file names relative to
        `directory` (packed: a sequence that compares equal to their list),
        their labels as `int32`, the classes' indices, and the pinned folder
        (ending in `/`) each path read is a name joined to.
    """
    pinned = scope.pin(directory)
    with progress_bar(
        f"Listing {errors.redact(directory)}", scope.options.progress, "objects"
    ) as bar:
        entries = _tree(scope, pinned, bar)
    by_class: dict[str, list[str]] = {}
    for entry in entries:
        top, _, rest = entry.partition("/")
        if rest or entry.endswith("/"):
            by_class.setdefault(top, [])
            if rest and not rest.endswith("/"):
                by_class[top].append(entry)
    names = list(classes or sorted(by_class))
    class_indices = dict(zip(names, range(len(names))))
    filenames: list[str] = []
    labels: list[int] = []
    for name in names:
        files = ordered_like_os_walk(by_class.get(name, []), scope.formats)
        if split:
            start, stop = int(split[0] * len(files)), int(split[1] * len(files))
            files = files[start:stop]
        filenames += files
        labels += [class_indices[name]] * len(files)
    # Every path is `<pinned folder>/<name>`: held as that prefix and the names, not N URLs.
    prefix = pinned.rstrip("/") + "/"
    return PackedNames(filenames), np.asarray(labels, dtype="int32"), class_indices, prefix


def tree(scope: ListingScope, url: str) -> list[str]:
    """Every object below `url`, relative to it, from one listing (or the listing cache).

    Folder markers (and, from backends other than S3 and lakeFS, folders)
    end with `/`. `url` should be pinned already (a lakeFS listing at a
    commit is cached on disk).

    Raises:
        FileNotFoundError: nothing exists under `url`.
    """
    with progress_bar(f"Listing {errors.redact(url)}", scope.options.progress, "objects") as bar:
        return _tree(scope, url, bar)


def _tree(scope: ListingScope, url: str, bar: Any) -> list[str]:
    """The objects below `url` (pinned), from another subset's listing, the disk or a listing.

    See `remote_keras.storage.listing.listing_cache` for what is reused when.
    """
    options = scope.options
    generator, subset = scope.generator, scope.subset
    share_key = listing_cache.fingerprint("tree", url, options.storage_options)
    entries = listing_cache.shared(generator, share_key, subset)
    if entries is None:
        immutable = lakefs.is_lakefs(url)  # pinned: a commit, which never changes
        directory = listing_cache.folder(options)
        max_age = options.listing_cache_s
        key = listing_cache.fingerprint("tree", _store(scope, url), url)
        entries, from_disk = listing_cache.cached_listing(
            lambda: trees.walk_files(url, scope.filesystems, bar),
            key,
            directory,
            max_age,
            immutable,
        )
        listing_cache.share(generator, share_key, subset, entries)
    else:
        from_disk = True
    if from_disk and bar is not None:
        bar.update(len(entries))
    return entries


def _store(scope: ListingScope, url: str) -> Any:
    """What names the store `url` is on, for cache keys: endpoint and protocol, no secrets."""
    if lakefs.is_lakefs(url):
        fs, _ = scope.filesystems.resolve(url)
        return getattr(getattr(getattr(fs, "client", None), "config", None), "host", None)
    return [locations.protocol_of(url), listing_cache.where(scope.options.storage_options)]


def ordered_like_os_walk(files: list[str], formats: tuple[str, ...]) -> list[str]:
    """Sorts and filters files as Keras's sorted `os.walk` does: by folder, then name."""
    if any(".tif" in path.lower() for path in files):
        for path in files:
            if posixpath.basename(path).lower().endswith(".tiff"):
                warnings.warn(
                    'Using ".tiff" files with multiple bands will cause distortion. '
                    "Please verify your output.",
                    stacklevel=4,
                )
    kept = [path for path in files if path.endswith(formats) or path.lower().endswith(formats)]
    if all(path.count("/") == 1 for path in kept):  # one folder: by name
        kept.sort()
        return kept
    kept.sort(key=lambda p: (posixpath.dirname(p), posixpath.basename(p)))
    return kept


def valid_rows(scope: ListingScope, paths: Sequence[str | None], x_col: str) -> np.ndarray:
    """Which rows name an existing file with an image extension, as a boolean mask.

    Rows whose path is `None` (see `row_url`) are invalid without a request.
    Warns with Keras's own message about the rows left out.
    """
    asked = paths if isinstance(paths, PrefixedPaths) else [p for p in paths if p is not None]
    with progress_bar(
        f"Checking {len(asked)} files", scope.options.progress, "files", total=len(asked)
    ) as bar:
        found = iter(_existing(scope, asked, bar))
    exists = [path is not None and next(found) for path in paths]
    formats = scope.formats
    mask = np.array(
        [ok and str(path).lower().endswith(formats) for path, ok in zip(paths, exists)],
        dtype=bool,
    )
    n_invalid = int((~mask).sum())
    if n_invalid:
        warnings.warn(
            f'Found {n_invalid} invalid image filename(s) in x_col="{x_col}". '
            "These filename(s) will be ignored.",
            stacklevel=3,
        )
    return mask


def row_url(directory: Any, filename: str) -> str | None:
    """The path or URL a dataframe row reads, or `None` if it cannot name a file there.

    Local paths are joined as stock Keras joins them. In URLs, `.` and `..`
    segments are resolved as a local folder would resolve them (object
    stores take them literally, or refuse them). A relative row must stay
    inside a URL `directory`; a full URL in a row is read as given, and
    must stay inside its bucket. A row ending with `/` names a folder.

    Args:
        directory: The iterator's `directory` (a local folder, a URL prefix or `None`).
        filename: The row's `x_col` value.

    Returns:
        The path or URL, or `None` for a row that is invalid by construction.
    """
    path = locations.join(directory, filename)
    if not locations.is_url(path) or "::" in path:
        return path  # local (the OS resolves `..`, as for stock Keras) or a chained URL
    if filename.endswith("/"):
        return None
    resolved = _without_dot_segments(path)
    if resolved is None or locations.is_url(filename) or filename.startswith("/"):
        return resolved
    base = _without_dot_segments(str(directory).rstrip("/") + "/")
    return resolved if base is not None and resolved.startswith(base) else None


def row_urls(
    directory: Any, filenames: Sequence[str], pin: Callable[[str], str] = str
) -> Sequence[str | None]:
    """`row_url` of each row, passed through `pin`; plain names under a URL are joined directly.

    Args:
        directory: The iterator's `directory`.
        filenames: The `x_col` values.
        pin: Rewrites each path's prefix (`lakefs.Pinner.pin`); applied once
            to the directory for the rows that are plain names in it.

    Returns:
        One path, URL or `None` per row, as `row_url` gives them, pinned: a
        `PrefixedPaths` when every row is a plain name in `directory`.
    """
    prefix = str(os.fspath(directory)).rstrip("/") + "/" if directory else ""
    if not locations.is_url(prefix) or "::" in prefix or _without_dot_segments(prefix) != prefix:
        return [_pinned(row_url(directory, name), pin) for name in filenames]
    pinned = pin(prefix)
    plain = [
        not name.startswith("/") and not name.endswith("/") and "/." not in "/" + name
        and not locations.is_url(name)
        for name in filenames
    ]  # fmt: skip
    if all(plain):  # every row in `directory`: the paths are made when read
        return PrefixedPaths(pinned, filenames)
    return [
        pinned + name if is_plain else _pinned(row_url(directory, name), pin)
        for name, is_plain in zip(filenames, plain)
    ]


def _pinned(path: str | None, pin: Callable[[str], str]) -> str | None:
    return None if path is None else pin(path)


def _without_dot_segments(url: str) -> str | None:
    """`url` with `.` and `..` segments resolved; `None` if `..` climbs above its bucket."""
    scheme, _, rest = url.partition("://")
    root, _, key = rest.partition("/")
    if "/." not in "/" + key:
        return url
    parts: list[str] = []
    for segment in key.split("/"):
        if segment == "..":
            if not parts:
                return None
            parts.pop()
        elif segment != ".":
            parts.append(segment)
    if key.endswith(("/.", "/..")) or key in (".", ".."):
        parts.append("")  # `a/b/..` is the folder `a/`
    return f"{scheme}://{root}/" + "/".join(parts)


def _existing(scope: ListingScope, paths: Sequence[str], bar: Any) -> list[bool]:
    """Which of `paths` exist: asked of a custom loader's `exists`, else listed by fsspec.

    Raises:
        FileNotFoundError: `directory`, or a bucket or prefix that rows point
            into, does not exist.
        ValueError: a protocol fsspec does not know, with the default loader.
    """
    exists = getattr(scope.loader, "exists", None)
    custom = not isinstance(scope.loader, (FsspecLoader, ObstoreLoader))
    if callable(exists) and custom:
        check = _exists_by(exists, bar)
        return list(scope.checks().map(check, paths) if scope.checks else map(check, paths))
    unknown = sorted(
        {locations.protocol_of(p) for p in paths if locations.is_url(p)}
        - set(fsspec.available_protocols())
    )
    if unknown and custom:
        warnings.warn(
            f"Cannot check that the {len(paths)} files exist: fsspec does not know the "
            f"protocol(s) {unknown} and the loader has no `exists(path) -> bool` method. "
            "Every row is kept (only its file extension is checked); pass "
            "`validate_filenames=False` to skip the check without this warning, or give "
            "the loader an `exists` method.",
            stacklevel=5,
        )
        return [True] * len(paths)
    generator, subset = scope.generator, scope.subset
    if generator is None or subset is None:
        return _listed(scope, paths, bar)
    share_key = listing_cache.fingerprint(
        "exists",
        len(paths),
        hash(tuple(paths)),
        str(scope.directory),
        scope.options.storage_options,
    )
    known = listing_cache.shared(generator, share_key, subset)
    if known is not None:  # the other subset of this dataframe checked the same paths
        if bar is not None:
            bar.update(len(paths))
        return [bool(flag) for flag in known]
    found = _listed(scope, paths, bar)
    listing_cache.share(generator, share_key, subset, bytes(found))
    return found


def _listed(scope: ListingScope, paths: Sequence[str], bar: Any) -> list[bool]:
    """Which of `paths` exist, by listing their folders (`existence.existing`)."""
    if locations.is_url(str(scope.directory)):
        directory = scope.pin(str(scope.directory))
        fs, root = scope.filesystems.resolve(directory)
        with errors.reading(directory):
            there = (
                http_exists.exists(fs, root)  # a HEAD, not fsspec's GET of the folder's page
                if locations._protocols(fs) & locations._UNLISTABLE
                else fs.exists(root)
            )
        if not there:
            raise FileNotFoundError(f"No such directory: {errors.redact(directory)!r}")
    found, missing = existence.existing(paths, scope.filesystems, bar)
    if missing:
        shown = ", ".join(repr(errors.redact(url)) for url in missing[:5])
        raise FileNotFoundError(
            f"No such bucket or prefix: {shown}: nothing is stored there, yet rows of the "
            "dataframe point into it. Check the URLs (and `directory`)."
        )
    return found


def _exists_by(exists: Callable[[str], Any], bar: Any) -> Callable[[str], bool]:
    """Wraps a loader's `exists(path)` to translate its errors and count on `bar`."""

    def check(path: str) -> bool:
        with errors.reading(path):
            result = bool(exists(path))
        if bar is not None:
            bar.update(1)
        return result

    return check
