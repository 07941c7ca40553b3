"""The notebooks execute top to bottom, and the demo runs, as a user would run them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": path.parent}}
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors
    # tqdm's notebook bar needs ipywidgets; without it the package's bars are text, not a
    # "TqdmWarning: IProgress not found" in the user's notebook.
    said = [
        output.get("text", "")
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.get("name") == "stderr"
    ]
    assert not [text for text in said if "IProgress not found" in text]


@pytest.mark.slow
def test_demo_runs_and_reports_both_rates():
    result = subprocess.run(
        [sys.executable, "-m", "remote_keras.demo", "--images", "96", "--size", "64"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ), check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "stock Keras, local disk" in result.stdout
    assert "remote_keras default        , s3://" in result.stdout
    assert "x stock; obstore for s3://)" in result.stdout  # what the default chose
    assert 'remote_keras loader="fsspec", s3://' in result.stdout
    assert "requests per image: 1.00 GET, 0.00 HEAD" in result.stdout
    assert "model.fit, 1 epoch from s3://" in result.stdout
    # Beside the ratios, what they depend on, measured in the same run (psutil: a dev dependency).
    said = result.stdout
    assert re.search(r"What the ratios depend on \(this run, a first epoch each\): \d+ cores; "
                     r"1-min load average [\d.]+ before the demo, [\d.]+ after", said)  # fmt: skip
    assert re.search(r"CPU per image: stock Keras [\d.]+ ms; default [\d.]+ ms \+ S3 server "
                     r"[\d.]+ \+ proxy [\d.]+ = [\d.]+ ms; loader=\"fsspec\" ", said)  # fmt: skip
    assert re.search(r"cores used while reading: stock Keras [\d.]+, default [\d.]+", said)
    assert re.search(r"So the default ratio is .* = [\d.]+x\.", said)
    assert re.search(r"The S3 server and proxy share the client's \d+ cores: .* at most", said)


def _reading(rate: float, client_ms: float, server_ms: float, proxy_ms: float):
    from remote_keras.demo import Reading

    return Reading(rate, client_ms, server_ms, proxy_ms)


def test_the_demo_explains_its_ratio_by_cores_and_cpu_per_image():
    """ratio = (cores used / stock's) x (stock's CPU / CPU per image), from what the run measured
    (the numbers of a loaded 2-core run: stock 520 images/s at 1.9 ms, one core)."""
    from remote_keras.demo import explain

    stock = _reading(520.0, 1.9, 0.0, 0.0)
    default = _reading(360.0, 2.0, 0.5, 0.3)  # 2.8 ms in all, 1.008 cores
    fsspec = _reading(300.0, 3.4, 0.5, 0.3)
    lines = explain(stock, {"default": default, 'loader="fsspec"': fsspec}, 2, 4.5, 4.8)
    assert lines[0] == (
        "What the ratios depend on (this run, a first epoch each): 2 cores; 1-min load average "
        "4.50 before the demo, 4.80 after these epochs (which count in it)."
    )
    assert lines[1] == (
        "  CPU per image: stock Keras 1.90 ms; default 2.00 ms + S3 server 0.50 + proxy 0.30 = "
        '2.80 ms; loader="fsspec" 3.40 ms + S3 server 0.50 + proxy 0.30 = 4.20 ms'
    )
    assert (
        lines[2]
        == '  cores used while reading: stock Keras 0.99, default 1.01, loader="fsspec" 1.26'
    )
    ratio = 360 / 520
    assert lines[3].endswith(f"= 1.01 / 0.99 x 1.90 / 2.80 = {ratio:.2f}x.")
    assert "at most 2 / 0.99 x 0.68 = 1.37x here; the load average of 4.5" in lines[4]
    assert "left it 1.01" in lines[4] and "client's 2.00 ms per image would count" in lines[4]


def test_the_demo_says_what_it_could_not_measure():
    from remote_keras.demo import explain

    stock = _reading(520.0, 1.9, None, None)
    lines = explain(stock, {"default": _reading(360.0, 2.0, None, None)}, 2, None, None)
    assert "1-min load average not reported by this system" in lines[0]
    assert lines[1].endswith("(S3 server and proxy not measured: install psutil)")
    assert len(lines) == 3  # no bound without the servers' CPU
