"""Shared fixtures: a real S3 server behind a counting proxy, HTTP, and image folders."""

from __future__ import annotations

import os
import threading
import uuid

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np
import pandas as pd
import pytest
import s3fs
from PIL import Image

from remote_keras.testing import CountingProxy, S3Server, StaticHTTPServer

CLASSES = ("cat", "dog", "bird")


def make_image(rng: np.random.Generator, height: int, width: int, mode: str = "RGB") -> Image.Image:
    """A small image with smooth structure plus noise, so resizing matters."""
    yy, xx = np.mgrid[0:height, 0:width]
    base = (np.sin(xx / 3.0 + rng.random() * 6) + np.cos(yy / 4.0)) * 60 + 128
    channels = [base + rng.normal(0, 20, base.shape) for _ in range(3)]
    array = np.clip(np.stack(channels, -1), 0, 255).astype("uint8")
    return Image.fromarray(array).convert(mode)


def write_tree(root, per_class: int = 7, seed: int = 0) -> pd.DataFrame:
    """Writes `root/<class>/<i>.(png|jpg)` (plus a nested folder) and returns a dataframe."""
    rng = np.random.default_rng(seed)
    rows = []
    for label in CLASSES:
        for i in range(per_class):
            sub = "nested/" if i % 5 == 4 else ""
            name = f"{label}/{sub}{label}_{i}.{'jpg' if i % 2 else 'png'}"
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            make_image(rng, 20 + i, 24 + 2 * i).save(path)
            rows.append({"filename": name, "class": label, "weight": float(i + 1), "value": i})
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory):
    """A local folder of class sub-folders and the dataframe that lists it."""
    root = tmp_path_factory.mktemp("images")
    df = write_tree(root)
    return str(root), df


# s3fs clients that write test data: a write that rclone does not answer (seen once in CI,
# with several concurrent PUTs of odd keys) times out and is retried instead of hanging.
SETUP_CLIENT = dict(
    skip_instance_cache=True,
    config_kwargs={"read_timeout": 20, "retries": {"total_max_attempts": 4, "mode": "standard"}},
)


@pytest.fixture(scope="session")
def s3_server():
    with S3Server(buckets=("data",)) as server:
        yield server


@pytest.fixture(scope="session")
def s3_proxy(s3_server):
    """A counting proxy in front of the S3 server; its counts are reset per test."""
    with CountingProxy(s3_server.port) as proxy:
        yield proxy


@pytest.fixture
def s3_options(s3_server, s3_proxy):
    """Storage options reaching the S3 server through the counting proxy."""
    s3_proxy.reset()
    options = s3_server.storage_options
    options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=s3_proxy.endpoint_url)
    return options


@pytest.fixture
def s3fs_direct(s3_server):
    """An s3fs client talking to the server directly (for test setup, not counted)."""
    fs = s3fs.S3FileSystem(**s3_server.storage_options, **SETUP_CLIENT)
    return fs


@pytest.fixture(scope="session")
def s3_images(s3_server, image_dir):
    """The local image folder uploaded to `s3://data/<unique>/`; returns (url, df)."""
    local, df = image_dir
    fs = s3fs.S3FileSystem(**s3_server.storage_options, **SETUP_CLIENT)
    prefix = f"data/{uuid.uuid4().hex[:8]}"
    fs.put(local + "/", prefix + "/", recursive=True)
    return f"s3://{prefix}", df


@pytest.fixture(scope="session")
def http_images(image_dir):
    local, df = image_dir
    with StaticHTTPServer(local) as server:
        yield server.url, df


@pytest.fixture(scope="session")
def terminal_line(pytestconfig):
    """Writes a line to the terminal even while output is captured (which server a test uses)."""

    def write(line: str) -> None:
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(line)

    return write


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Every test must leave no remote_keras threads running once its iterators close."""
    yield
    import gc

    deadline = 50
    while deadline and _our_threads():
        gc.collect()  # Keras's iterators hold a reference cycle (their index generator)
        threading.Event().wait(0.1)
        deadline -= 1
    assert not _our_threads(), f"threads left behind: {_our_threads()}"


def _our_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("remote_keras-")]
