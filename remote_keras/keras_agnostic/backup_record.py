"""The record of the data stream both fronts' `BackupAndRestore` keep, and its one writer.

The schema: a `Record` says where the data stream resumes after a backup
(every field either front records; one a front does not use keeps its
default), kept in one document, `{"format": FORMAT, "shards": k, "records":
[...]}`, oldest record first. Keras 3 stores the document, with one record,
under the `"remote_keras"` key of Keras's backup metadata
(`remote_keras.keras3.backup_files`); Keras 2 stores the last two records in a
file beside Keras 2's backup (`remote_keras.keras2.backup`). `records_of` and
`read` are the one reader: another format gives a warning and no records (the
iterator starts from the epoch Keras resumes at), another shard count a
`ValueError` naming both.

The writer: `stage` writes a file under this process's temporary name in its
target's folder (`.<pid>.tmp.<name>`: a hidden file, that keeps the name's
ending), and `Staged.commit` renames it over the target, so that a reader
sees the previous file or the new one, whole. Staging several files before
committing any gives a save its order (Keras 3: the weights, the metadata,
then their renames, the metadata's the commit point). A kill leaves the
previous files and a temporary one, which `remove_leftovers` removes. Only the
process that writes the backup calls the writer and the clean-up: Keras 2's
chief (its strategy's `should_checkpoint`), Keras 3's first JAX process (one
process's clean-up could remove another's staged file before its commit).

Files are reached through `Files`: `LOCAL` here (the `os` module), `tf.io.gfile`
from the Keras 2 front (`remote_keras.keras2.keras_api.GFILES`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

# The document's format: that of Keras 2's records file before both fronts shared it (its
# records read as they were written). Keras 3's metadata held `"format": 1` and no records.
FORMAT = 2
# This process's temporary file: `.<pid>.tmp.<name>`.
_STAGED = re.compile(r"^\.\d+\.tmp\.(?P<name>.+)$")
# The Keras 2 front's earlier names: `<name>.<pid>-<12 hex>.tmp`, and `<name>.tmp`.
_EARLIER = re.compile(r"^(?P<name>.+?)(?:\.\d+-[0-9a-f]{12})?\.tmp$")


@dataclasses.dataclass(frozen=True)
class Record:
    """Where the data stream resumes after a backup.

    Args:
        epoch: The epoch the stream resumes at.
        batch: What of it was trained: batches (Keras 3), Keras's steps (Keras 2).
        fit_shuffle: `fit(shuffle=...)` as seen (`None`: not seen yet).
        python_random: The Python `random` state the epoch's batch order is
            drawn from (JSON form), or `None`.
        train: The training iterator's `state_dict()`, or `None`.
        validation: The validation iterator's `state_dict()`.
        datasets: The draws of `image_dataset_from_directory` datasets.
        order_origin: The epoch the uninterrupted run's `fit` started at (Keras 3).
        reads: How Keras reads the iterator, `"sequence"` or `"dataset"` (Keras 2).
        extra_draws: Orders Keras 2's enqueuer drew ahead between two epochs.
        optimizer_steps: The optimizer's `iterations` when the backup was taken
            (Keras 2): the record of the backup Keras restored is told by them.
    """

    epoch: int = 0
    batch: int = 0
    fit_shuffle: bool | None = None
    python_random: Any = None
    train: dict[str, Any] | None = None
    validation: dict[str, Any] | None = None
    datasets: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    order_origin: int = 0
    reads: str | None = None
    extra_draws: int | None = None
    optimizer_steps: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record:
        """The record of a JSON object; a missing field takes its default, an unknown one is
        left out."""
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})


def document(records: Iterable[Record], shards: int) -> dict[str, Any]:
    """The JSON document of `records` (oldest first), written by a run of `shards` shards."""
    return {"format": FORMAT, "shards": int(shards), "records": [r.to_json() for r in records]}


def records_of(saved: Any, shards: int | None, where: str) -> list[Record]:
    """The records of a document (`[]`, with a warning, for another format).

    Args:
        saved: The document, as read from JSON.
        shards: How many shards (processes, workers) read the data in this run;
            `None` checks nothing (Keras 3 checks each iterator's state: a
            backup at an epoch's end resumes with any number).
        where: The file, for messages.

    Returns:
        The records, oldest first.

    Raises:
        ValueError: The records were written by a run of another number of
            shards (they hold other samples: no stream continues).
    """
    if not isinstance(saved, Mapping) or saved.get("format") != FORMAT:
        warnings.warn(
            f"{where} was written by another version of remote_keras: the iterator starts "
            "from the epoch Keras resumes at.",
            stacklevel=3,
        )
        return []
    records = [Record.from_json(record) for record in saved.get("records", [])]
    recorded = saved.get("shards")
    if recorded is None and records and records[-1].train:  # written before the count was
        recorded = records[-1].train["shard"][1]
    if shards is not None and recorded is not None and int(recorded) != shards:
        raise ValueError(
            f"The backup beside {where} was written by a run of {recorded} worker(s), each "
            f"training on its shard of the data, but this run has {shards}: its shards hold "
            "other samples, and resuming would train neither run's data stream. Restart "
            f"with {recorded} worker(s), or start afresh in another backup folder."
        )
    return records


# ---------------------------------------------------------------------------- files


class Files(Protocol):
    """The file operations the writer and the reader use."""

    def open(self, path: str, mode: str) -> Any:
        """A file object of `path` in text `mode` (`"r"` or `"w"`)."""

    def replace(self, source: str, target: str) -> None:
        """Renames `source` over `target`."""

    def exists(self, path: str) -> bool:
        """Whether `path` exists."""

    def remove(self, path: str) -> None:
        """Removes the file `path`; one already gone is no error."""

    def listdir(self, folder: str) -> list[str]:
        """The names in `folder` (`[]` when it does not exist)."""

    def makedirs(self, folder: str) -> None:
        """Makes `folder` and its parents; existing ones are no error."""


class LocalFiles:
    """`Files` on the local file system, through `os`."""

    def open(self, path: str, mode: str) -> Any:
        return open(path, mode, encoding="utf-8")

    def replace(self, source: str, target: str) -> None:
        os.replace(source, target)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def listdir(self, folder: str) -> list[str]:
        try:
            return os.listdir(folder)
        except FileNotFoundError:
            return []

    def makedirs(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)


LOCAL: Files = LocalFiles()


def read(path: str, shards: int | None, files: Files = LOCAL) -> list[Record] | None:
    """The records of the document at `path` (`None`: no file), as `records_of` reads them.

    Args:
        path: The document's file.
        shards: How many shards read the data in this run (`None`: not checked).
        files: Where `path` is.

    Raises:
        ValueError: As `records_of`.
    """
    if not files.exists(path):
        return None
    with files.open(path, "r") as f:
        saved = json.load(f)
    return records_of(saved, shards, path)


# ---------------------------------------------------------------------------- the writer


@dataclasses.dataclass(frozen=True)
class Staged:
    """A file written under a temporary name beside its target, not yet in place.

    Args:
        path: The target.
        temporary: The written file, in the target's folder.
        files: Where both are.
    """

    path: str
    temporary: str
    files: Files = LOCAL

    def commit(self) -> None:
        """Renames the temporary file over the target: readers see the old file or the new."""
        self.files.replace(self.temporary, self.path)


def stage(path: str, content: str | Callable[[str], None], files: Files = LOCAL) -> Staged:
    """Writes this process's temporary file of `path`; `commit()` on the result puts it in place.

    Args:
        path: The target file (a local path, or a URL `files` reaches).
        content: The text, or a function that writes the file at the path it is given.
        files: Where `path` is.

    Returns:
        The staged file.
    """
    folder, name = _split(path)
    files.makedirs(folder)
    temporary = _join(folder, f".{os.getpid()}.tmp.{name}")
    if isinstance(content, str):
        with files.open(temporary, "w") as f:
            f.write(content)
    else:
        content(temporary)
    return Staged(path, temporary, files)


def write(path: str, records: Iterable[Record], shards: int, files: Files = LOCAL) -> None:
    """Writes the document of `records` to `path` atomically (`stage`, then `commit`).

    Args:
        path: The document's file.
        records: The records, oldest first.
        shards: How many shards (processes, workers) read the data.
        files: Where `path` is.
    """
    stage(path, json.dumps(document(records, shards)), files).commit()


def leftovers(paths: Iterable[str], files: Files = LOCAL) -> list[str]:
    """The temporary files that staged writes of `paths` (files of one folder) left, sorted.

    Args:
        paths: The target files; only their temporary files count.
        files: Where they are.
    """
    names = {_split(path) for path in paths}
    found = []
    for folder in sorted({folder for folder, _ in names}):
        for entry in sorted(files.listdir(folder)):
            match = _STAGED.match(entry) or _EARLIER.match(entry)
            if match is not None and (folder, match["name"]) in names:
                found.append(_join(folder, entry))
    return found


def remove_leftovers(paths: Iterable[str], files: Files = LOCAL) -> list[str]:
    """Removes the temporary files that killed writes of `paths` left.

    Only the writing process calls it, when no write of its own is staged.

    Args:
        paths: The target files; only their temporary files are removed.
        files: Where they are.

    Returns:
        The files removed.
    """
    removed = leftovers(paths, files)
    for leftover in removed:
        files.remove(leftover)
    return removed


def _split(path: str) -> tuple[str, str]:
    folder, name = posixpath.split(path) if "://" in path else os.path.split(path)
    return folder or ".", name


def _join(folder: str, name: str) -> str:
    return posixpath.join(folder, name) if "://" in folder else os.path.join(folder, name)
