"""The notebooks execute top to bottom, and the demo runs, as a user would run them."""

from __future__ import annotations

import os
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
