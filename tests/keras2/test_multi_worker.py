"""On Keras 2: two real `MultiWorkerMirroredStrategy` workers (127.0.0.1) on the local S3 server.

Each worker is a process running `multi_worker_run.py` with `TF_CONFIG` naming both;
its iterator reads the shard `TF_CONFIG` gives it. tf.distribute splits each batch of a
worker's shard between all replicas (one per worker here), so each worker trains
`len(iterator) * 2` steps per epoch of the dataset `to_tf_dataset()` returns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "keras2", "multi_worker_run.py")
SURVIVOR_LIMIT_S = 60.0  # a worker whose peer was killed must exit by itself within this
STEPS_PER_EPOCH = 6  # 10 images per shard: batches of 4, 4, 2, each split in 2 steps
EPOCHS = 3


def _lines(path: str) -> list:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _run_pair(tmp_path, name: str, spec: dict, timeout_s: float = 400) -> dict:
    """Runs both workers; once one is SIGKILLed, waits at most `SURVIVOR_LIMIT_S` for the other.

    Returns:
        `rcs`, `results` (each worker's RESULT line or None), `steps` and `reads` (each
        worker's lines), `survivor_exit_s` (after the kill: how long the other ran on) and
        `survivor_killed` (it had not exited within the limit: killed here).
    """
    out = tmp_path / name
    out.mkdir()
    ports = free_ports(2)
    spec = {**spec, "out": str(out), "workers": [f"127.0.0.1:{port}" for port in ports]}
    spec_file = out / "spec.json"
    spec_file.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["PYTHONPATH"] = ROOT
    logs = [(open(out / f"stdout-{i}", "w+"), open(out / f"stderr-{i}", "w+")) for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, SCRIPT, str(spec_file), str(i)],
            stdout=logs[i][0],
            stderr=logs[i][1],
            env=env,
        )  # fmt: skip
        for i in range(2)
    ]
    start, ended, killed_at, survivor_killed = time.monotonic(), [None, None], None, False
    try:
        while None in ended:
            now = time.monotonic()
            for i, proc in enumerate(procs):
                if ended[i] is None and proc.poll() is not None:
                    ended[i] = now
                    if proc.returncode == -9 and killed_at is None:
                        killed_at = now
            failed = [i for i, p in enumerate(procs) if p.poll() not in (None, 0, -9)]
            if failed and killed_at is None and not spec.get("kill_after"):
                raise AssertionError(f"{name}: worker {failed[0]}: {_tail(out, failed[0])}")
            if killed_at is not None and None in ended and now - killed_at > SURVIVOR_LIMIT_S:
                survivor_killed = True  # SIGTERM may not stop TensorFlow's collectives
                for proc in procs:
                    proc.kill()
            assert now - start < timeout_s, f"{name}: still running after {timeout_s} s"
            time.sleep(0.1)
    finally:
        for proc in procs:
            proc.kill()  # SIGKILL: a worker blocked in a collective may ignore SIGTERM
            proc.wait()
        for pair in logs:
            for log in pair:
                log.close()
    results = []
    for i in range(2):
        text = (out / f"stdout-{i}").read_text()
        found = [line for line in text.splitlines() if line.startswith("RESULT ")]
        results.append(json.loads(found[-1].removeprefix("RESULT ")) if found else None)
    survivor_exit_s = None
    if killed_at is not None:
        survivor_exit_s = max(t for t in ended if t is not None) - killed_at
    return {
        "rcs": [p.returncode for p in procs],
        "results": results,
        "steps": [_lines(str(out / f"steps-{i}.jsonl")) for i in range(2)],
        "reads": [_lines(str(out / f"reads-{i}.jsonl")) for i in range(2)],
        "weights": [str(out / f"weights-{i}.npz") for i in range(2)],
        "survivor_exit_s": survivor_exit_s,
        "survivor_killed": survivor_killed,
        "out": out,
    }


def _tail(out, index: int) -> str:
    return (out / f"stderr-{index}").read_text()[-4000:]


def _spec(s3_images, s3_options, mode: str, backup: str | None = None, kill_after=None) -> dict:
    url, df = s3_images
    rows = df[["filename"]].iloc[:20]  # 10 images per worker
    return {"rows": rows.to_dict("records"), "directory": url, "options": s3_options,
            "mode": mode, "backup": backup, "kill_after": kill_after}  # fmt: skip


def _check_reads(run: dict, url: str, names, epochs) -> list[list[int]]:
    """Each epoch: each worker read its own 10 images once, together all 20; returns counts."""
    expected = {f"{url}/{name}" for name in names}
    counts = []
    for epoch in epochs:
        per_worker = [[p for e, p in reads if e == epoch] for reads in run["reads"]]
        counts.append([len(paths) for paths in per_worker])
        assert [len(set(paths)) for paths in per_worker] == [10, 10], epoch  # one read each
        assert [len(paths) for paths in per_worker] == [10, 10], epoch
        assert not set(per_worker[0]) & set(per_worker[1]), epoch  # disjoint
        assert set(per_worker[0]) | set(per_worker[1]) == expected, epoch  # covering
    return counts


@pytest.mark.slow
def test_fit_refuses_a_sharded_iterator_under_multi_worker(s3_images, s3_options, tmp_path):
    """Keras 2's fit would split each worker's shard again (half the steps): refused, as on
    Keras 3, before any step; `to_tf_dataset()` trains every batch of the shard."""
    run = _run_pair(tmp_path, "refuse", _spec(s3_images, s3_options, "refuse"))
    assert run["rcs"] == [0, 0], [_tail(run["out"], i) for i in range(2)]
    for index, result in enumerate(run["results"]):
        assert result["shard"] == [index, 2] and result["batches"] == 3
        assert "to_tf_dataset()" in result["refused"] and "num_shards=1" in result["refused"]
        assert f"shard {index} of 2" in result["refused"]
        assert result["steps_before"] == 0  # refused before a step
        assert result["steps_dataset"] == STEPS_PER_EPOCH  # not 3, as the iterator itself gave


@pytest.mark.slow
def test_kill_one_worker_then_resume_both_trains_the_uninterrupted_stream(
    s3_images, s3_options, tmp_path
):
    """SIGKILL worker 1, then (another run) worker 0, mid-epoch; the other worker exits by
    itself; restarted, each worker trains the rest of its uninterrupted stream, step for step
    (rows and pixels), and the weights end equal to the uninterrupted run's."""
    url, df = s3_images
    names = list(df["filename"].iloc[:20])
    reference = _run_pair(
        tmp_path, "reference",
        _spec(s3_images, s3_options, "resume", str(tmp_path / "backup-reference")),
    )  # fmt: skip
    assert reference["rcs"] == [0, 0]
    ref_steps = reference["steps"]
    assert [len(s) for s in ref_steps] == [EPOCHS * STEPS_PER_EPOCH] * 2
    _check_reads(reference, url, names, range(EPOCHS))
    ref_weights = [np.load(path) for path in reference["weights"]]
    for key in ref_weights[0].files:  # one model, all-reduced
        np.testing.assert_array_equal(ref_weights[0][key], ref_weights[1][key])

    # Backups (save_freq=3, each taken once its batch ends) after global steps 3, 5, 9, 11...
    # Killed after 10 steps (index 9: its backup taken) or 11, Keras resumes at step 10.
    for killed, steps_done in ((1, 10), (0, 11)):
        backup = tmp_path / f"backup-kill-{killed}"
        spec = _spec(s3_images, s3_options, "resume", str(backup), [killed, steps_done])
        first = _run_pair(tmp_path, f"kill-{killed}", spec)
        assert first["rcs"][killed] == -9
        assert not first["survivor_killed"], f"worker {1 - killed} did not exit by itself"
        assert first["rcs"][1 - killed] != 0  # its collectives failed: it did not finish
        print(f"kill worker {killed}: the other exited after {first['survivor_exit_s']:.1f} s "
              f"(rc {first['rcs'][1 - killed]})")  # fmt: skip
        second = _run_pair(tmp_path, f"restart-{killed}", {**spec, "kill_after": None})
        assert second["rcs"] == [0, 0], [_tail(second["out"], i) for i in range(2)]
        for worker in range(2):
            before, after = first["steps"][worker], second["steps"][worker]
            resumed_at = len(ref_steps[worker]) - len(after)
            assert resumed_at == 10, (killed, worker, resumed_at)  # mid-epoch 1
            assert before[:resumed_at] + after == ref_steps[worker], (killed, worker)
            weights = np.load(second["weights"][worker])
            for key in ref_weights[worker].files:
                np.testing.assert_array_equal(weights[key], ref_weights[worker][key])
        _check_reads(second, url, names, [2])  # the epoch after the resumed one
        left = [os.path.join(d, f) for d, _, files in os.walk(backup) for f in files]
        assert not [name for name in left if name.endswith(".tmp")], left
