"""The file Keras 2's `BackupAndRestore` of this package keeps beside Keras's backup.

`remote_keras_iterator.json` holds the last two records of where the data stream
resumes (`remote_keras.keras2.backup`). Under `MultiWorkerMirroredStrategy` every
worker runs the callback on one shared backup folder, as Keras 2's own
multi-worker `BackupAndRestore` expects (the chief writes `<backup_dir>/chief`,
the other workers temporary folders Keras removes after each save:
`keras/src/distribute/worker_training_state.py` lines 95-119 and 141 of Keras
2.15). The records of all workers are the same but for the shard index, which
each worker derives from `TF_CONFIG` again: the chief alone writes them, with
the number of shards, and every worker reads them. A write goes to a temporary
file named for its process, renamed over the record: a kill leaves the last
complete record, and a stale temporary file of this package is removed when
the chief starts again.
"""

from __future__ import annotations

import json
import os
import posixpath
import uuid
import warnings
from typing import Any

from remote_keras.keras2 import keras_api

RECORDS_FILE = "remote_keras_iterator.json"
RECORDS_FORMAT = 2


def write(path: str, records: list[dict[str, Any]], shards: int) -> None:
    """Writes `records` to `path` atomically, through a temporary file of this process.

    Args:
        path: The record file (a local path or a `tf.io.gfile` URL).
        records: The records, oldest first.
        shards: How many shards (workers) read the data.
    """
    folder = posixpath.dirname(path) or "."
    keras_api.gfile.makedirs(folder)
    temporary = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp"
    with keras_api.gfile.GFile(temporary, "w") as f:
        json.dump({"format": RECORDS_FORMAT, "shards": shards, "records": records}, f)
    keras_api.gfile.rename(temporary, path, overwrite=True)


def read(path: str, shards: int) -> list[dict[str, Any]] | None:
    """The records at `path` (`None`: no file; `[]`: another version's).

    Args:
        path: The record file.
        shards: How many shards (workers) read the data in this run.

    Raises:
        ValueError: The records were written by a run of another number of
            workers (its shards hold other samples: no stream continues).
    """
    if not keras_api.gfile.exists(path):
        return None
    with keras_api.gfile.GFile(path, "r") as f:
        saved = json.load(f)
    if saved.get("format") != RECORDS_FORMAT:
        warnings.warn(
            f"{path} was written by another version of remote_keras: the iterator starts "
            "from the epoch Keras resumes at.",
            stacklevel=3,
        )
        return []
    records = list(saved["records"])
    recorded = saved.get("shards")
    if recorded is None and records:  # written before the count was
        recorded = records[-1]["train"]["shard"][1]
    if recorded is not None and int(recorded) != shards:
        raise ValueError(
            f"The backup beside {path} was written by a run of {recorded} worker(s), each "
            f"training on its shard of the data, but this run has {shards}: its shards hold "
            "other samples, and resuming would train neither run's data stream. Restart "
            f"with {recorded} worker(s), or start afresh in another backup folder."
        )
    return records


def for_shard(state: dict[str, Any], index: int) -> dict[str, Any]:
    """The chief's iterator `state` for the worker reading shard `index` of as many."""
    return {**state, "shard": [index, state["shard"][1]]}


def remove_stale(path: str) -> list[str]:
    """Removes temporary files of `path` that a killed process left; returns their names.

    Names of this package only: `<record>.<pid>-<id>.tmp`, and `<record>.tmp` of
    earlier versions.
    """
    gfile = keras_api.gfile
    if not gfile.exists(posixpath.dirname(path) or "."):
        return []
    stale = gfile.glob(path + ".*.tmp") + ([path + ".tmp"] if gfile.exists(path + ".tmp") else [])
    for name in stale:
        try:
            gfile.remove(name)
        except keras_api.MissingFileError:  # removed meanwhile
            pass
    return stale
