"""What the multi-process worker scripts record (`multiprocess_run.py`, `mwms_run.py`).

Imported inside a worker once its runtime is set up (JAX's `distributed.initialize`
must come before Keras is imported).
"""

from __future__ import annotations

import hashlib
import json
import urllib.request

import numpy as np

from remote_keras.storage.loaders import FsspecLoader


class Record:
    """Appends JSON lines to `path`, counts this process's GETs, and the URLs its loader read.

    Args:
        path: The record file (a line per write: it survives SIGKILL).
        storage_options: This process's options; their endpoint is its counting proxy.
    """

    def __init__(self, path: str, storage_options: dict) -> None:
        self._file = open(path, "a", buffering=1)
        self._endpoint = storage_options["client_kwargs"]["endpoint_url"]
        self.reads: list[str] = []
        self.loader = _RecordingLoader(storage_options)
        self.loader.reads = self.reads

    def write(self, line: dict) -> None:
        self._file.write(json.dumps(line) + "\n")

    def gets(self) -> int:
        """GETs this process's proxy saw since the last call."""
        with urllib.request.urlopen(self._endpoint + "/__proxy__/counts?reset=1") as answer:
            return json.load(answer).get("GET", 0)

    def phase(self, name) -> None:
        """Writes the reads and GETs since the last phase, as phase `name`."""
        self.write({"phase": name, "reads": sorted(self.reads), "gets": self.gets()})
        self.reads.clear()


class _RecordingLoader(FsspecLoader):
    reads: list[str]

    def load_many(self, paths, executor=None):
        self.reads.extend(paths)
        return super().load_many(paths, executor=executor)


def digest(array) -> str:
    """A short hash of an array's bytes."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]
