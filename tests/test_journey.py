"""The user's journey (`bench/journey.py`) at smoke size: lakeFS with presigned reads, then S3.

A repository of 1,500 images in 60 class folders with a labels CSV on a presigning stand-in
with a separate data server: construction cold and warm (listing cache), the labels CSV at
the images' commit, an epoch of `fit`, a SIGKILL mid-epoch, the resume and its record; then
an S3 tree from the listing cache. The full size is `make bench-scale ARGS=--full`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
IMAGES, FOLDERS, S3_OBJECTS = 1500, 60, 3000


@pytest.mark.slow
@pytest.mark.timeout(1500)  # eight fresh processes (Keras, TensorFlow): minutes on a busy machine
def test_the_journey_builds_trains_crashes_resumes_and_records(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "journey.py"), "--lakefs", str(IMAGES),
         "--folders", str(FOLDERS), "--s3", str(S3_OBJECTS), "--out", str(tmp_path),
         "--data", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=1400, check=False,
    )  # fmt: skip
    report = json.loads((tmp_path / "journey-latest.json").read_text())
    checks = report["checks"]
    assert result.returncode == 0, (checks, result.stdout[-3000:] + result.stderr[-3000:])
    rows = {(r["where"], r["stage"]): r for r in report["rows"]}

    # Construction from a commit: the listing in about a request per page (not one per
    # folder), plus one presigned listing per folder; from the listing cache, only those.
    cold, warm = rows["lakefs", "construct cold"], rows["lakefs", "construct warm"]
    assert cold["samples"] == warm["samples"] == IMAGES
    assert cold["presign_listings"] == warm["presign_listings"] == FOLDERS
    listing_calls = cold["api"]["GET /api/v1/repositories/{repository}/refs/{ref}/objects/ls"]
    assert listing_calls - FOLDERS <= IMAGES / 1000 + 32 + 2 < FOLDERS
    assert warm["api"]["GET /api/v1/repositories/{repository}/refs/{ref}/objects/ls"] == FOLDERS
    assert rows["lakefs", "labels CSV"]["samples"] == IMAGES
    assert checks["labels CSV read at the images' commit"]

    # An epoch reads every image once, from the data server; the killed run stopped
    # mid-epoch; the resumed one trains exactly the reference's remaining steps.
    assert rows["lakefs", "fit epoch"]["reads"] == IMAGES
    assert rows["lakefs", "fit killed"]["exit"] == -9
    resumed = rows["lakefs", "fit resumed"]
    steps = -(-IMAGES // 64)
    assert 0 < resumed["restart_step"] < steps
    assert resumed["steps_run"] == steps - resumed["restart_step"]
    assert checks["resumed run continues the stream"]
    assert checks["killed run read the reference's steps"]
    # Every image of the remaining steps, each once. Up to a batch more is sometimes read (seen
    # at 2k and 20k images: 64 and 32 distinct images it does not train on; an open issue).
    left = IMAGES - 64 * resumed["restart_step"]
    assert left <= resumed["reads"] <= left + 64
    assert resumed["fetched"] == resumed["fetched_distinct"]

    # The record names the commit, in lakectl local's format.
    record = rows["lakefs", "record"]
    assert any(name.endswith(".lakefs_ref.yaml") for name in record["files"])
    assert "src: lakefs://journey/" in record["lakefs_ref_yaml"]
    assert checks["record pins the commit"]

    # S3: from the listing cache, no listing request.
    assert rows["s3", "construct cold"]["samples"] == S3_OBJECTS
    assert rows["s3", "construct cold"]["lists"] >= S3_OBJECTS / 1000
    assert rows["s3", "construct warm"]["lists"] == 0
    assert all(checks.values()), checks
