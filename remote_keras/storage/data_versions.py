"""Data-version records: what a run read, written next to its checkpoints, read back to rerun it.

`write_data_version` (and `remote_keras.keras3.callbacks.DataVersionCallback`, at
the start of `fit`)
writes a JSON record of the lakeFS commits the iterators read, each entry
naming the paths read at it, and, per folder, a `.lakefs_ref.yaml` in the
format of `lakectl local` (`src`, `at_head`). `pinned_urls` turns either
file back into `lakefs://repo/<commit>/path` URLs to train from, and
`lakectl local checkout` accepts the YAML files as they are.

`read_table` reads a CSV or Parquet table at a pinned commit; `pin_url`
pins any `lakefs://` URL. Reading `pd.read_csv("lakefs://repo/main/x.csv")`
directly reads the branch's head *including staged changes*, while the
iterators read their images at a commit.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from remote_keras import errors
from remote_keras.storage import lakefs, locations

REF_FILE = ".lakefs_ref.yaml"  # the file `lakectl local` keeps in a folder it manages
_PARQUET = (".parquet", ".pq", ".parq")


def write_data_version(
    iterators: Any,
    filepath: str | os.PathLike,
    storage_options: Mapping[str, Any] | None = None,
    lakefs_refs: bool = True,
) -> dict:
    """Writes the data versions of `iterators` to `filepath` as JSON and returns the record.

    Each entry is one lakeFS `(repository, ref)` resolved to its commit, with
    the paths read there (the images' folder, and the table for a
    `flow_from_dataframe` built from a table URL) and those paths as pinned
    URLs. A local folder that `lakectl local` manages (it, or a folder above
    it, has a `.lakefs_ref.yaml`) is recorded by that file's `src` and
    `at_head`.

    With `lakefs_refs`, each folder read is also written as
    `<stem>.lakefs/<role>/<repository>/<folder>/.lakefs_ref.yaml` next to the
    JSON (`stem` being its name without `.json`), which
    `lakectl local checkout <that folder>` accepts.

    Args:
        iterators: One iterator or a list.
        filepath: Local path or URL of the JSON file.
        storage_options: Options for writing to a URL; by default the first
            iterator's `storage_options`.
        lakefs_refs: Whether to write the `.lakefs_ref.yaml` files.

    Returns:
        `{"data": [{"endpoint", "repository", "ref", "commit_id", "role",
        "paths", "urls"}, ...]}` (plus `"local_path"` for a `lakectl local`
        folder).
    """
    iterators = as_list(iterators)
    if storage_options is None:
        storage_options = next(
            (it.options.storage_options for it in iterators if hasattr(it, "options")), None
        )
    filesystems = locations.FileSystems(storage_options)
    record = {"data": [entry for it in iterators for entry in _entries(it)]}
    path = os.fspath(filepath)
    _write(path, json.dumps(record, indent=2).encode(), filesystems)
    if lakefs_refs:
        base = path[: -len(".json")] if path.endswith(".json") else path
        for entry in record["data"]:
            for folder in dict.fromkeys(_folder_of(p) for p in entry["paths"]):
                parts = (entry["role"], entry["repository"], folder.rstrip("/"))
                where = "/".join(part for part in parts if part)
                src = f"lakefs://{entry['repository']}/{entry['ref']}/{folder}"
                _write(
                    f"{base}.lakefs/{where}/{REF_FILE}",
                    lakefs_ref_yaml(src, entry["commit_id"]).encode(),
                    filesystems,
                )
    return record


def lakefs_ref_yaml(src: str, at_head: str) -> str:
    """Returns the text of a `.lakefs_ref.yaml`: `src` (a `lakefs://` URI) and `at_head`.

    Args:
        src: `lakefs://repo/ref/path/`, the ref as a branch or tag name.
        at_head: The commit id the folder is at.
    """
    import yaml

    return yaml.safe_dump({"src": src, "at_head": at_head}, sort_keys=False)


def read_lakefs_ref(path: str | os.PathLike, storage_options: Mapping[str, Any] | None = None):
    """Reads a `.lakefs_ref.yaml`, or the one of a folder (or of a folder above it).

    Args:
        path: The file, or a folder managed by `lakectl local`; a URL works
            for the file itself.
        storage_options: Options for reading a URL.

    Returns:
        `{"src": ..., "at_head": ...}`.

    Raises:
        FileNotFoundError: no such file, and no folder above has one.
        ValueError: the file lacks `src` or `at_head`, or `src` is not a `lakefs://` URI.
    """
    import yaml

    path = os.fspath(path)
    if not locations.is_url(path) and os.path.isdir(path):
        found = find_lakefs_ref(path)
        if found is None:
            raise FileNotFoundError(f"No {REF_FILE} in {path!r} or a folder above it")
        path = found
    text = _read(path, storage_options).decode("utf-8")
    document = yaml.safe_load(text) or {}
    src, at_head = document.get("src"), document.get("at_head")
    if not isinstance(src, str) or not isinstance(at_head, str) or not at_head:
        raise ValueError(f"{errors.redact(path)!r} needs `src` and `at_head` (lakectl local's)")
    if not lakefs.is_lakefs(src):
        raise ValueError(f"`src` in {errors.redact(path)!r} is not a lakefs:// URI: {src!r}")
    return {"src": src, "at_head": at_head}


def find_lakefs_ref(folder: str | os.PathLike) -> str | None:
    """Returns the `.lakefs_ref.yaml` of a local folder or of the nearest folder above it."""
    current = os.path.abspath(os.fspath(folder))
    while True:
        candidate = os.path.join(current, REF_FILE)
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def pinned_urls(
    source: str | os.PathLike | Mapping[str, Any],
    storage_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """Turns a data-version record back into the pinned URLs to train from.

    Args:
        source: A JSON record (its path or URL, or the dict that
            `write_data_version` returned), a `.lakefs_ref.yaml`, or a folder
            managed by `lakectl local`.
        storage_options: Options for reading a URL.

    Returns:
        `lakefs://repo/<commit>/path` per path read, in the record's order:
        for an iterator, its images' folder first, then its table.

    Example:

    ```python
    images, = rk.pinned_urls("ckpt/data_version.json")
    train = gen.flow_from_directory(images, **storage)
    ```
    """
    if isinstance(source, Mapping):
        return [url for entry in source.get("data", ()) for url in _entry_urls(entry)]
    path = os.fspath(source)
    if path.endswith(".yaml") or path.endswith(".yml") or _is_local_dir(path):
        ref = read_lakefs_ref(path, storage_options)
        repository, _, folder = _split_src(ref["src"])
        return [f"lakefs://{repository}/{ref['at_head']}/{folder}"]
    record = json.loads(_read(path, storage_options))
    return pinned_urls(record)


def pin_url(url: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """Returns `lakefs://repo/<commit>/path` for a `lakefs://` URL at a branch or tag.

    Other URLs are returned unchanged.

    Args:
        url: `lakefs://repo/<ref>/path`.
        storage_options: lakeFS's options (`host`, `username`, `password`).
    """
    return lakefs.Pinner(locations.FileSystems(storage_options)).pin(url)


def read_table(
    url: str | os.PathLike,
    storage_options: Mapping[str, Any] | None = None,
    **read_kwargs: Any,
):
    """Reads a CSV or Parquet table, a `lakefs://` one at its ref's commit.

    Unlike `pd.read_csv("lakefs://repo/main/labels.csv")`, which reads the
    branch's head with its staged changes, this resolves the ref to a
    commit first. Build the images' URLs from the same pin (`pin_url` of the
    folder, or the table's `attrs["source_url"]`) so both come from one
    commit.

    Args:
        url: Local path or URL; `.parquet` (`.pq`, `.parq`) is read as
            Parquet, anything else as CSV.
        storage_options: Options for the URL (lakeFS's, or a store's).
        **read_kwargs: Passed to `pandas.read_csv` / `pandas.read_parquet`.

    Returns:
        A `pandas.DataFrame`; `attrs["source_url"]` is the URL read (pinned).
    """
    pinned = pin_url(os.fspath(url), storage_options)
    return read_table_bytes(pinned, _read(pinned, storage_options), **read_kwargs)


def read_table_bytes(url: str, data: bytes, **read_kwargs: Any):
    """Parses a table's bytes read from `url` (Parquet by extension, else CSV).

    Returns:
        A `pandas.DataFrame` with `attrs["source_url"] = url`.
    """
    import pandas as pd

    parquet = PurePosixPath(url.split("?")[0]).suffix.lower() in _PARQUET
    with errors.reading(url):
        reader = pd.read_parquet if parquet else pd.read_csv
        frame = reader(io.BytesIO(data), **read_kwargs)
    frame.attrs["source_url"] = url
    return frame


# ---------------------------------------------------------------------- internals


def as_list(iterators: Any) -> list[Any]:
    """`iterators` as a list: one iterator, or a list or tuple of them."""
    return list(iterators) if isinstance(iterators, (list, tuple)) else [iterators]


def _entries(iterator: Any) -> list[dict[str, Any]]:
    role = getattr(iterator, "subset", None) or "all"
    entries = []
    table = getattr(iterator, "table_url", None)
    for pin in getattr(iterator, "lakefs_pins", []):
        prefix = pin.url()
        paths = []
        folder = _common_folder(
            p[len(prefix) :] for p in iterator._filepaths if p.startswith(prefix)
        )
        if folder is not None:
            paths.append(folder)
        elif lakefs.is_lakefs(str(iterator.directory or "")):
            directory = pin.url(lakefs.split(str(iterator.directory))[2])
            if directory.startswith(prefix):
                paths.append(directory[len(prefix) :].rstrip("/") + "/")
        if table and table.startswith(prefix):
            paths.append(table[len(prefix) :])
        entry = dict(
            endpoint=pin.endpoint,
            repository=pin.repository,
            ref=pin.ref,
            commit_id=pin.commit_id,
            role=role,
            paths=paths,
        )
        entry["urls"] = _entry_urls(entry)
        entries.append(entry)
    directory = iterator.directory
    if directory and not locations.is_url(os.fspath(directory)):
        found = find_lakefs_ref(directory)
        if found is not None:
            entries.append(_local_entry(os.fspath(directory), found, role))
    return entries


def _local_entry(directory: str, ref_file: str, role: str) -> dict[str, Any]:
    """The entry of a folder that `lakectl local` manages: its `src` and `at_head`."""
    ref = read_lakefs_ref(ref_file)
    repository, name, folder = _split_src(ref["src"])
    managed = os.path.dirname(os.path.abspath(ref_file))
    below = os.path.relpath(os.path.abspath(directory), managed).replace(os.sep, "/")
    path = folder.rstrip("/") + "/" if folder else ""
    if below != ".":
        path = f"{path}{below}/"
    entry = dict(
        endpoint=None,
        repository=repository,
        ref=name,
        commit_id=ref["at_head"],
        role=role,
        paths=[path],
        local_path=os.path.abspath(directory),
    )
    entry["urls"] = _entry_urls(entry)
    return entry


def _split_src(src: str) -> tuple[str, str, str]:
    """`(repository, ref, path)` of a `.lakefs_ref.yaml`'s `src`.

    Split here, not by lakefs-spec: recording a `lakectl local` folder, read
    from disk, needs no lakeFS client (the `lakefs` extra).
    """
    repository, _, rest = src.removeprefix("lakefs://").partition("/")
    ref, _, path = rest.partition("/")
    if not repository or not ref:
        raise ValueError(f"`src` is not lakefs://<repository>/<ref>/<path>: {src!r}")
    return repository, ref, path


def _entry_urls(entry: Mapping[str, Any]) -> list[str]:
    base = f"lakefs://{entry['repository']}/{entry['commit_id']}/"
    return [base + path for path in entry.get("paths") or [""]]


def _common_folder(paths: Iterable[str]) -> str | None:
    """The deepest folder holding every path, with a trailing `/` (`""` for the root).

    Streams `paths` (an iterator's 400,000 paths are never held at once): the prefix every
    path shares is the one the lexicographically smallest and largest share. `None` if empty.
    """
    lowest = highest = None
    for path in paths:
        if lowest is None or path < lowest:
            lowest = path
        if highest is None or path > highest:
            highest = path
    if lowest is None or highest is None:
        return None
    shared = os.path.commonprefix([lowest, highest])
    return shared[: shared.rfind("/") + 1]


def _folder_of(path: str) -> str:
    """`path` if it is a folder (ends with `/`), else the folder holding it."""
    if not path or path.endswith("/"):
        return path
    folder = path.rpartition("/")[0]
    return folder + "/" if folder else ""


def _is_local_dir(path: str) -> bool:
    return not locations.is_url(path) and os.path.isdir(path)


def _write(path: str, data: bytes, filesystems: locations.FileSystems) -> None:
    if not locations.is_url(path) and os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    locations.write_bytes(path, data, filesystems)


def _read(path: str, storage_options: Mapping[str, Any] | None) -> bytes:
    from remote_keras.storage.loaders import FsspecLoader

    return FsspecLoader(storage_options)(path)
