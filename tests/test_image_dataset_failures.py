"""`image_dataset_from_directory` when reads fail: errors that come promptly, Ctrl-C, skips.

A store that stays down fails the batch of the first file that gives up, within about
one retry deadline whatever the dataset's size; Ctrl-C ends iteration while requests
stall; each dataset of `subset="both"` keeps its own record of skipped files; and a
file TensorFlow cannot decode is reported with TensorFlow's own reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings

import numpy as np
import pytest
import s3fs
from PIL import Image

import remote_keras as rk
from remote_keras.storage.retry import RetryPolicy
from remote_keras.testing.proxy import CountingProxy, FaultPlan
from tests.conftest import SETUP_CLIENT
from tests.helpers import noise_png, put_objects

FILES = 240
DEADLINE_S = 2.0


@pytest.fixture(scope="module")
def many_on_s3(s3_server) -> str:
    """240 small PNGs in two classes, on S3."""
    fs = s3fs.S3FileSystem(**s3_server.storage_options, **SETUP_CLIENT)
    prefix = f"data/down-{uuid.uuid4().hex[:6]}"
    names = [f"{'ab'[i % 2]}/{i:04d}.png" for i in range(FILES)]
    put_objects(fs, {f"{prefix}/{name}": noise_png(i % 40) for i, name in enumerate(names)})
    return f"s3://{prefix}"


@pytest.fixture
def own_proxy(s3_server):
    """A proxy of its own in front of the S3 server (its outages reach no other test)."""
    with CountingProxy(s3_server.port) as proxy:
        options = s3_server.storage_options
        options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=proxy.endpoint_url)
        yield proxy, options


@pytest.mark.slow
def test_a_store_that_stays_down_fails_within_one_deadline_whatever_the_size(many_on_s3, own_proxy):
    # 30 batches of 8 refused: before, every chunk had to give up first (about 15 s here).
    proxy, options = own_proxy
    dataset = rk.image_dataset_from_directory(
        many_on_s3,
        storage_options=options,
        image_size=(8, 8),
        batch_size=8,
        retries=RetryPolicy(deadline_s=DEADLINE_S),
        verbose=False,
    )
    proxy.outage(600)
    start = time.monotonic()
    with pytest.raises(Exception, match=f"Gave up reading '{many_on_s3}/") as raised:
        for _ in dataset:
            pass
    elapsed = time.monotonic() - start
    assert elapsed < DEADLINE_S + 6, f"{elapsed:.1f} s"
    assert "ImageLoadError" in str(raised.value)


CTRL_C_CHILD = r"""
import json, sys
import remote_keras as rk
spec = json.loads(sys.argv[1])
dataset = rk.image_dataset_from_directory(
    spec["url"], storage_options=spec["options"], image_size=(8, 8), batch_size=8, verbose=False
)
print("ITERATING", flush=True)
for batch in dataset:
    pass
print("ENDED WITHOUT AN INTERRUPT", flush=True)
"""


@pytest.mark.slow
def test_ctrl_c_stops_iteration_while_every_request_stalls(many_on_s3, own_proxy):
    # The default policy: a stalled GET is given up after 60 s, retried until 180 s. Before,
    # the process was still alive minutes after SIGINT.
    proxy, options = own_proxy
    spec = json.dumps({"url": many_on_s3, "options": options})
    child = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_CHILD, spec],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.getcwd(), TF_CPP_MIN_LOG_LEVEL="3"),
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("ITERATING")
        proxy.set_faults(FaultPlan(rate=1.0, kinds=("stall",), stall_s=600))
        time.sleep(3)  # the first batches' requests now stall
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
        elapsed = time.monotonic() - sent
    finally:
        child.kill()
    assert child.returncode != 0 and "ENDED" not in out
    assert "KeyboardInterrupt" in err, err[-2000:]
    assert elapsed < 15, f"{elapsed:.1f} s"


def _folder_with_bad_files(root: str) -> list[str]:
    """12 PNGs in two classes, two of them not images: one in each subset of a 0.5 split."""
    paths = []
    for i in range(12):
        os.makedirs(os.path.join(root, "ab"[i % 2]), exist_ok=True)
        path = os.path.join(root, "ab"[i % 2], f"{i:02d}.png")
        with open(path, "wb") as f:
            f.write(noise_png(i))
        paths.append(path)
    return paths


@pytest.mark.slow
def test_each_subset_lists_its_own_skipped_files_once(tmp_path):
    _folder_with_bad_files(str(tmp_path))
    train, validation = rk.image_dataset_from_directory(
        tmp_path, image_size=(6, 6), batch_size=4, validation_split=0.5, subset="both",
        seed=3, on_error="skip", verbose=False,
    )  # fmt: skip
    bad_train, bad_validation = train.file_paths[1], validation.file_paths[2]
    for path in (bad_train, bad_validation):
        with open(path, "wb") as f:
            f.write(b"\x89PNG not an image")
    for _ in range(2):  # two epochs of each
        with pytest.warns(UserWarning, match="on_error='skip'") as caught:
            list(train.as_numpy_iterator())
            list(validation.as_numpy_iterator())
        warned = " ".join(str(w.message) for w in caught)
        assert bad_train in warned and bad_validation in warned  # each dataset warns
    assert [path for path, _ in train.skipped] == [bad_train]
    assert [path for path, _ in validation.skipped] == [bad_validation]


@pytest.mark.slow
def test_a_decode_failure_keeps_tensorflows_reason(tmp_path):
    # Keras's own function fails the same files with TensorFlow's "JPEG does not support 4
    # channels"; the package said they were not images it could decode.
    for i in range(4):
        os.makedirs(tmp_path / "ab"[i % 2], exist_ok=True)
        image = Image.fromarray(np.full((8, 8, 3), 40 * i, "uint8"))
        image.save(tmp_path / "ab"[i % 2] / f"{i}.jpg")
    kwargs = dict(image_size=(4, 4), color_mode="rgba", verbose=False)
    with pytest.raises(Exception, match="JPEG does not support 4 channels"):
        list(rk.image_dataset_from_directory(tmp_path, **kwargs))
    skipping = rk.image_dataset_from_directory(tmp_path, on_error="skip", **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        list(skipping)
    assert len(skipping.skipped) == 4
    assert all("JPEG does not support 4 channels" in reason for _, reason in skipping.skipped)
