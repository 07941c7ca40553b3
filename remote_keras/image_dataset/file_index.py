"""The files `image_dataset_from_directory` reads, found and ordered as Keras finds them.

Keras's function (Keras 3.8 to 3.15, `keras.src.utils.dataset_utils.index_directory`)
takes the class folders in sorted order (names starting with `.` left out), walks
each one recursively, orders its files by folder path then file name, keeps the
extensions it decodes, and joins `directory` with each relative path. Here a local
folder is walked the same way with `os.walk`; a URL is listed once through the
package's listing (`remote_keras.storage.listing.tree`: lakeFS at its pinned
commit, listing cache) and ordered the same way. The global shuffle with the seed
and the validation split follow in `datasets`.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from typing import Any

from remote_keras.pipeline.engine import ReadEngine
from remote_keras.storage import listing, locations

# The extensions Keras's `image_dataset_from_directory` reads (compared in lower case).
FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")


def index(
    directory: str,
    inferred: bool,
    class_names: Sequence[str] | None,
    follow_links: bool,
    source: ReadEngine,
) -> tuple[list[str], list[int], list[str]]:
    """Lists `directory` into relative file paths in Keras's order, and their class indices.

    Args:
        directory: A local folder or a URL (pinned already, for lakeFS).
        inferred: Whether labels come from the class folders (`labels="inferred"`);
            otherwise every image below `directory` is read, with class 0.
        class_names: The class folders to read, in label order; by default all, sorted.
        follow_links: Walk into symbolic links to folders (local folders only).
        source: The dataset's engine, which lists a URL.

    Returns:
        `(relative paths, class index per path, class folder names)`; the
        paths use `/` in URLs and `os.sep` locally, as Keras's do.

    Raises:
        ValueError: `class_names` names a folder that is not a class folder.
    """
    if locations.is_url(directory):
        folders, files_of = _url_tree(directory, inferred, source)
        join: Any = posixpath.join
    else:
        folders, files_of = _local_tree(directory, follow_links)
        join = os.path.join
    if not inferred:
        return files_of(""), [0] * len(files_of("")), []
    names = list(folders)
    if class_names is not None:
        if not set(class_names).issubset(folders):
            raise ValueError(
                "The `class_names` passed did not match the sub-folders of "
                f"{directory!r}: found {folders}, received class_names={list(class_names)}"
            )
        names = list(class_names)
    paths: list[str] = []
    labels: list[int] = []
    for label, name in enumerate(names):
        found = [join(name, rel) for rel in files_of(name)]
        paths += found
        labels += [label] * len(found)
    return paths, labels, names


def _local_tree(directory: str, follow_links: bool) -> tuple[list[str], Any]:
    """The class folders of a local `directory`, and a function listing one folder's images."""
    folders = [
        name
        for name in sorted(os.listdir(directory))
        if os.path.isdir(os.path.join(directory, name)) and not name.startswith(".")
    ]

    def files_of(folder: str) -> list[str]:
        top = os.path.join(directory, folder)
        found = []
        for root, _, files in sorted(os.walk(top, followlinks=follow_links), key=lambda w: w[0]):
            for name in sorted(files):
                if name.lower().endswith(FORMATS):
                    found.append(os.path.relpath(os.path.join(root, name), top))
        return found

    return folders, files_of


def _url_tree(url: str, inferred: bool, source: ReadEngine) -> tuple[list[str], Any]:
    """The class folders below `url` (one listing), and a function giving one folder's images."""
    by_folder: dict[str, list[str]] = {"": []}
    for entry in listing.tree(source.listing_scope(), url):
        top, _, rest = entry.partition("/")
        if inferred and (rest or entry.endswith("/")):  # a folder marker makes an empty class
            files = by_folder.setdefault(top, [])
            if rest and not rest.endswith("/"):
                files.append(rest)
        elif not inferred and not entry.endswith("/"):
            by_folder[""].append(entry)
    folders = sorted(name for name in by_folder if name and not name.startswith("."))

    def files_of(folder: str) -> list[str]:
        kept = [rel for rel in by_folder.get(folder, []) if rel.lower().endswith(FORMATS)]
        return sorted(kept, key=lambda rel: (posixpath.dirname(rel), posixpath.basename(rel)))

    return folders, files_of
