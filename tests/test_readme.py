"""Every code block of README.md and of each guide page runs as written, each page alone in a
fresh Python, against local servers, so the docs cannot drift and no page depends on another.

A page's ```python blocks run top to bottom in one namespace (a later block uses what an earlier
one defined, e.g. the page's first `model`), in a fresh process (`python -m tests.doc_pages`),
with a fresh temporary folder as the working directory. Nothing in a block is rewritten before it
runs; tracebacks point at the file's own lines. Blocks fenced ```bash, ```diff or plain ``` (the
layout tree) are not Python and are not run; a fence of any other language fails
`test_every_fence_is_known`, so no example can slip past unrun. `tests/doc_pages.py` says how
interactive blocks are checked and lists the blocks that run in their own process or not at all.

What the blocks read: the sandbox (`remote_keras.testing.Sandbox`, which
`python -m remote_keras.testing.sandbox` serves for a user trying the examples), configured only
through the environment, as a user's code would be:

- S3: a real `rclone serve s3` with the buckets the docs name: `my-bucket` (`train/`, `images/`,
  `labels.csv`) and `bucket` (`train/`), through `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
  `AWS_ENDPOINT_URL` (AWS config files and the instance-metadata service are turned off, so
  nothing else is consulted).
- lakeFS: the stand-in with a repository `images` whose `main` holds `train/` and `labels.csv`
  (paths relative to `train/`), committed, through `LAKECTL_SERVER_ENDPOINT_URL`,
  `LAKECTL_CREDENTIALS_ACCESS_KEY_ID` and `LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY`.
- The custom loader's store: the folder `my-store/` (holding `images/`) of the working directory.

All hold the same tiny class-folder tree (3 classes of 4 images of about 20x24 pixels), so a
page's 10-epoch fits take about a second each.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from remote_keras.testing import Sandbox
from tests.doc_pages import (
    IN_OWN_PROCESS,
    NOT_PYTHON,
    NOT_RUN,
    ROOT,
    doc_blocks,
    documents,
    python_blocks,
    repr_shape,
)

pytestmark = pytest.mark.slow

BLOCKS = [block for path in documents() for block in doc_blocks(path)]
PYTHON_BLOCKS = [b for b in BLOCKS if b.lang == "python"]
PAGES = [path for path in documents() if python_blocks(path)]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    with Sandbox(tmp_path_factory.mktemp("sandbox")) as sandbox:
        yield sandbox


def test_every_fence_is_known():
    unknown = [(b.id, b.line - 1, b.lang) for b in BLOCKS if b.lang not in NOT_PYTHON | {"python"}]
    assert not unknown, (
        f"README fences of unknown language (run them or add to NOT_PYTHON): {unknown}"
    )
    assert len(PYTHON_BLOCKS) >= 10


def test_lists_name_existing_blocks():
    for name, table in (("NOT_RUN", NOT_RUN), ("IN_OWN_PROCESS", IN_OWN_PROCESS)):
        for start in table:
            matches = [b.id for b in PYTHON_BLOCKS if b.has_line(start)]
            assert len(matches) == 1, f"{name} entry {start!r} matches {matches}, not one block"
    assert not set(NOT_RUN) & set(IN_OWN_PROCESS)


def test_repr_shape():
    assert repr_shape("Shard(index=1, count=2, remainder='pad', source='x')") == (
        "Shard",
        ["index", "count", "remainder", "source"],
    )
    assert repr_shape("[1, 2]") is None


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_runs_alone(sandbox, tmp_path, page):
    """The page's blocks, in order, in a fresh Python and working folder: all run, none fails."""
    shutil.copytree(sandbox.workdir, tmp_path, dirs_exist_ok=True)
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AWS_", "LAKECTL_"))
    }
    environment.update(sandbox.environment, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "tests.doc_pages", str(page)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{page.relative_to(ROOT)} failed alone:\n{done.stderr[-6000:]}"
    ran = json.loads(done.stdout.strip().splitlines()[-1])
    expected = [b.id for b in python_blocks(page) if b.not_run_reason is None]
    assert ran == expected


def test_sandbox_command_prints_settings_that_reach_its_servers(tmp_path):
    """`python -m remote_keras.testing.sandbox` prints `export` lines and a `cd`; with them, the
    README's bucket and lakeFS repository list their sample files; Ctrl-C stops it."""
    process = subprocess.Popen(
        [sys.executable, "-m", "remote_keras.testing.sandbox", "--root", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (lines and lines[-1].startswith("Serving")):
            line = process.stdout.readline()
            assert line, f"the sandbox exited: {process.stderr.read()[-3000:]}"
            lines.append(line.strip())
        exports = dict(
            line.removeprefix("export ").split("=", 1)
            for line in lines
            if line.startswith("export ")
        )
        (cd,) = [line.removeprefix("cd ") for line in lines if line.startswith("cd ")]
        check = (
            "import s3fs; from lakefs_spec import LakeFSFileSystem; "
            "print(len(s3fs.S3FileSystem().find('my-bucket/train')), "
            "len(LakeFSFileSystem().find('images/main/train')))"
        )
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LAKECTL_"))}
        listed = subprocess.run(
            [sys.executable, "-c", check],
            env={**clean, **exports},
            cwd=cd,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert listed.stdout.split() == ["12", "12"]
        assert sorted(os.listdir(os.path.join(cd, "my-store", "images"))) == ["bird", "cat", "dog"]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()
