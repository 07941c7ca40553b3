"""A 3-epoch `fit` killed with SIGKILL at every step and save point, each run resuming the last.

On Keras 3's TensorFlow, JAX and PyTorch backends, with the iterator's default `workers` and
`fit(shuffle=True)` and `False`. Split from `test_resume_sigkill.py` (a pytest-xdist unit each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import needs_jax, needs_torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = [
    pytest.param("tensorflow", marks=pytest.mark.tensorflow),
    pytest.param("jax", marks=needs_jax),
    pytest.param("torch", marks=needs_torch),
]


# A chain of runs of 3 epochs of 3 batches, a backup after every batch: each run resumes the
# previous one's backup and is killed at the next point, so every training step is killed in
# turn, and every point of a save: after the weights' temporary file (`weights`), between
# the weights' and the metadata's renames (`torn`), after the save (`saved`), and each epoch
# boundary (after the last batch's save and before the epoch's end: `saved`, `epoch_end`).
# `(global step, phase)`; the next run restarts at the step, or after it once it was saved.
SWEEP = [(0, "weights"), (0, "torn"), (1, "saved"), (2, "saved"), (3, "torn"), (4, "weights"),
         (5, "epoch_end"), (6, "saved"), (7, "torn"), (8, "saved")]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("fit_shuffle", [True, False], ids=["shuffled", "unshuffled"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_at_every_step_and_save_point_then_resume(
    image_dir, tmp_path, backend, fit_shuffle
):
    """Every restart continues the uninterrupted run's stream, weights included; none crashes.

    On each backend, with the iterator's default `workers` and `fit(shuffle=...)` both ways.
    """
    local, df = image_dir
    files = json.dumps(list(df["filename"])[:6])  # 3 batches of 2
    backup = tmp_path / "backup"
    base = [sys.executable, os.path.join(ROOT, "tests", "resume_run.py"), "--directory", local,
            "--files", files, "--backup", str(backup), "--save-freq", "1",
            "--workers", "4", *([] if fit_shuffle else ["--no-fit-shuffle"])]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=ROOT, KERAS_BACKEND=backend)

    def run(name: str, *extra: str) -> tuple[list[dict], int]:
        record = str(tmp_path / f"{name}.jsonl")
        done = subprocess.run(base + ["--record", record, *extra], env=env, timeout=300,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode in (0, -9), f"{name}: {done.stderr[-3000:]}"
        lines = [json.loads(line) for line in open(record)] if os.path.exists(record) else []
        return lines, done.returncode

    reference, _ = run("reference", "--backup", str(tmp_path / "unused"),
                       "--weights", str(tmp_path / "reference.npz"))  # fmt: skip
    assert len(reference) == 9
    restart, leftover = 0, None
    for step, phase in SWEEP:
        name = f"kill-{step}-{phase}"
        record, rc = run(name, "--kill-step", f"{step - restart}:{phase}")
        assert rc == -9, f"{name} was not killed"
        assert record == reference[restart : step + 1], name  # batches, augmentation, weights
        if leftover is not None:  # the killed save's temporary file, removed by this run's save
            assert not os.path.exists(leftover), name
        temporaries = sorted(backup.glob(".*.tmp.latest.weights.h5"))
        leftover = temporaries[0] if phase == "weights" else None
        assert phase != "weights" or leftover is not None
        restart = step if phase == "weights" else step + 1
    record, rc = run("last", "--weights", str(tmp_path / "resumed.npz"))
    assert rc == 0 and record == reference[restart:]
    ours, theirs = np.load(tmp_path / "resumed.npz"), np.load(tmp_path / "reference.npz")
    for key in theirs.files:
        np.testing.assert_array_equal(ours[key], theirs[key])
