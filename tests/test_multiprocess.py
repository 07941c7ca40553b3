"""Two real JAX processes training one model from the local S3 server: the multi-process matrix.

Each cell starts `tests/multiprocess_run.py` twice (`jax.distributed` on 127.0.0.1,
`DataParallel(auto_shard_dataset=False)`), each process reading through its own counting
proxy, so that GETs are counted per process at the server's door. For every engine
(`flow_from_dataframe`, `flow_from_directory`, `image_dataset_from_directory` with
`format="tf"` and `"grain"`) a run asserts, per process and epoch: the files read are
this process's share (disjoint from the other's, together every file), and the GETs
over the run are exactly one per image per epoch. One kill-and-resume case per front:
a process SIGKILLs itself mid-epoch, the other exits by itself within a bounded time
naming the dead task, and a restart of both continues each process's stream exactly
and ends at the uninterrupted run's weights.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
from PIL import Image

from remote_keras.testing import CountingProxy
from tests.helpers import free_ports, needs_jax, put_objects

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROCESSES, EPOCHS, BATCH = 2, 2, 4
# A dead process is noticed by JAX's coordination service (heartbeats): the others exit.
SURVIVOR_EXIT_S = 120

pytestmark = [pytest.mark.slow, needs_jax]


@pytest.fixture
def images(s3_server, s3fs_direct):
    """`count` unique random-pixel PNGs in classes `a` and `b`; returns `(url, rows)`."""

    def make(count: int) -> tuple[str, list[dict]]:
        rng = np.random.default_rng(count)
        prefix = f"data/mp-{uuid.uuid4().hex[:8]}"
        objects, rows = {}, []
        for i in range(count):
            name = f"{'ab'[i % 2]}/{i:03d}.png"
            buffer = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(buffer, "PNG")
            objects[f"{prefix}/{name}"] = buffer.getvalue()
            rows.append({"filename": name, "class": name[0]})
        put_objects(s3fs_direct, objects)
        return f"s3://{prefix}", rows

    return make


class Cluster:
    """Runs `multiprocess_run.py` as processes 0 and 1, each through its own counting proxy."""

    def __init__(self, s3_server, tmp_path, url: str, rows: list[dict], engine: str) -> None:
        self.tmp_path, self.url, self.rows, self.engine = tmp_path, url, rows, engine
        self.proxies = [CountingProxy(s3_server.port).start() for _ in range(PROCESSES)]
        self.options = []
        for proxy in self.proxies:
            options = s3_server.storage_options
            options["client_kwargs"] = dict(
                options["client_kwargs"], endpoint_url=proxy.endpoint_url
            )
            self.options.append(options)

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.stop()

    def run(
        self,
        name: str,
        backup: str,
        kill: tuple[int, int] | None = None,
        processes: int = PROCESSES,
        **extra,
    ):
        """Runs both processes; `kill=(process, step)`. Returns `(records, codes, exit_s)`.

        `exit_s`: seconds the surviving process took to exit after the killed one died.
        """
        coordinator, *ports = [f"127.0.0.1:{port}" for port in free_ports(1 + processes)]
        env = dict(os.environ, PYTHONPATH=ROOT)
        env.pop("TF_CONFIG", None)
        paths = [self.tmp_path / f"{name}-{p}.jsonl" for p in range(processes)]
        logs = [open(self.tmp_path / f"{name}-{p}.log", "w+") for p in range(processes)]
        for proxy in self.proxies:
            proxy.reset()  # a killed run's last reads are not the next run's
        running = []
        workers = json.dumps(ports)
        for p in range(processes):
            if self.engine == "mwms":  # TensorFlow's multi-worker custom loop, Keras 3
                command = [
                    sys.executable, os.path.join(ROOT, "tests", "mwms_run.py"),
                    "--workers", workers, "--process", str(p),
                    "--directory", self.url, "--storage-options", json.dumps(self.options[p]),
                    "--backup", str(backup), "--record", str(paths[p]),
                    "--epochs", str(extra.get("epochs", EPOCHS)), "--batch", str(BATCH),
                ]  # fmt: skip
                if kill is not None and kill[0] == p:
                    command += ["--kill", str(kill[1])]
                running.append(
                    subprocess.Popen(command, env=env, stdout=logs[p], stderr=subprocess.STDOUT)
                )
                continue
            command = [
                sys.executable, os.path.join(ROOT, "tests", "multiprocess_run.py"),
                "--coordinator", coordinator, "--process", str(p),
                "--processes", str(processes), "--engine", self.engine,
                "--directory", self.url, "--storage-options", json.dumps(self.options[p]),
                "--backup", str(backup), "--record", str(paths[p]),
                "--rows", json.dumps(self.rows), "--epochs", str(extra.get("epochs", EPOCHS)),
                "--batch", str(BATCH), "--save-freq", str(extra.get("save_freq", 2)),
            ]  # fmt: skip
            if kill is not None and kill[0] == p:
                command += ["--kill", str(kill[1])]
            running.append(
                subprocess.Popen(command, env=env, stdout=logs[p], stderr=subprocess.STDOUT)
            )
        died_at, exit_s = None, None
        deadline = time.monotonic() + 600
        try:
            while any(q.poll() is None for q in running):
                now = time.monotonic()
                if died_at is None and any(q.poll() == -9 for q in running):
                    died_at = now
                if died_at is not None and now - died_at > SURVIVOR_EXIT_S:
                    break
                assert now < deadline, "the run took over 600 s"
                time.sleep(0.1)
            if died_at is not None and all(q.poll() is not None for q in running):
                exit_s = time.monotonic() - died_at
        finally:
            codes = []
            for q in running:
                if q.poll() is None:
                    q.kill()
                codes.append(q.wait())
        outputs = []
        for log in logs:
            log.seek(0)
            outputs.append(log.read())
            log.close()
        records = []
        for path in paths:
            lines = [json.loads(x) for x in open(path)] if path.exists() else []
            records.append(lines)
        self.last_outputs = outputs
        return records, codes, exit_s

    def failure(self, codes: list[int]) -> str:
        return "\n".join(
            f"process {p} exited {code}:\n{self.last_outputs[p][-3000:]}"
            for p, code in enumerate(codes)
        )


@pytest.fixture
def cluster(s3_server, tmp_path, images):
    made = []

    def make(engine: str, count: int) -> Cluster:
        url, rows = images(count)
        made.append(Cluster(s3_server, tmp_path, url, rows, engine))
        return made[-1]

    yield make
    for c in made:
        c.close()


def _phases(record: list[dict]) -> list[dict]:
    return [line for line in record if "phase" in line]


def _steps(record: list[dict]) -> list[list[str]]:
    return [line["step"] for line in record if "step" in line]


ENGINES = ["dataframe", "directory", "tf", "grain"]


@pytest.mark.parametrize("engine", ENGINES)
def test_each_process_reads_its_share_once_per_epoch(cluster, tmp_path, engine):
    """`fit` with its defaults, no callback: no warm-up or workaround."""
    # grain keeps a pass's first elements for the next pass from 2 x 14 elements on
    count = 60 if engine == "grain" else 20
    c = cluster(engine, count)
    records, codes, _ = c.run("run", tmp_path / "backup", save_freq="none")
    assert codes == [0, 0], c.failure(codes)
    everything = {f"{c.url}/{row['filename']}" for row in c.rows}
    share = count // PROCESSES
    per_process = []
    for record in records:
        phases = _phases(record)
        assert [p["phase"] for p in phases] == ["build", *range(EPOCHS)]
        # Exactly one GET per image per epoch, counted by this process's proxy: the reads
        # Keras's JAX trainer makes before the first epoch are carried into it.
        assert sum(p["gets"] for p in phases) == EPOCHS * share, phases
        per_process.append(phases)
        steps = _steps(record)
        assert len(steps) == EPOCHS * -(-share // BATCH)
        assert sum(len(step) for step in steps) == EPOCHS * share
    for epoch in range(EPOCHS):
        # What each process read for epoch `epoch` (the build's reads count for epoch 0).
        halves = []
        for phases in per_process:
            read = [u for p in phases if p["phase"] == epoch for u in p["reads"]]
            if epoch == 0:
                read += phases[0]["reads"]
            assert len(read) == len(set(read)) == share, (epoch, sorted(read))
            halves.append(set(read))
        assert not halves[0] & halves[1]
        assert halves[0] | halves[1] == everything
    assert records[0][-1] == records[1][-1]  # one model: the same final weights


def test_a_killed_process_stops_the_other_and_a_restart_continues_each_stream(cluster, tmp_path):
    """SIGKILL of process 1 mid-epoch; process 0 exits by itself; both restarted, exactly."""
    c = cluster("dataframe", 20)  # 10 images per process: steps of 4, 4, 2 per epoch
    epochs, steps_per_epoch = 3, 3
    reference, codes, _ = c.run("reference", tmp_path / "unused", epochs=epochs)
    assert codes == [0, 0], c.failure(codes)
    backup = tmp_path / "backup"  # one folder for both processes
    # Backups after every 2 steps (global steps 1, 3, 5, ...): killed after step 4, it
    # resumes at step 4 (epoch 1, its second batch).
    crashed, codes, exit_s = c.run("crashed", backup, kill=(1, 4), epochs=epochs)
    assert codes[1] == -9
    assert codes[0] not in (0, None) and exit_s is not None, c.failure(codes)
    assert exit_s < 60, f"process 0 took {exit_s:.0f} s to exit"
    assert "another task died" in c.last_outputs[0]  # JAX names the cause
    restart = 4
    resumed, codes, _ = c.run("resumed", backup, epochs=epochs)
    assert codes == [0, 0], c.failure(codes)
    for p in range(PROCESSES):
        before, after, whole = _steps(crashed[p]), _steps(resumed[p]), _steps(reference[p])
        assert len(whole) == epochs * steps_per_epoch
        assert before[:restart] == whole[:restart]
        assert after == whole[restart:]  # the same images, order and augmentation
        # The resumed run reads only what is left: one GET per image still to train.
        assert sum(line["gets"] for line in _phases(resumed[p])) == sum(len(s) for s in after)
    assert resumed[0][-1] == resumed[1][-1] == reference[0][-1]  # the uninterrupted weights
    assert not backup.exists()  # deleted at the end of training (`delete_checkpoint`), once


def test_a_restart_with_fewer_processes_mid_epoch_is_refused_naming_both_counts(cluster, tmp_path):
    """Elastic 2 -> 1: the interrupted epoch's samples belong to two shards: refused."""
    c = cluster("dataframe", 20)
    backup = tmp_path / "backup"
    _, codes, _ = c.run("crashed", backup, kill=(1, 4), epochs=3)
    assert codes[1] == -9
    _, codes, _ = c.run("alone", backup, processes=1, epochs=3)
    assert codes == [1]
    said = c.last_outputs[0]
    assert "by a run of 2 process(es)" in said and "this run has 1" in said, said[-2000:]


def test_multi_worker_mirrored_custom_loop_killed_and_resumed_continues_each_stream(
    cluster, tmp_path
):
    """Keras 3 under MultiWorkerMirroredStrategy: the guide's loop and its resume recipe."""
    pytest.importorskip("tensorflow")
    c = cluster("mwms", 20)  # 10 images per worker: batches 4, 4, 2, each split over 2 steps
    epochs, steps_per_epoch = 3, 6
    reference, codes, _ = c.run("reference", tmp_path / "unused", epochs=epochs)
    assert codes == [0, 0], c.failure(codes)
    everything = {f"{c.url}/{row['filename']}" for row in c.rows}
    for epoch in range(epochs):  # each worker its half, once per epoch, counted at its proxy
        halves = [[line for line in r if line.get("phase") == epoch][0] for r in reference]
        assert [h["gets"] for h in halves] == [10, 10]
        assert not set(halves[0]["reads"]) & set(halves[1]["reads"])
        assert set(halves[0]["reads"]) | set(halves[1]["reads"]) == everything
    backup = tmp_path / "backup"
    # Saved every 2 steps where a worker's batch ends; killed after step 8 (epoch 1): the
    # last checkpoint is after step 7, the restart trains from step 8 on.
    crashed, codes, exit_s = c.run("crashed", backup, kill=(1, 8), epochs=epochs)
    assert codes[1] == -9
    assert codes[0] not in (0, None) and exit_s is not None and exit_s < 60, c.failure(codes)
    resumed, codes, _ = c.run("resumed", backup, epochs=epochs)
    assert codes == [0, 0], c.failure(codes)
    restart = 8
    for p in range(PROCESSES):
        before, after, whole = _steps(crashed[p]), _steps(resumed[p]), _steps(reference[p])
        assert len(whole) == epochs * steps_per_epoch
        assert before[:restart] == whole[:restart]
        assert after == whole[restart:]
        # Nothing trained before the restart is read again: one GET per image left.
        assert sum(line["gets"] for line in _phases(resumed[p])) == sum(len(s) for s in after)
    assert resumed[0][-1] == resumed[1][-1] == reference[0][-1]


def test_a_backup_at_an_epochs_end_resumes_with_fewer_processes_reading_every_image_once(
    cluster, tmp_path
):
    """Elastic 2 -> 1 at an epoch boundary: the next epochs are split among those there are."""
    c = cluster("dataframe", 20)
    backup = tmp_path / "backup"
    crashed, codes, _ = c.run("crashed", backup, kill=(1, 4), epochs=3, save_freq="epoch")
    assert codes[1] == -9
    assert [line["phase"] for line in _phases(crashed[0])] == ["build", 0]  # epoch 0 backed up
    alone, codes, _ = c.run("alone", backup, processes=1, epochs=3, save_freq="epoch")
    assert codes == [0], c.failure(codes)
    everything = {f"{c.url}/{row['filename']}" for row in c.rows}
    phases = _phases(alone[0])
    assert [line["phase"] for line in phases] == ["build", 1, 2]  # epoch 0 is not trained again
    reads = [line["reads"] for line in phases]
    assert sorted(reads[0] + reads[1]) == sorted(everything)  # epoch 1: each image once
    assert sorted(reads[2]) == sorted(everything)
    assert sum(line["gets"] for line in phases) == 2 * len(everything)
    assert sum(len(step) for step in _steps(alone[0])) == 2 * len(everything)
