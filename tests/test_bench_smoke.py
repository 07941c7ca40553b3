"""The benchmark runs end to end in its smoke size, and the performance notebook plots it."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--smoke", "--out", str(out),
         "--data", str(out / "data")],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "| stock Keras, local disk |" in result.stdout
    assert "| CPU ms/img | CPU vs local |" in result.stdout  # client CPU against local disk
    return out / "latest.json"


@pytest.mark.slow
def test_smoke_benchmark_reports_every_scenario(smoke_report):
    report = json.loads(smoke_report.read_text())
    results, images = report["results"], report["meta"]["images"]
    for name in ("stock Keras, local disk", "tf.data image_dataset_from_directory, local",
                 "remote_keras, local disk", "remote_keras default, s3 +20 ms",
                 "fit: remote_keras default, s3 +20 ms", "idfd: Keras's function, local disk",
                 "idfd: remote_keras, local disk", "idfd: remote_keras, s3 +20 ms",
                 "idfd grain: Keras's function, local disk",
                 "idfd grain: remote_keras, s3 +20 ms"):  # fmt: skip
        # Measured (each repeat a rate), and summarized as the median of the repeats.
        rates = results[name]["images_per_s_all"]
        assert rates and all(math.isfinite(rate) and rate > 0 for rate in rates), name
        assert results[name]["images_per_s"] == statistics.median(rates), name
    for name, result in results.items():
        if result.get("group") == "s3":  # steady state: exactly one GET and no HEAD per image
            assert result["requests_per_image"] == {"GET": 1.0}, (name, result)
            assert result["startup_requests"].get("HEAD", 0) == 0, (name, result)
        if result.get("group") in ("s3", "local") and name.startswith("remote_keras"):
            stats = result["loader_stats"]  # `iterator.stats` of the last repeat: one epoch
            assert stats["images"] == stats["requests"] == images, (name, stats)
            assert stats["bytes"] > 0 and stats["decode_s"] > 0, (name, stats)
    fit = results["fit: remote_keras default, s3 +20 ms"]
    assert 0 <= fit["input_wait_fraction"] <= 1
    assert fit["loader_stats"]["images"] > 0
    assert (smoke_report.parent / "latest.png").stat().st_size > 10_000
    assert report["targets"]


@pytest.mark.slow
def test_performance_notebook_plots_the_report(smoke_report):
    path = ROOT / "notebooks" / "03-performance.ipynb"
    notebook = nbformat.read(path, as_version=4)
    os.environ["REMOTE_KERAS_BENCH_JSON"] = str(smoke_report)
    try:
        NotebookClient(
            notebook,
            timeout=300,
            kernel_name="python3",
            resources={"metadata": {"path": path.parent}},
        ).execute()
    finally:
        del os.environ["REMOTE_KERAS_BENCH_JSON"]
    assert not [
        o for c in notebook.cells for o in c.get("outputs", []) if o.get("output_type") == "error"
    ]


def _small_integrity_run(tmp_path: Path, script: str) -> dict:
    """The report of `bench/<script>` on 40 images, 1 epoch, 20% of bodies flipped."""
    out = tmp_path / "integrity.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--images", "40", "--epochs", "1",
         "--repeats", "1", "--rate", "0.2", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_integrity_benchmark_catches_every_flip_when_checking(tmp_path):
    report = _small_integrity_run(tmp_path, "integrity.py")
    for loader in ("fsspec", "obstore"):
        off = report["caught"][f"{loader}, verify_checksums=False"]
        on = report["caught"][f"{loader}, verify_checksums=True"]
        assert off["bodies_flipped"] >= 1 and off["images_differing_or_lost"] >= 1, off
        assert on["images_differing_or_lost"] == 0, on
        assert on["checksum_mismatches"] == on["bodies_flipped"] >= 1, on
    assert set(report["cpu"]) == {"fsspec (ETag MD5)", "obstore (ETag MD5)"}
    assert report["hash"]["md5"]["us_per_image"] > 0


@pytest.mark.slow
def test_lakefs_integrity_benchmark_catches_every_flip_in_both_modes(tmp_path):
    report = _small_integrity_run(tmp_path, "integrity_lakefs.py")
    for mode in ("through the server", "presigned"):
        off = report["caught"][f"{mode}, verify_checksums=False"]
        on = report["caught"][f"{mode}, verify_checksums=True"]
        assert off["bodies_flipped"] >= 1 and off["batches_wrong"] >= 1, off
        assert on["batches_wrong"] == 0, on
        assert on["checksum_mismatches"] == on["bodies_flipped"] >= 1, on
        assert report["cpu"][mode]["cpu_ms_per_image_on"] > 0


@pytest.mark.slow
def test_the_lakefs_integrity_benchmark_tries_another_port_when_its_port_is_taken(
    tmp_path, monkeypatch
):
    import socket

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import integrity_lakefs
    finally:
        sys.path.remove(str(ROOT / "bench"))
    monkeypatch.setenv("SECRET", "test-secret")
    taken = socket.create_server(("127.0.0.1", 0))  # another socket holds the chosen port
    port = taken.getsockname()[1]
    ports = iter([port])
    from remote_keras.testing import base

    real_free_port = base.free_port
    monkeypatch.setattr(base, "free_port", lambda: next(ports, None) or real_free_port())
    with taken:
        proxy, process, options = integrity_lakefs.serve_behind_proxy(tmp_path, "key")
    try:
        assert proxy.upstream_port != port
        assert options["host"].startswith("http://127.0.0.1:")
    finally:
        process.terminate()
        process.wait(10)
        proxy.close()
