"""lakefs-spec's own test suite, run against the lakeFS stand-in (or a real lakeFS).

The suite comes from lakefs-spec's PyPI sdist, downloaded and extracted to a temporary
folder at test time. Its `tests/smoke_tests` check lakeFS's real sample-data contents and
are left out; every other test must pass. The suite hard-codes `localhost:8000` and the
lakeFS quickstart credentials; in the temporary copy these become environment variables
that point at the target.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from remote_keras.testing.lakefs_server import LakeFSTarget, lakefs_target

pytestmark = [pytest.mark.slow, pytest.mark.network]

LAKEFS_SPEC_VERSION = "0.15.1"
EXPECTED_TESTS = 104  # collected in its tests/ outside tests/smoke_tests
# The suite's hard-coded server and credentials, and the variables that replace them.
HARD_CODED = {
    '"localhost:8000"': "LAKEFS_SUITE_HOST",
    '"AKIAIOSFOLQUICKSTART"': "LAKEFS_SUITE_USERNAME",
    '"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"': "LAKEFS_SUITE_PASSWORD",
}
EXTRA_MODULES = {"pyarrow": "tests/regression/test_gh_321.py", "yaml": "tests/conftest.py"}


def unavailable(reason: str) -> NoReturn:
    """Fails on CI (the `CI` variable is set), skips elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def suite_target() -> Iterator[LakeFSTarget]:
    with lakefs_target() as target:
        yield target


@pytest.fixture(scope="module", autouse=True)
def _report_target(terminal_line, suite_target: LakeFSTarget) -> None:
    terminal_line(f"{__name__}: lakefs-spec's suite runs against {suite_target}")


@pytest.fixture(scope="module")
def lakefs_spec_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lakefs-spec's `tests/` folder, from its sdist, in a temporary folder."""
    for module, needed_by in EXTRA_MODULES.items():
        if importlib.util.find_spec(module) is None:
            unavailable(f"lakefs-spec's suite needs {module!r} ({needed_by}): pip install it")
    dest = tmp_path_factory.mktemp("lakefs-spec-sdist")
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        f"lakefs-spec=={LAKEFS_SPEC_VERSION}", "--dest", str(dest),
    ]  # fmt: skip
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        unavailable("pip download of lakefs-spec's sdist timed out")
    archives = sorted(dest.glob("lakefs_spec-*.tar.gz"))
    if result.returncode != 0 or not archives:
        unavailable(f"pip download of lakefs-spec's sdist failed: {result.stderr[-2000:]}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(dest, filter="data")
    tests = dest / f"lakefs_spec-{LAKEFS_SPEC_VERSION}" / "tests"
    assert (tests / "conftest.py").is_file(), f"no tests/conftest.py in {archives[0].name}"
    return tests


def point_suite_at(tests: Path) -> None:
    """Makes the suite (a temporary copy) read its server and credentials from variables."""
    conftest = (tests / "conftest.py").read_text()
    assert all(literal in conftest for literal in HARD_CODED), (
        "lakefs-spec's conftest no longer hard-codes localhost:8000 and the quickstart "
        "credentials; check how it finds its server now"
    )
    for path in tests.rglob("*.py"):
        text = new = path.read_text()
        for literal, variable in HARD_CODED.items():
            new = new.replace(literal, f"__import__('os').environ[{variable!r}]")
        if new != text:
            path.write_text(new)


def junit_outcomes(report: Path) -> dict[str, str]:
    """Maps `classname::name` to passed / failed / error / skipped, with the message."""
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                message = (child.get("message") or child.text or "").strip().splitlines()
                outcome = f"{child.tag}: {message[0][:300] if message else ''}"
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return outcomes


def test_lakefs_spec_suite_passes(lakefs_spec_tests: Path, suite_target: LakeFSTarget, tmp_path):
    point_suite_at(lakefs_spec_tests)
    home = tmp_path / "home"  # the suite writes ~/.lakectl.yaml and ./out.txt
    home.mkdir()
    options = suite_target.storage_options
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKECTL_", "PYTEST_"))}
    env.update(
        HOME=str(home),
        PYTHONDONTWRITEBYTECODE="1",
        LAKEFS_SUITE_HOST=options["host"],
        LAKEFS_SUITE_USERNAME=options["username"],
        LAKEFS_SUITE_PASSWORD=options["password"],
    )
    report = tmp_path / "junit.xml"
    command = [
        sys.executable, "-m", "pytest", str(lakefs_spec_tests),
        f"--ignore={lakefs_spec_tests / 'smoke_tests'}",
        "-p", "no:cacheprovider", "-o", "addopts=", "-o", "log_cli=false", "-q",
        f"--junitxml={report}",
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=540)
    elapsed = time.monotonic() - started
    output = result.stdout.replace(options["password"], "***")[-4000:]
    where = str(suite_target)
    assert report.is_file(), f"{where}: no junit report; output:\n{output}"

    outcomes = junit_outcomes(report)
    not_passed = {
        name: o.replace(options["password"], "***") for name, o in outcomes.items() if o != "passed"
    }
    assert not not_passed, (
        f"{where}: {len(not_passed)} of {len(outcomes)} lakefs-spec tests did not pass "
        f"in {elapsed:.0f}s:\n"
        + "\n".join(f"  {name}: {outcome}" for name, outcome in sorted(not_passed.items()))
        + f"\n--- output tail ---\n{output}"
    )
    assert len(outcomes) == EXPECTED_TESTS, f"{where}: ran {len(outcomes)} tests"
    assert result.returncode == 0, f"{where}: pytest exited {result.returncode}"
    if suite_target.server is not None:
        assert not suite_target.server.errors, suite_target.server.errors
