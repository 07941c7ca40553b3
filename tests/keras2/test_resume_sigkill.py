"""On Keras 2: a training process killed with SIGKILL resumes from its backup in a new process.

Split from `test_resume.py` (each is a pytest-xdist unit: these take most of the time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# --------------------------------------------------------------------------- SIGKILL sweep

# A chain of runs of 3 epochs of 3 batches, a backup after every batch: each run resumes the
# previous one's backup and is killed at the next point, so every training step is killed in
# turn, and every point of a save: after the data record, before Keras's backup (`record`),
# after the save (`saved`), and each epoch boundary (after the last batch's save, and before
# the epoch's end: `epoch_end`). `(global step, phase)`; the next run restarts at the step,
# or after it once Keras saved it.
SWEEP = [(0, "record"), (0, "saved"), (1, "record"), (2, "saved"), (3, "record"),
         (4, "saved"), (5, "epoch_end"), (6, "saved"), (7, "record"), (8, "saved")]  # fmt: skip
SHORT_SWEEP = [(1, "saved"), (2, "epoch_end"), (4, "record"), (7, "saved")]


def _runner(tmp_path, directory: str, files: list[str], *options: str):
    backup = tmp_path / "backup"
    base = [sys.executable, os.path.join(ROOT, "tests", "keras2", "resume_run.py"),
            "--directory", directory, "--files", json.dumps(files), "--backup", str(backup),
            *options]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=ROOT)

    def run(name: str, *extra: str) -> tuple[list[dict], int]:
        record = str(tmp_path / f"{name}.jsonl")
        done = subprocess.run(base + ["--record", record, *extra], env=env, timeout=300,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode in (0, -9), f"{name}: {done.stderr[-3000:]}"
        assert "Warning" not in done.stderr, f"{name}: {done.stderr[-3000:]}"
        lines = [json.loads(line) for line in open(record)] if os.path.exists(record) else []
        return lines, done.returncode

    return run


def _sweep(run, tmp_path, sweep) -> None:
    reference, _ = run("reference", "--backup", str(tmp_path / "unused"),
                       "--weights", str(tmp_path / "reference.npz"),
                       "--state", str(tmp_path / "reference.json"))  # fmt: skip
    assert len(reference) == 9
    restart = 0
    for step, phase in sweep:
        name = f"kill-{step}-{phase}"
        record, rc = run(name, "--kill-step", f"{step - restart}:{phase}")
        assert rc == -9, f"{name} was not killed"
        assert record == reference[restart : step + 1], name  # batches, augmentation, weights
        restart = step if phase == "record" else step + 1
    record, rc = run("last", "--weights", str(tmp_path / "resumed.npz"),
                     "--state", str(tmp_path / "resumed.json"))  # fmt: skip
    assert rc == 0 and record == reference[restart:]
    ours, theirs = np.load(tmp_path / "resumed.npz"), np.load(tmp_path / "reference.npz")
    for key in theirs.files:
        np.testing.assert_array_equal(ours[key], theirs[key])
    with open(tmp_path / "resumed.json") as a, open(tmp_path / "reference.json") as b:
        assert json.load(a) == json.load(b)  # `state_dict()` after the resumed fit: epoch 3


@pytest.mark.slow
def test_sigkill_at_every_step_and_save_point_then_resume(image_dir, tmp_path):
    """Every restart trains the uninterrupted run's stream, order included; weights equal."""
    directory, df = image_dir
    run = _runner(tmp_path, directory, list(df["filename"])[:6], "--save-freq", "1")
    _sweep(run, tmp_path, SWEEP)


@pytest.mark.slow
def test_sigkill_then_resume_with_fit_shuffle_false(image_dir, tmp_path):
    directory, df = image_dir
    run = _runner(
        tmp_path, directory, list(df["filename"])[:6], "--save-freq", "1", "--no-fit-shuffle"
    )
    _sweep(run, tmp_path, SHORT_SWEEP)


@pytest.mark.slow
def test_a_resume_with_worker_processes_keeps_the_next_epochs_order(image_dir, tmp_path):
    """Keras 2's enqueuer draws the next epoch's order ahead once `fit` took an epoch's batches,
    but not in an epoch resumed mid-way: the callback draws it in its place."""
    directory, df = image_dir
    run = _runner(
        tmp_path, directory, list(df["filename"])[:12], "--save-freq", "1", "--workers", "2",
        "--multiprocessing", "--epoch-end-pause", "0.5",
    )  # fmt: skip
    reference, _ = run("reference", "--backup", str(tmp_path / "unused"))
    assert len(reference) == 18  # 6 batches an epoch: 720 orders
    first, rc = run("first", "--kill-step", "7:saved")  # epoch 1, step 1
    assert rc == -9 and first == reference[:8]
    resumed, rc = run("resumed")
    assert rc == 0 and resumed == reference[8:]  # epoch 1's rest, then epoch 2 in its order
