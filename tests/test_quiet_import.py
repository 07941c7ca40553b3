"""Importing the package prints nothing: TensorFlow's start-up log stays out of the console."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote_keras import _quiet

ROOT = Path(__file__).resolve().parents[1]

# TensorFlow's start-up lines as TensorFlow 2.21 writes them on a machine without a GPU, and
# as older versions write theirs.
NOISE = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1796221285.132187    9810 cudart_stub.cc:31] Could not find cuda drivers on"
    b" your machine, GPU will not be used.\n"
    b"2026-01-01 12:00:00.123456: I tensorflow/core/util/port.cc:153] oneDNN custom operations"
    b" are on. You may see slightly different numerical results.\n"
    b"W0000 00:00:1796221285.132187    9810 cuda_executor.cc:1228] TF-TRT Warning: no TensorRT\n"
)
KEPT = (
    b"E0000 00:00:1796221285.132187    9810 cuda_dnn.cc:8310] a real error\n"
    b"UserWarning: something a user should read\n"
)


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    unset = ("TF_CPP_MIN_LOG_LEVEL", "PYTHONWARNINGS")
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    clean["PYTHONPATH"] = os.pathsep.join([str(ROOT), clean.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


@pytest.mark.slow
def test_importing_the_package_and_its_generator_prints_nothing(tmp_path):
    level = tmp_path / "level.txt"
    code = (
        "import os, sys\nimport remote_keras\n"
        "assert 'tensorflow' not in sys.modules\n"
        "from remote_keras import ImageDataGenerator\n"
        "ImageDataGenerator()\n"
        "assert 'tensorflow' in sys.modules\n"
        f"open({str(level)!r}, 'w').write(os.environ['TF_CPP_MIN_LOG_LEVEL'])\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == ("", "")
    assert level.read_text() == _quiet.LEVEL  # set before TensorFlow loaded, left set


@pytest.mark.parametrize("level", ["0", ""])
def test_a_level_the_user_chose_is_kept(level):
    code = (
        "import os\nimport remote_keras\nfrom remote_keras import _quiet\n"
        "print(repr(os.environ['TF_CPP_MIN_LOG_LEVEL']), _quiet.USER_CHOSE)\n"
    )
    result = _run(code, TF_CPP_MIN_LOG_LEVEL=level)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{level!r} True\n"


def test_start_up_log_lines_are_filtered_and_everything_else_kept(capfd):
    with _quiet.filtered_stderr():
        os.write(2, NOISE[:60])  # a line written in pieces is still one line
        os.write(2, NOISE[60:] + KEPT)
    assert capfd.readouterr().err == KEPT.decode()


@pytest.mark.parametrize(
    "user_chose, loaded, installed, filtered",
    [
        (False, False, True, True),
        (True, False, True, False),
        (False, True, True, False),
        (False, False, False, False),  # no TensorFlow (an extra): nothing of it to filter
    ],
)
def test_only_the_first_load_is_filtered_and_only_when_the_user_chose_no_level(
    monkeypatch, capfd, user_chose, loaded, installed, filtered
):
    monkeypatch.setattr(_quiet, "USER_CHOSE", user_chose)
    monkeypatch.setattr(_quiet, "tensorflow_installed", lambda: installed)
    if not loaded:
        monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "tensorflow", sys.modules.get("tensorflow", sys))
    with _quiet.tensorflow_start():
        os.write(2, NOISE)
    assert capfd.readouterr().err == ("" if filtered else NOISE.decode())


def test_kept_lines_come_through_while_the_import_runs(capfd):
    """Forwarded as they come, not at the end: a crash during the import still shows them."""
    import time

    seen = ""
    with _quiet.filtered_stderr():
        os.write(2, NOISE + KEPT)
        deadline = time.monotonic() + 60  # a guard against hanging, not a speed test
        while seen != KEPT.decode() and time.monotonic() < deadline:
            time.sleep(0.01)
            seen += capfd.readouterr().err
        assert seen == KEPT.decode()
    assert capfd.readouterr().err == ""
