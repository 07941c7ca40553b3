"""Shared fixtures: a real S3 server behind a counting proxy, HTTP, and image folders."""

from __future__ import annotations

import os
import signal
import threading
import uuid

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# gcsfs >= 2026.x asks a gRPC control API for each bucket's layout, which an emulator does
# not serve (60 s per bucket before it gives up): the GCS tests use the plain client.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import pytest
import s3fs

from remote_keras.testing import CountingProxy, S3Server, StaticHTTPServer
from remote_keras.testing.data import TEST_CLASSES, smooth_image, write_class_tree
from tests.helpers import put_folder

# Property tests search new examples on every local run; in CI they replay a fixed
# sequence, so a CI result is reproducible (a failure found locally is fixed, then kept
# as an explicit example).
try:
    from hypothesis import settings
except ImportError:  # the oldest-pair run installs the `test` extra only, without hypothesis
    pass
else:
    settings.register_profile("ci", derandomize=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")

# pytest-xdist's workers (`make test` runs two) ignore SIGINT, their controller handles Ctrl-C,
# and the processes they start inherit that: the tests of Ctrl-C need Python's own handler.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

CLASSES = TEST_CLASSES
# The suite's images, from the shared synthetic-data module (the names tests import).
make_image = smooth_image
write_tree = write_class_tree


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory):
    """A local folder of class sub-folders and the dataframe that lists it."""
    root = tmp_path_factory.mktemp("images")
    df = write_tree(root)
    return str(root), df


# s3fs clients that write test data. The read timeout alone did not stop concurrent PUTs that
# rclone left unanswered from hanging CI runs (odd keys; once a folder upload, 600 s): test data
# goes through `tests.helpers.put_objects` and `put_folder` (one at a time, each bounded).
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
    put_folder(fs, local, prefix)
    return f"s3://{prefix}", df


@pytest.fixture(scope="session")
def http_images(image_dir):
    local, df = image_dir
    with StaticHTTPServer(local) as server:
        yield server.url, df


@pytest.fixture
def no_aws_environment(monkeypatch, tmp_path):
    """No AWS settings but those a test sets: no `AWS_*` variables, no `~/.aws` files, no
    instance metadata. Returns the folder the missing credential files would be in."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


@pytest.fixture(scope="module")
def target():
    """The lakeFS server of a module's tests: a real one named by `LAKEFS_*`, else the stand-in."""
    from remote_keras.testing.lakefs_server import lakefs_target

    with lakefs_target() as found:
        print(f"lakeFS tests run against {found}")
        yield found


@pytest.fixture(scope="module")
def client(target):
    """A lakeFS SDK client of `target`."""
    from lakefs.client import Client

    return Client(**target.storage_options)


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

    # Threads end once their work is cancelled, however slowly a loaded machine runs them:
    # the limit only keeps a leak from hanging the run (60 s, not a speed test). Most end within
    # a poll or two; an iterator left in a reference cycle (Keras's index generator makes one)
    # needs a collection, which costs a third of a second with TensorFlow loaded: so the first
    # comes after two polls, and then one every twenty.
    for poll in range(1200):
        if not _our_threads():
            return
        if poll % 20 == 2:
            gc.collect()
        threading.Event().wait(0.05)
    assert not _our_threads(), f"threads left behind: {_our_threads()}"


# One per process, for its life: the watcher of Ctrl-C (`remote_keras.pipeline.interrupts`).
PROCESS_THREADS = ("remote_keras-interrupts",)


def _our_threads() -> list[str]:
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith("remote_keras-") and t.name not in PROCESS_THREADS
    ]
