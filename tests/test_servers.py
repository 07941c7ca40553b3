"""The local servers' shared base: start / stop / with, a fixed port across restarts, reprs.

Also that the servers import neither TensorFlow nor Keras, and that the lakeFS stand-in runs
as a small process of its own (`python -m remote_keras.testing.lakefs`) whose data outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

import lakefs
import pytest
import s3fs
from lakefs_spec import LakeFSFileSystem

from remote_keras.testing import CountingProxy, LakeFSServer, S3Server, StaticHTTPServer
from remote_keras.testing.base import LocalServer, log_tail, spawn, terminate
from remote_keras.testing.proxy import ProxyProcess

NO_TENSORFLOW = (
    "import sys; {imports}; "
    "loaded = sorted(m for m in ('tensorflow', 'keras') if m in sys.modules); "
    "assert not loaded, loaded"
)


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def test_servers_import_without_tensorflow_or_keras():
    modules = ("lakefs", "lakefs_server", "s3", "static_http", "proxy", "data", "base")
    imports = "; ".join(f"import remote_keras.testing.{m}" for m in modules)
    result = run_python(NO_TENSORFLOW.format(imports=imports + "; import remote_keras.testing"))
    assert result.returncode == 0, result.stderr[-3000:]


def test_top_level_names_load_on_first_use():
    code = NO_TENSORFLOW.format(imports="import remote_keras as rk") + (
        "; assert set(rk.__all__) <= set(dir(rk)); "
        "from remote_keras import RetryPolicy; assert rk.RetryPolicy is RetryPolicy; "
        "import remote_keras.storage.retry as retry; assert RetryPolicy is retry.RetryPolicy\n"
        "try:\n    rk.NoSuchName\nexcept AttributeError as e:\n    assert 'NoSuchName' in str(e)\n"
        "else:\n    raise AssertionError('no AttributeError')"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_server_shares_the_base(tmp_path):
    for cls in (S3Server, StaticHTTPServer, LakeFSServer, CountingProxy, ProxyProcess):
        assert issubclass(cls, LocalServer), cls
    lakefs_server = LakeFSServer(secret_access_key="not-in-the-repr")
    s3 = S3Server(tmp_path)
    assert "not-in-the-repr" not in repr(lakefs_server)
    assert s3.secret_key not in repr(s3) and "S3Server(endpoint_url=" in repr(s3)
    assert repr(StaticHTTPServer(tmp_path)).startswith("StaticHTTPServer(endpoint_url=")
    lakefs_server.close()


def test_close_removes_a_temporary_folder_and_stop_keeps_it():
    server = LakeFSServer().start()
    server.stop()
    assert server.root.is_dir()  # stop() keeps the data for start()
    server.close()
    assert not server.root.exists()
    with LakeFSServer() as server:
        root = server.root
    assert not root.exists()


def test_static_http_restarts_on_the_same_port(tmp_path):
    (tmp_path / "f.txt").write_bytes(b"hello")
    with StaticHTTPServer(tmp_path) as server:
        port = server.port
        assert get(server.url + "/f.txt") == b"hello"
        server.stop()
        assert refused(port) and not server.running
        server.start()
        assert server.port == port and server.running
        assert get(server.url + "/f.txt") == b"hello"
    assert refused(port)


def test_s3_server_restarts_with_its_buckets(tmp_path):
    with S3Server(tmp_path, buckets=("b",)) as s3:
        fs = s3fs.S3FileSystem(**s3.storage_options, skip_instance_cache=True)
        fs.pipe("b/k.txt", b"kept")
        port = s3.port
        s3.restart()
        assert s3.port == port
        fs = s3fs.S3FileSystem(**s3.storage_options, skip_instance_cache=True)
        assert fs.cat_file("b/k.txt") == b"kept"
    assert (tmp_path / "b" / "k.txt").read_bytes() == b"kept"  # a given root is kept


def start_stand_in(root, port: int = 0, secret: str = "s3cr3t-for-this-test"):
    """`python -m remote_keras.testing.lakefs` on `root`; returns the process and its options."""
    env = dict(os.environ, REMOTE_KERAS_LAKEFS_SECRET_ACCESS_KEY=secret)
    command = [sys.executable, "-m", "remote_keras.testing.lakefs", "--root", str(root)]
    process = subprocess.Popen(
        command + ["--port", str(port)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    return process, json.loads(process.stdout.readline())


def stop_stand_in(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    if process.stdout is not None:
        process.stdout.close()


def test_stand_in_process_is_small_and_its_data_outlives_it(tmp_path):
    psutil = pytest.importorskip("psutil")

    process, options = start_stand_in(tmp_path)
    try:
        rss_mib = psutil.Process(process.pid).memory_info().rss / 2**20
        assert rss_mib < 200, f"the stand-in's process takes {rss_mib:.0f} MiB"  # TF: 600+
        assert get(options["host"] + "/api/v1/healthcheck") == b""
        fs = LakeFSFileSystem(**options, skip_instance_cache=True)
        lakefs.Repository("proc", client=fs.client).create(storage_namespace="local://proc")
        fs.pipe("proc/main/p.txt", b"from one process")
    finally:
        stop_stand_in(process)
    port = int(options["host"].rsplit(":", 1)[1])
    assert refused(port)

    process, again = start_stand_in(tmp_path, port)
    try:
        assert again == options  # same port, same credentials
        fs = LakeFSFileSystem(**again, skip_instance_cache=True)
        assert fs.cat_file("proc/main/p.txt") == b"from one process"
    finally:
        stop_stand_in(process)


def test_a_server_process_logs_to_a_file_not_an_unread_pipe():
    # 200 KiB of log lines, three pipes' worth: a process logging into a pipe nobody reads
    # would block at the first 64 KiB and never exit.
    code = "import sys\nfor _ in range(2000): sys.stderr.write('x' * 99 + '\\n')\nsys.exit(3)"
    process = spawn([sys.executable, "-c", code])
    try:
        assert process.wait(timeout=60) == 3
        assert log_tail(process, limit=200) == ("x" * 99 + "\n") * 2
    finally:
        terminate(process)
