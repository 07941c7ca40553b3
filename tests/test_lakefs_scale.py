"""The lakeFS stand-in at scale: a commit of many objects built and listed through the API.

Objects are uploaded with the `lakefs` SDK from 8 threads to a stand-in in its own process
(`python -m remote_keras.testing.lakefs`), committed, then listed 1,000 per page. Uploads
append to the staging area and a page is a bisection into the commit's sorted paths, so
both stay linear in the number of objects. The default size takes seconds;
`REMOTE_KERAS_LAKEFS_SCALE=100000` runs the same test at 100k objects (minutes) and the
timings are printed either way.
"""

from __future__ import annotations

import base64
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode

import lakefs
import pytest
from lakefs.client import Client

from remote_keras.testing.data import write_linked_jpegs

OBJECTS = int(os.environ.get("REMOTE_KERAS_LAKEFS_SCALE", "2500"))

pytestmark = pytest.mark.slow


@pytest.fixture
def stand_in(tmp_path):
    """Storage options of a stand-in serving from its own process."""
    command = [sys.executable, "-m", "remote_keras.testing.lakefs", "--root", str(tmp_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    try:
        yield json.loads(process.stdout.readline())
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        process.stdout.close()


def raw_listing(options: dict, ref: str, **query) -> dict:
    """A listing over plain HTTP (the SDK refuses `amount` over 1000 itself)."""
    url = f"{options['host']}/api/v1/repositories/scale/refs/{ref}/objects/ls?{urlencode(query)}"
    token = base64.b64encode(f"{options['username']}:{options['password']}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def list_all(client: Client, ref: str, amount: int | None, **kwargs) -> tuple[list[str], int]:
    """Every path at `ref`, following `after`; returns them and the number of pages."""
    api = client.sdk_client.objects_api
    paths: list[str] = []
    pages, after = 0, ""
    while True:
        extra = {"amount": amount} if amount is not None else {}
        listing = api.list_objects("scale", ref, after=after, **extra, **kwargs)
        pages += 1
        paths += [r.path for r in listing.results]
        if not listing.pagination.has_more:
            return paths, pages
        after = listing.pagination.next_offset


def test_a_large_commit_builds_and_lists_in_linear_time(stand_in, tmp_path_factory, terminal_line):
    files = tmp_path_factory.mktemp("linked")
    df = write_linked_jpegs(files, OBJECTS, classes=("a", "b", "c"))
    names = [f"img/{name}" for name in df["filename"]]
    sources = [Path(files, name) for name in df["filename"]]
    client = Client(**stand_in)
    lakefs.Repository("scale", client=client).create(storage_namespace="local://scale")
    main = lakefs.Branch("scale", "main", client=client)

    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda pair: main.object(pair[0]).upload(pair[1].read_bytes(), pre_sign=False),
                zip(names, sources),
            )
        )
    upload_s = time.perf_counter() - started
    started = time.perf_counter()
    commit = main.commit(f"{OBJECTS} images").get_commit().id
    commit_s = time.perf_counter() - started

    started = time.perf_counter()
    listed, pages = list_all(client, commit, 1000)
    list_s = time.perf_counter() - started
    assert listed == sorted(names)
    assert pages == math.ceil(OBJECTS / 1000)
    terminal_line(
        f"{__name__}: {OBJECTS} objects: uploaded in {upload_s:.1f} s "
        f"({OBJECTS / upload_s:.0f}/s), committed in {commit_s:.2f} s, "
        f"listed 1000 per page in {list_s:.2f} s ({pages} pages)"
    )

    # Page sizes as lakeFS: 100 by default, at most 1000; `after` and `prefix` seek.
    api = client.sdk_client.objects_api
    assert len(api.list_objects("scale", commit).results) == min(100, OBJECTS)
    assert len(raw_listing(stand_in, commit, amount=5000)["results"]) == min(1000, OBJECTS)
    in_b = sorted(n for n in names if n.startswith("img/b/"))
    half = len(in_b) // 2
    after = api.list_objects("scale", commit, after=in_b[half], amount=3, prefix="img/b/")
    assert [r.path for r in after.results] == in_b[half + 1 : half + 4]
    prefixes = api.list_objects("scale", "main", delimiter="/", prefix="img/")
    assert [r.path for r in prefixes.results] == ["img/a/", "img/b/", "img/c/"]
