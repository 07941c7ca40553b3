"""The core (storage and the batch pipeline) imports and reads batches with Keras and TF absent.

A subprocess makes `import keras` and `import tensorflow` fail before anything
is imported, then imports every core module and reads epochs of batches from
the S3 server through `remote_keras.pipeline.reader.BatchReader`; the parent compares
them with what the Keras iterator gives for the same files.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import remote_keras as rk
from tests.helpers import assert_same_batch

# Modules that must import without Keras or TensorFlow: everything outside the Keras fronts
# (their shared core, `keras_agnostic`, and `image_dataset` included).
CORE_PACKAGES = (
    "remote_keras.storage",
    "remote_keras.pipeline",
    "remote_keras.keras_agnostic",
    "remote_keras.image_dataset",
    "remote_keras.keras_lines",
)
CORE_MODULES = (
    "remote_keras",
    "remote_keras._quiet",
    "remote_keras.errors",
    "remote_keras.cause_chain",
    "remote_keras.redaction",
    "remote_keras.client_errors",
    "remote_keras.client_logs",
    "remote_keras.demo",
)
# Modules of the Keras front that need no Keras to import (they use it when called).
FRONT_WITHOUT_KERAS = (
    "remote_keras.keras2",
    "remote_keras.keras2.datasets",
    "remote_keras.keras3",
    "remote_keras.keras3.backup_files",
)


def _modules() -> set[str]:
    return {"remote_keras"} | {
        module.name
        for module in pkgutil.walk_packages(rk.__path__, "remote_keras.")
        if not module.name.startswith("remote_keras.testing")
    }


CORE = sorted(
    name
    for name in _modules()
    if name in CORE_MODULES
    or name.startswith(tuple(p + "." for p in CORE_PACKAGES))
    or name in CORE_PACKAGES
)
KERAS_LAYER = sorted(
    name
    for name in _modules()
    if name.startswith(("remote_keras.keras3", "remote_keras.keras2"))
    and name not in FRONT_WITHOUT_KERAS
)

# Runs first in the subprocess: Keras, TensorFlow (and the other backends) cannot be imported.
BLOCKER = """
import sys

class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("keras", "tensorflow", "tf_keras", "jax", "torch"):
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, _Blocked())
"""


def _run_blocked(code: str, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / "blocked.py"
    script.write_text(BLOCKER + textwrap.dedent(code))
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=path),
    )


def test_every_module_is_in_a_layer():
    found = _modules()
    front = set(KERAS_LAYER) | set(FRONT_WITHOUT_KERAS)
    assert found == set(CORE) | front, sorted(found - set(CORE) - front)
    assert not set(CORE) & front
    assert len(CORE) > 30 and len(KERAS_LAYER) > 5  # the lists are the real package


@pytest.mark.slow
def test_core_modules_import_without_keras(tmp_path):
    result = _run_blocked(
        f"""
        import importlib, json
        outcome = {{}}
        for name in {CORE + list(FRONT_WITHOUT_KERAS) + KERAS_LAYER!r}:
            try:
                importlib.import_module(name)
                outcome[name] = "ok"
            except ImportError as exc:
                outcome[name] = str(exc)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("keras", "tensorflow"))
        print(json.dumps({{"outcome": outcome, "loaded": loaded}}))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    importable = CORE + list(FRONT_WITHOUT_KERAS)
    assert {name: report["outcome"][name] for name in importable} == dict.fromkeys(importable, "ok")
    # The blocker works: the Keras layer cannot be imported.
    for name in KERAS_LAYER:
        assert "is blocked in this test" in report["outcome"][name], name
    assert report["loaded"] == []


@pytest.mark.parametrize("shuffle", [False, True])
def test_core_reads_the_keras_iterators_batches_without_keras(
    s3_images, s3_options, tmp_path, shuffle
):
    url, _ = s3_images
    settings = dict(target_size=(10, 12), batch_size=4, shuffle=shuffle, seed=7)
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_directory(url, **settings) as it:
        expected = []
        for epoch in (0, 1):
            it.set_epoch(epoch)
            expected.append([it[i] for i in range(len(it))])
        paths, labels, classes = it.filepaths, it.classes.tolist(), len(it.class_indices)
    assert len(expected[0]) > 2 and paths[0].startswith("s3://")
    (tmp_path / "job.json").write_text(
        json.dumps(
            dict(
                paths=paths,
                labels=labels,
                num_classes=classes,
                settings=settings,
                storage_options=s3_options,
            )
        )
    )
    result = _run_blocked(
        """
        import json
        import numpy as np
        from remote_keras.pipeline.reader import BatchReader

        job = json.load(open("job.json"))
        arrays = {}
        with BatchReader(
            job["paths"],
            job["labels"],
            class_mode="categorical",
            num_classes=job["num_classes"],
            storage_options=job["storage_options"],
            prefetch_batches=2,
            **job["settings"],
        ) as reader:
            for epoch in (0, 1):
                for i, (x, y) in enumerate(reader.epoch_batches(epoch)):
                    arrays[f"x{epoch}_{i}"], arrays[f"y{epoch}_{i}"] = x, y
            stats = reader.stats
        np.savez("batches.npz", **arrays)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("keras", "tensorflow"))
        print(json.dumps({"loaded": loaded, "images": stats.images}))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report == {"loaded": [], "images": 2 * len(paths)}
    got = np.load(tmp_path / "batches.npz")
    for epoch, batches in enumerate(expected):
        for i, batch in enumerate(batches):
            assert_same_batch(batch, (got[f"x{epoch}_{i}"], got[f"y{epoch}_{i}"]))
    if shuffle:  # the two epochs' orders differ, so the comparison covers the seeded order
        assert not np.array_equal(expected[0][0][0], expected[1][0][0])
