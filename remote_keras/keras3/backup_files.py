"""The two files of a `BackupAndRestore` backup, kept a consistent pair across kills.

A backup is a weights file and a metadata file (Keras's names and formats), the
record of the data stream under the metadata's `"remote_keras"` key (the
document of `remote_keras.keras_agnostic.backup_record`, with one record). A
save stages both through that module's writer (temporary files in the backup
folder, the metadata holding the SHA-256 of the weights it goes with), then
commits the weights, then the metadata. A kill before the first rename leaves
the previous pair; a kill between the renames leaves new weights beside old
metadata, which `repair` detects by the digest and completes from the new
metadata's temporary file (a complete file by then). Temporary files left by
killed saves are removed when the next run starts (`prepare`) and by the next
save. With several JAX processes only the first writes (`writes_backups`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

from remote_keras.keras_agnostic import backup_record
from remote_keras.keras_agnostic.backup_record import Record

DIGEST_KEY = "weights_sha256"


def save(
    weights_path: str,
    metadata_path: str,
    write_weights: Callable[[str], None],
    metadata: dict[str, Any],
    open_file: Callable[[str, str], Any] = open,
) -> None:
    """Writes a backup's weights and metadata so that a kill leaves a pair `repair` restores.

    Args:
        weights_path: Where the weights go.
        metadata_path: Where the metadata (JSON) goes; same folder.
        write_weights: Writes the weights to the path it is given.
        metadata: The metadata; the weights' digest is added to it.
        open_file: `(path, mode) -> file` that opens a remote (`://`) metadata
            path for writing (Keras: `keras.src.utils.file_utils.File`).
    """
    if _remote(metadata_path):  # no atomic rename on object stores: written in place
        write_weights(weights_path)
        with open_file(metadata_path, "w") as f:
            f.write(json.dumps(metadata))
        return
    backup_record.remove_leftovers((weights_path, metadata_path))
    weights = backup_record.stage(weights_path, write_weights)
    metadata = dict(metadata, **{DIGEST_KEY: _sha256(weights.temporary)})
    staged = backup_record.stage(metadata_path, json.dumps(metadata))
    weights.commit()
    staged.commit()  # the commit point


def repair(weights_path: str, metadata_path: str) -> None:
    """Makes the metadata match the weights again after a kill between a save's two renames.

    Args:
        weights_path: The backup's weights file.
        metadata_path: The backup's metadata file.

    Raises:
        ValueError: The weights match neither the metadata nor a complete
            temporary metadata file (files changed by something else).
    """
    if _remote(metadata_path) or not os.path.exists(weights_path):
        return
    recorded = None
    if os.path.exists(metadata_path):  # missing after a kill in the first save
        recorded = _read_json(metadata_path).get(DIGEST_KEY)
        if recorded is None:  # a backup written by Keras itself or an older version
            return
    actual = _sha256(weights_path)
    if actual == recorded:
        return
    folder = os.path.dirname(metadata_path)
    for candidate in backup_record.leftovers((metadata_path,)):
        try:
            complete = _read_json(candidate).get(DIGEST_KEY) == actual
        except (OSError, ValueError):  # killed while it was written
            continue
        if complete:  # the killed save's commit, completed
            backup_record.Staged(metadata_path, candidate).commit()
            return
    if recorded is None:
        return  # weights without metadata that are not this module's: as Keras
    raise ValueError(
        f"The backup in {folder!r} is inconsistent: its weights file (sha256 {actual[:12]}...) "
        f"is not the one its metadata names ({recorded[:12]}...), and no saved metadata "
        "matches it. Were its files changed or copied separately? Delete the folder to "
        "train from the start."
    )


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _read_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _remote(path: str) -> bool:
    return "://" in path


def writes_backups() -> bool:
    """Whether this process writes the backup: the only process, or the first of several.

    Several JAX processes (`jax.distributed.initialize`) share one backup folder,
    as Keras's multi-worker backups do: the first writes it (the model is the
    same in all, and so is the data's position, each process reading its own
    shard), and all read it on restart. Were each to write, one's clean-up of
    temporary files could remove the other's before its rename.
    """
    import keras

    if keras.backend.backend() != "jax":
        return True
    import jax

    return jax.process_index() == 0


def save_elsewhere(weights_path: str, write_weights: Callable[[str], None]) -> None:
    """A process that does not write the backup saves the weights to a scratch file, then drops it.

    Keras's JAX `save_weights` gathers the variables from every process (a
    collective), so every process must call it when one does.

    Args:
        weights_path: The backup's weights file (its name is kept).
        write_weights: Writes the weights to the path it is given.
    """
    with tempfile.TemporaryDirectory(prefix="remote_keras-backup-") as scratch:
        write_weights(os.path.join(scratch, os.path.basename(weights_path)))


def prepare(weights_path: str, metadata_path: str) -> None:
    """Before a run: `repair`, then remove what killed saves left (in the writing process).

    Args:
        weights_path: The backup's weights file.
        metadata_path: The backup's metadata file.
    """
    if writes_backups():  # nothing else writes the folder now (one run per folder)
        repair(weights_path, metadata_path)
        if not _remote(metadata_path):
            backup_record.remove_leftovers((weights_path, metadata_path))


def saved_record(metadata_path: str) -> Record | None:
    """The record of the data stream in a backup's metadata.

    Returns:
        The record; `None` without a backup, for one of Keras's own, and for
        one of another version (with a warning: the iterator then starts from
        the epoch Keras resumes at).
    """
    from remote_keras.keras3.keras_src import file_utils

    if not file_utils.exists(metadata_path):
        return None
    with file_utils.File(metadata_path, "r") as f:
        saved = json.loads(f.read()).get("remote_keras")
    # Every process of a run records the same position: another count resumes at an
    # epoch's start (each iterator's state checks it, `resume.own_shard`).
    records = [] if saved is None else backup_record.records_of(saved, None, metadata_path)
    return records[-1] if records else None
