"""The one table from clients' errors to what they mean (`remote_keras.client_errors`)."""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path

import aiohttp
import botocore.exceptions
import pytest

import remote_keras as rk
from remote_keras import client_errors, errors
from remote_keras.client_errors import TABLE, Kind, kind_of
from remote_keras.storage import retry

# Where each client of the table exports its errors.
EXPORTS = {
    "builtins": ["builtins"],
    "botocore": ["botocore.exceptions"],
    "aiohttp": ["aiohttp", "aiohttp.http_exceptions"],
    "urllib3": ["urllib3.exceptions"],
    "requests": ["requests.exceptions"],
    "http": ["http.client"],
    "obstore": ["obstore.exceptions"],
    "lakefs": ["lakefs.exceptions"],
    "ssl": ["ssl"],
}


@pytest.mark.parametrize("row", TABLE, ids=lambda row: row.kind.name)
def test_every_type_in_the_table_is_one_the_installed_clients_export(row):
    for name in row.types:
        package, cls = name.split(".")
        found = [getattr(importlib.import_module(m), cls, None) for m in EXPORTS[package]]
        assert any(isinstance(c, type) and issubclass(c, BaseException) for c in found), name


def test_a_subclass_of_a_clients_error_means_what_its_base_means():
    class Wrapped(botocore.exceptions.EndpointConnectionError):
        pass

    exc = Wrapped(endpoint_url="http://127.0.0.1:1")
    assert kind_of(exc) is Kind.UNREACHABLE and retry.is_transient(exc)
    translated = errors.translate("s3://b/k", exc)
    assert type(translated) is ConnectionError and "s3://b/k" in str(translated)


def test_an_error_of_the_same_name_from_elsewhere_is_not_taken_for_a_clients():
    class ReadTimeout(Exception):  # requests has one; this is not it
        pass

    exc = ReadTimeout("not a timeout")
    assert kind_of(exc) is None and not retry.is_transient(exc)
    assert type(errors.translate("s3://b/k", exc)) is rk.ImageLoadError


@pytest.mark.parametrize(
    ("status", "family", "transient"),
    [
        (404, FileNotFoundError, False),
        (403, PermissionError, False),
        (503, rk.ImageLoadError, True),
        (429, rk.ImageLoadError, True),
        (400, rk.ImageLoadError, False),
    ],
)
def test_without_a_known_type_the_http_status_decides(status, family, transient):
    class Answered(Exception):  # a client's error type the table does not know, with a status
        def __init__(self, status: int) -> None:
            super().__init__(f"HTTP {status}")
            self.status = status

    exc = Answered(status)
    assert type(errors.translate("http://h/x.png", exc)) is family
    assert retry.is_transient(exc) is transient


def test_s3s_throttling_codes_are_retried():
    response = {"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 200}}
    exc = botocore.exceptions.ClientError(response, "GetObject")
    assert kind_of(exc) is Kind.SERVER_BUSY and retry.is_transient(exc)


def test_the_first_matching_row_wins():
    class MissingOverTheWire(ConnectionError):
        status = 404

    assert kind_of(MissingOverTheWire()) is Kind.NOT_FOUND
    assert kind_of(ConnectionRefusedError()) is Kind.UNREACHABLE
    assert kind_of(aiohttp.ServerTimeoutError()) is Kind.TIMED_OUT  # also an OSError


@pytest.mark.parametrize("kind", list(Kind))
def test_each_kind_says_whether_to_retry(kind):
    assert kind.transient is (kind in {Kind.TIMED_OUT, Kind.DROPPED, Kind.UNREACHABLE,
                                       Kind.SERVER_BUSY})  # fmt: skip
    assert pickle.loads(pickle.dumps(kind)) is kind


def test_no_other_module_names_a_clients_error_types():
    names = {name.split(".")[1] for row in TABLE for name in row.types}
    names -= {"FileNotFoundError", "PermissionError", "TimeoutError", "ConnectionError"}
    package = Path(client_errors.__file__).parent
    naming = {
        str(path.relative_to(package)): sorted(n for n in names if f'"{n}"' in path.read_text())
        for path in package.rglob("*.py")
        if "testing" not in path.parts and path.name != "client_errors.py"
    }
    assert {path: found for path, found in naming.items() if found} == {}
