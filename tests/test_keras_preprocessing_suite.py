"""keras-preprocessing 1.1.2's image tests, run against stock Keras 3 and against remote_keras.

The sdist is fetched from the package index at test time (`pip download`) and
never stored here. remote_keras must pass every case stock Keras 3 passes.
Cases that fail for stock Keras 3 too (known: Keras 3 has no `Iterator.next()`,
no `list_pictures`, `load_img` lost `grayscale=`; Pillow >= 11 cannot save the
mode-"I" PNG fixture) are listed in the assertion message and the README.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

VERSION = "1.1.2"
HERE = Path(__file__).parent

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    download = tmp_path_factory.mktemp("sdist")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--dest", str(download), f"keras-preprocessing=={VERSION}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    archives = list(download.glob("*.tar.gz"))
    if result.returncode or not archives:
        message = f"cannot download keras-preprocessing=={VERSION}: {result.stderr[-500:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message + " (offline; CI requires it)")
    root = tmp_path_factory.mktemp("kp")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(root, filter="data")
    tests = next(root.glob("*/tests/image"))
    shutil.copy(HERE / "keras_preprocessing" / "shim_conftest.py", tests / "conftest.py")
    return tests


def run_suite(tests: Path, target: str, report: Path) -> dict[str, str]:
    env = dict(os.environ, KP_TARGET=target, PYTHONPATH="")
    subprocess.run(
        [sys.executable, "-m", "pytest", str(tests), "-q", "-p", "no:cacheprovider",
         "-o", "addopts=", "--rootdir", str(tests), f"--junitxml={report}", "-W", "ignore"],
        cwd=tests, env=env, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        outcomes[name] = "failed" if failed else "skipped" if skipped else "passed"
    return outcomes


@pytest.mark.slow
def test_remote_keras_passes_everything_stock_keras_passes(suite, tmp_path):
    stock = run_suite(suite, "keras", tmp_path / "stock.xml")
    ours = run_suite(suite, "remote_keras", tmp_path / "ours.xml")
    assert len(stock) >= 40, "the suite did not run"
    regressions = sorted(n for n, o in stock.items() if o == "passed" and ours.get(n) != "passed")
    failing_for_both = sorted(n for n, o in stock.items() if o != "passed")
    summary = (
        f"stock passed {sum(o == 'passed' for o in stock.values())}/{len(stock)}, "
        f"remote_keras passed {sum(o == 'passed' for o in ours.values())}/{len(ours)}; "
        f"failing for stock Keras 3 too: {failing_for_both}"
    )
    print(summary)
    assert not regressions, f"remote_keras fails where stock passes: {regressions}\n{summary}"
