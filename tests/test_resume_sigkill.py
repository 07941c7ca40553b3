"""A training process killed with SIGKILL, resumed from its backup in a new process.

Split from `test_resume.py` (each is a pytest-xdist unit: these take most of the time); the
sweep of every step and save point on each backend is `test_resume_sweep.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- SIGKILL, S3


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_on_s3(s3_images, s3_options, s3_proxy, tmp_path):
    """A crash in epoch 2 of 3, resumed in a new process: the same stream, nothing read twice."""
    url, df = s3_images
    files = list(df["filename"])
    base = [sys.executable, os.path.join(ROOT, "tests", "resume_run.py"), "--directory", url,
            "--files", json.dumps(files), "--storage-options", json.dumps(s3_options),
            "--backup", str(tmp_path / "backup"), "--save-freq", "3"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=ROOT)

    def run(name: str, *extra: str) -> tuple[list[dict], int, int, str]:
        record = str(tmp_path / f"{name}.jsonl")
        s3_proxy.reset()
        done = subprocess.run(base + ["--record", record, *extra], env=env, timeout=300,
                              capture_output=True, text=True)  # fmt: skip
        gets = s3_proxy.reset().get("GET", 0)
        lines = [json.loads(line) for line in open(record)] if os.path.exists(record) else []
        return lines, done.returncode, gets, done.stderr[-3000:]

    reference, rc, _, error = run("reference", "--backup", str(tmp_path / "unused"),
                           "--weights", str(tmp_path / "reference.npz"))  # fmt: skip
    assert rc == 0, error
    per_epoch = -(-len(files) // 2)
    crashed, rc, _, error = run("crashed", "--kill", "1:5")
    assert rc == -9, error  # SIGKILL
    assert len(crashed) == per_epoch + 6
    metadata = json.load(open(tmp_path / "backup" / "training_metadata.json"))
    saved = metadata["remote_keras"]["records"][-1]
    # 11 steps an epoch, a backup every 3: the last one after step 4 of epoch 2 (from 0).
    assert (saved["epoch"], saved["batch"]) == (1, 4)
    restart = per_epoch + 4
    resumed, rc, gets, error = run("resumed", "--weights", str(tmp_path / "resumed.npz"))
    assert rc == 0, error
    assert crashed[:restart] == reference[:restart]
    assert resumed == reference[restart:]  # same files, order and augmentation
    assert gets == sum(len(step["rows"]) for step in resumed)  # nothing before it read again
    ours, theirs = np.load(tmp_path / "resumed.npz"), np.load(tmp_path / "reference.npz")
    for key in theirs.files:
        np.testing.assert_array_equal(ours[key], theirs[key])


@pytest.mark.slow
def test_sigkill_then_resume_under_jax(image_dir, tmp_path):
    """The same crash and resume on Keras's JAX backend (local files)."""
    pytest.importorskip("jax")
    local, df = image_dir
    files = json.dumps(list(df["filename"]))
    base = [sys.executable, os.path.join(ROOT, "tests", "resume_run.py"), "--directory", local,
            "--files", files, "--backup", str(tmp_path / "backup")]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=ROOT, KERAS_BACKEND="jax")

    def run(name: str, *extra: str) -> tuple[list[dict], int]:
        record = str(tmp_path / f"{name}.jsonl")
        done = subprocess.run(base + ["--record", record, *extra], env=env, timeout=300,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode in (0, -9), done.stderr[-3000:]
        return [json.loads(line) for line in open(record)], done.returncode

    reference, _ = run("reference", "--backup", str(tmp_path / "unused"))
    crashed, rc = run("crashed", "--kill", "1:5")
    resumed, _ = run("resumed")
    assert rc == -9
    restart = len(reference) // 3 + 4  # the backup after step 4 of epoch 2 (a backup every 3)
    assert crashed[:restart] == reference[:restart]
    assert resumed == reference[restart:]
