"""Fault injection by the proxy, observed by real clients: raw HTTP, s3fs, obstore, lakefs-spec.

Each client is configured to fail fast where it can (no retries, short timeouts), so
each fault shows up as the client's own exception; `max_faults_per_key` shows that
retries then get through.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import urlsplit

import aiohttp
import botocore.exceptions
import lakefs
import lakefs.exceptions
import obstore
import pytest
import s3fs
import urllib3.exceptions
from lakefs.client import Client
from lakefs_spec import LakeFSFileSystem
from obstore.store import S3Store

from remote_keras.testing.lakefs_server import LakeFSServer
from remote_keras.testing.proxy import (
    FAULT_KINDS,
    FAULTS_PATH,
    CountingProxy,
    FaultPlan,
    ProxyProcess,
    flip_middle,
    is_object_request,
)
from tests.helpers import put_objects

DATA = bytes(range(256)) * 400  # 100 KiB
STATUS_CODES = {"503": "SlowDown", "500": "InternalError", "429": "TooManyRequests"}
STALL_S = 5.0  # how long a stall holds a request; every client times out well before
TIMEOUT_S = 1.0  # client timeouts: short, yet long enough for a loaded machine
RAW_TIMEOUT_S = 10.0  # raw GETs that expect no stall: a fault, not a busy machine, must end them


def chain(error: BaseException) -> list[BaseException]:
    """An exception and its causes / contexts, outermost first."""
    found = []
    while error is not None and len(found) < 10:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


def plan(kind: str, **kwargs) -> FaultPlan:
    """Every eligible request gets `kind`."""
    return FaultPlan(rate=1.0, kinds=(kind,), stall_s=STALL_S, **kwargs)


@pytest.fixture(scope="module")
def prefix(s3_server) -> str:
    """`data/<unique>` holding `a.bin` and `b.bin` (DATA each), written directly."""
    fs = s3fs.S3FileSystem(**s3_server.storage_options, skip_instance_cache=True)
    name = f"data/faults-{uuid.uuid4().hex[:8]}"
    put_objects(fs, {f"{name}/a.bin": DATA, f"{name}/b.bin": DATA})
    return name


@pytest.fixture
def proxy(s3_server) -> Iterator[CountingProxy]:
    with CountingProxy(s3_server.port) as proxy:
        yield proxy


def s3fs_client(s3_server, proxy, retries: int = 1, **config) -> s3fs.S3FileSystem:
    """s3fs through the proxy, with no botocore retries and `retries` s3fs attempts."""
    options = s3_server.storage_options
    options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=proxy.endpoint_url)
    config = {"retries": {"total_max_attempts": 1}, "read_timeout": TIMEOUT_S, **config}
    fs = s3fs.S3FileSystem(**options, config_kwargs=config, skip_instance_cache=True)
    fs.retries = retries  # s3fs's own retry loop (class attribute, 5 by default)
    return fs


def obstore_client(s3_server, proxy, max_retries: int = 0) -> S3Store:
    backoff = {"init_backoff": timedelta(milliseconds=1), "max_backoff": timedelta(milliseconds=5)}
    return S3Store(
        "data",
        endpoint=proxy.endpoint_url,
        region="us-east-1",
        access_key_id=s3_server.access_key,
        secret_access_key=s3_server.secret_key,
        client_options={"allow_http": True, "timeout": timedelta(seconds=TIMEOUT_S)},
        retry_config={"max_retries": max_retries, "backoff": backoff},
    )


def presigned_target(s3_server, proxy, path: str) -> str:
    """A SigV4-presigned request target (path and query) for `path`, via the proxy."""
    fs = s3fs_client(s3_server, proxy, signature_version="s3v4")
    return urlsplit(fs.url(path, expires=600)).geturl().split(proxy.endpoint_url, 1)[1]


def raw_get(port: int, target: str, timeout: float = RAW_TIMEOUT_S):
    """GET with http.client; returns (status, headers, body) or raises what it met."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def outcome(port: int, target: str) -> str:
    """What a raw GET met, in a word."""
    try:
        status, _, body = raw_get(port, target)
    except ConnectionResetError:
        return "reset"
    except http.client.IncompleteRead:
        return "truncated"
    except TimeoutError:
        return "timeout"
    return str(status) if status != 200 or body == DATA else "corrupt"


# --------------------------------------------------------------------------- the plan


def test_fault_plan_validates_and_round_trips():
    full = FaultPlan(0.5, seed=3, kinds=["503", "stall"], methods=["get", "head"], stall_s=1.0)
    assert full.kinds == ("503", "stall") and full.methods == ("GET", "HEAD")
    assert FaultPlan.from_json(full.to_json()) == full
    assert FaultPlan.from_json("null") is None
    flips = FaultPlan(1.0, kinds=["flip"], targets=["a.bin"], flip_bytes=5)
    assert flips.targets == ("a.bin",) and FaultPlan.from_json(flips.to_json()) == flips
    for bad in ({"rate": 1.5}, {"rate": 0.5, "kinds": ("404",)}, {"rate": 0.5, "kinds": ()},
                {"rate": 0.5, "kinds": ("flip",), "flip_bytes": 0}):  # fmt: skip
        with pytest.raises(ValueError):
            FaultPlan(**bad)


def test_object_requests_are_told_from_listings_and_api_calls():
    assert is_object_request("GET", "/data/a/b.bin")
    assert is_object_request("PUT", "/data/key?partNumber=1&uploadId=x")
    assert not is_object_request("GET", "/data?list-type=2&prefix=a/")
    assert not is_object_request("GET", "/data/")
    assert not is_object_request("PUT", "/data")
    lakefs_object = "/api/v1/repositories/r/refs/main/objects?path=a/b.bin"
    assert is_object_request("GET", lakefs_object)
    assert is_object_request("POST", "/api/v1/repositories/r/branches/main/objects?path=x")
    assert not is_object_request("GET", "/api/v1/repositories/r/refs/main/objects/stat?path=x")
    assert not is_object_request("GET", "/api/v1/repositories/r/refs/main/objects/ls")
    assert not is_object_request("GET", "/api/v1/repositories/r/branches/main")


# --------------------------------------------------------------------------- raw HTTP


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(STATUS_CODES))
def test_status_faults_are_well_formed_responses(s3_server, proxy, prefix, kind):
    target = presigned_target(s3_server, proxy, f"{prefix}/a.bin")
    proxy.set_faults(plan(kind, retry_after_s=2))
    status, headers, body = raw_get(proxy.port, target)
    assert status == int(kind)
    assert headers["Connection"] == "close" and int(headers["Content-Length"]) == len(body)
    assert f"<Code>{STATUS_CODES[kind]}</Code>".encode() in body
    assert ("Retry-After" in headers) == (kind != "500")
    assert proxy.reset() == Counter({"GET": 1, f"fault:{kind}": 1})
    proxy.set_faults(None)
    assert raw_get(proxy.port, target)[2] == DATA


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("reset-before", ConnectionResetError),
        ("reset-mid-body", ConnectionResetError),
        ("truncate", http.client.IncompleteRead),
        ("stall", TimeoutError),
    ],
)
@pytest.mark.slow
def test_connection_faults_break_the_response(s3_server, proxy, prefix, kind, error):
    target = presigned_target(s3_server, proxy, f"{prefix}/a.bin")
    proxy.set_faults(plan(kind))
    timeout = TIMEOUT_S if kind == "stall" else RAW_TIMEOUT_S
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=timeout)
    connection.request("GET", target)
    with pytest.raises(error):
        if kind in ("reset-mid-body", "truncate"):  # the head arrives intact, the body does not
            response = connection.getresponse()
            assert response.status == 200 and response.length == len(DATA)
            response.read()
        else:
            connection.getresponse()
    connection.close()
    assert proxy.faults_injected == Counter({kind: 1})


def test_same_seed_gives_the_same_faults(s3_server, proxy, prefix):
    target = presigned_target(s3_server, proxy, f"{prefix}/a.bin")
    faults = FaultPlan(0.3, seed=1, kinds=("503", "500", "429", "reset-before", "truncate"))
    runs = []
    for seed in (1, 1, 2):
        proxy.set_faults(dataclasses.replace(faults, seed=seed))
        runs.append([outcome(proxy.port, target) for _ in range(30)])
    assert runs[0] == runs[1] != runs[2]
    assert "200" in runs[0] and len(set(runs[0])) > 2 and "corrupt" not in runs[0]
    assert sum(proxy.faults_injected.values()) == sum(o != "200" for run in runs for o in run)


@pytest.mark.slow
def test_max_faults_per_key_lets_the_next_request_through(s3_server, proxy, prefix):
    a = presigned_target(s3_server, proxy, f"{prefix}/a.bin")
    b = presigned_target(s3_server, proxy, f"{prefix}/b.bin")
    proxy.set_faults(plan("503", max_faults_per_key=2))
    outcomes = [outcome(proxy.port, t) for t in (a, b, a, a, b, b, a)]
    assert outcomes == ["503", "503", "503", "200", "503", "200", "200"]
    assert proxy.reset() == Counter({"GET": 7, "fault:503": 4})


def test_methods_limit_which_requests_are_faulted(s3_server, proxy, prefix):
    fs = s3fs_client(s3_server, proxy)
    target = presigned_target(s3_server, proxy, f"{prefix}/a.bin")
    proxy.set_faults(plan("500", methods=("HEAD",)))
    with pytest.raises(OSError):  # s3fs's info() is a HEAD: it gets the fault...
        fs.info(f"{prefix}/a.bin")
    assert outcome(proxy.port, target) == "200"  # ...and a GET does not
    proxy.set_faults(plan("500"))
    assert fs.info(f"{prefix}/b.bin")["size"] == len(DATA)  # now a HEAD passes...
    with pytest.raises(OSError):
        fs.cat_file(f"{prefix}/b.bin")  # ...and a GET does not
    assert proxy.faults_injected == Counter({"500": 2})


# --------------------------------------------------------------------------- flipped bytes


def differing(a: bytes, b: bytes) -> list[int]:
    assert len(a) == len(b)
    return [i for i, (x, y) in enumerate(zip(a, b)) if x != y]


def test_flip_middle_changes_count_bytes_in_the_middle_and_never_makes_a_marker():
    body = bytes([0xFE, 0xFF, 0x00, 0x10]) * 25
    for count in (1, 3, 8):
        flipped = flip_middle(body, count)
        changed = differing(body, flipped)
        assert len(changed) == count and changed == list(range(changed[0], changed[0] + count))
        assert abs(changed[0] + count / 2 - len(body) / 2) <= 1
        assert all(flipped[i] != 0xFF for i in changed)
    assert len(differing(b"ab", flip_middle(b"ab", 3))) == 2 and flip_middle(b"", 3) == b""


def test_flip_keeps_status_length_and_headers_but_not_the_bytes(s3_server, proxy, prefix):
    target = presigned_target(s3_server, proxy, f"{prefix}/a.bin")
    proxy.set_faults(plan("flip"))
    status, headers, body = raw_get(proxy.port, target)
    headers = {k.lower(): v for k, v in headers.items()}
    assert status == 200 and int(headers["content-length"]) == len(body) == len(DATA)
    changed = differing(DATA, body)
    assert len(changed) == 3 and len(DATA) // 2 - 3 <= changed[0] <= len(DATA) // 2
    assert headers["etag"] == f'"{hashlib.md5(DATA).hexdigest()}"'  # of the undamaged bytes
    assert headers["connection"] == "close"
    assert proxy.reset() == Counter({"GET": 1, "fault:flip": 1})
    proxy.set_faults(None)
    assert raw_get(proxy.port, target)[2] == DATA


@pytest.mark.slow
def test_flip_rate_and_seed_choose_which_bodies(s3_server, proxy, prefix):
    target = presigned_target(s3_server, proxy, f"{prefix}/a.bin")
    runs = []
    for seed in (1, 1, 2):
        proxy.set_faults(FaultPlan(0.3, seed=seed, kinds=("flip",)))
        runs.append([outcome(proxy.port, target) for _ in range(30)])
    assert runs[0] == runs[1] != runs[2]
    assert set(runs[0]) == {"200", "corrupt"}
    assert proxy.faults_injected["flip"] == sum(o == "corrupt" for run in runs for o in run)


def test_targets_limit_faults_to_matching_requests(s3_server, proxy, prefix):
    a = presigned_target(s3_server, proxy, f"{prefix}/a.bin")
    b = presigned_target(s3_server, proxy, f"{prefix}/b.bin")
    proxy.set_faults(plan("flip", targets=("/a.bin",)))
    outcomes = [outcome(proxy.port, t) for t in (a, b, a, b, a)]
    assert outcomes == ["corrupt", "200", "corrupt", "200", "corrupt"]  # every read of a.bin
    assert proxy.faults_injected == Counter({"flip": 3})


@pytest.mark.parametrize("name", ["fsspec", "obstore"])
def test_flipped_bodies_reach_both_loaders_unnoticed_without_checks(s3_server, proxy, prefix, name):
    import remote_keras as rk

    options = s3_server.storage_options
    options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=proxy.endpoint_url)
    loader = {"fsspec": rk.FsspecLoader, "obstore": rk.ObstoreLoader}[name](options)
    proxy.set_faults(plan("flip"))
    data = loader(f"s3://{prefix}/a.bin")  # a plain read: nothing checks the bytes
    assert len(differing(DATA, data)) == 3
    assert proxy.faults_injected == Counter({"flip": 1})
    loader.close()


# --------------------------------------------------------------------------- s3fs


@pytest.mark.slow
def test_s3fs_sees_each_fault(s3_server, proxy, prefix):
    fs = s3fs_client(s3_server, proxy)
    for kind in FAULT_KINDS:
        proxy.set_faults(plan(kind))
        with pytest.raises(Exception) as caught:
            fs.cat_file(f"{prefix}/a.bin")
        errors = chain(caught.value)
        if kind in STATUS_CODES:
            assert isinstance(errors[0], OSError), (kind, errors)
            (boto,) = [e for e in errors if isinstance(e, botocore.exceptions.ClientError)]
            assert boto.response["Error"]["Code"] == STATUS_CODES[kind]
            assert boto.response["ResponseMetadata"]["HTTPStatusCode"] == int(kind)
        elif kind == "reset-before":  # aiohttp retries once by itself; botocore wraps it
            assert isinstance(errors[0], botocore.exceptions.EndpointConnectionError)
            assert any(isinstance(e, ConnectionResetError) for e in errors), errors
        elif kind in ("reset-mid-body", "truncate"):  # the body is read outside botocore
            assert isinstance(errors[0], aiohttp.ClientPayloadError), (kind, errors)
        else:  # timed out while the proxy still held the request: before the stall ended
            assert isinstance(errors[0], botocore.exceptions.ReadTimeoutError), errors
        assert set(proxy.faults_injected) == {kind}, proxy.faults_injected
        proxy.reset()


def test_s3fs_retries_get_through_with_max_faults_per_key(s3_server, proxy, prefix):
    fs = s3fs_client(s3_server, proxy, retries=3)
    proxy.set_faults(plan("truncate", max_faults_per_key=2))
    assert fs.cat_file(f"{prefix}/a.bin") == DATA
    counts = proxy.reset()
    assert counts["GET"] == 3 and counts["fault:truncate"] == 2, counts


@pytest.mark.slow
def test_listings_are_not_faulted_with_only_objects(s3_server, proxy, prefix):
    fs = s3fs_client(s3_server, proxy)
    proxy.set_faults(plan("503", methods=("GET", "HEAD")))
    assert sorted(fs.ls(prefix, detail=False)) == [f"{prefix}/a.bin", f"{prefix}/b.bin"]
    assert proxy.counts["LIST"] >= 1 and not proxy.faults_injected
    fs.invalidate_cache()
    proxy.set_faults(plan("503", methods=("GET", "HEAD"), only_objects=False))
    with pytest.raises(OSError):
        fs.ls(prefix)
    assert proxy.faults_injected["503"] >= 1


# --------------------------------------------------------------------------- obstore


@pytest.mark.slow
def test_obstore_sees_each_fault(s3_server, proxy, prefix):
    store = obstore_client(s3_server, proxy)
    key = prefix.split("/", 1)[1] + "/a.bin"
    for kind in FAULT_KINDS:
        proxy.set_faults(plan(kind))
        with pytest.raises(obstore.exceptions.GenericError) as caught:
            bytes(obstore.get(store, key).bytes())
        message = str(caught.value)
        if kind in STATUS_CODES:
            assert f"status code: {kind}" in message, message
        elif kind in ("reset-mid-body", "truncate"):
            assert "response body error" in message, message
        else:  # reset-before, stall: no response head at all
            assert "error sending request" in message, message
        assert proxy.faults_injected == Counter({kind: 1})
        proxy.reset()


def test_obstore_retries_get_through_with_max_faults_per_key(s3_server, proxy, prefix):
    store = obstore_client(s3_server, proxy, max_retries=10)
    key = prefix.split("/", 1)[1] + "/a.bin"
    kinds = ("503", "500", "429", "reset-before", "reset-mid-body", "truncate")
    proxy.set_faults(FaultPlan(1.0, seed=5, kinds=kinds, max_faults_per_key=4))
    assert bytes(obstore.get(store, key).bytes()) == DATA
    counts = proxy.reset()
    assert counts["GET"] == 5, counts
    assert sum(n for k, n in counts.items() if k.startswith("fault:")) == 4, counts


# --------------------------------------------------------------------------- lakeFS


@pytest.fixture(scope="module")
def lakefs_repo() -> Iterator[tuple[LakeFSServer, str]]:
    """The lakeFS stand-in with a repository whose `main` holds `obj.bin` (DATA)."""
    with LakeFSServer() as server:
        name = f"rk-faults-{uuid.uuid4().hex[:6]}"
        client = Client(**server.storage_options)
        lakefs.Repository(name, client=client).create(storage_namespace=f"local://{name}")
        LakeFSFileSystem(**server.storage_options).pipe(f"lakefs://{name}/main/obj.bin", DATA)
        yield server, name


@pytest.fixture
def lakefs_proxy(lakefs_repo) -> Iterator[CountingProxy]:
    with CountingProxy(lakefs_repo[0].port) as proxy:
        yield proxy


def lakefs_client(server: LakeFSServer, proxy: CountingProxy) -> LakeFSFileSystem:
    """lakefs-spec through the proxy, with urllib3's default retries and a short timeout."""
    options = dict(server.storage_options, host=proxy.endpoint_url)
    return LakeFSFileSystem(**options, request_config={"request_timeout": TIMEOUT_S})


@pytest.mark.slow
def test_lakefs_spec_sees_each_fault(lakefs_repo, lakefs_proxy):
    server, repo = lakefs_repo
    fs = lakefs_client(server, lakefs_proxy)
    for kind in FAULT_KINDS:
        lakefs_proxy.set_faults(plan(kind))
        with pytest.raises(Exception) as caught:
            fs.cat_file(f"lakefs://{repo}/main/obj.bin")
        errors = chain(caught.value)
        faults = lakefs_proxy.faults_injected[kind]
        if kind in STATUS_CODES:  # not retried: no Retry-After
            assert isinstance(errors[0], OSError) and faults == 1, (kind, errors)
            (server_error,) = [
                e for e in errors if isinstance(e, lakefs.exceptions.ServerException)
            ]
            assert server_error.status_code == int(kind)
            assert STATUS_CODES[kind] in server_error.body["message"]
        else:  # urllib3 retries 3 times, then raises (untranslated by lakefs-spec)
            assert isinstance(errors[0], urllib3.exceptions.MaxRetryError), (kind, errors)
            assert faults == 4, (kind, faults)
        assert set(lakefs_proxy.faults_injected) == {kind}
        lakefs_proxy.reset()


def test_lakefs_api_calls_are_not_faulted_with_only_objects(lakefs_repo, lakefs_proxy):
    server, repo = lakefs_repo
    fs = lakefs_client(server, lakefs_proxy)
    methods = ("GET", "HEAD", "POST", "PUT", "DELETE")
    lakefs_proxy.set_faults(FaultPlan(1.0, kinds=("500", "reset-before"), methods=methods))
    assert fs.info(f"lakefs://{repo}/main/obj.bin")["size"] == len(DATA)
    assert fs.ls(f"lakefs://{repo}/main/", detail=False) == [f"{repo}/main/obj.bin"]
    assert not lakefs_proxy.faults_injected
    with pytest.raises(Exception):  # noqa: B017 - any failure will do: the read is faulted
        fs.cat_file(f"lakefs://{repo}/main/obj.bin")
    assert lakefs_proxy.faults_injected


def test_lakefs_spec_reads_through_max_faults_per_key(lakefs_repo, lakefs_proxy):
    server, repo = lakefs_repo
    fs = lakefs_client(server, lakefs_proxy)
    lakefs_proxy.set_faults(plan("reset-mid-body", max_faults_per_key=2))
    assert fs.cat_file(f"lakefs://{repo}/main/obj.bin") == DATA  # urllib3's retries suffice
    assert lakefs_proxy.faults_injected == Counter({"reset-mid-body": 2})


# --------------------------------------------------------------------------- ProxyProcess


def test_proxy_process_with_faults(s3_server, prefix):
    with ProxyProcess(s3_server.port, faults=plan("500")) as process:
        target = presigned_target(s3_server, process, f"{prefix}/a.bin")
        assert outcome(process.port, target) == "500"
        assert process.counts() == Counter({"GET": 1, "fault:500": 1})
        process.set_faults(plan("reset-before"))
        assert outcome(process.port, target) == "reset"
        with urllib.request.urlopen(process.endpoint_url + FAULTS_PATH) as response:
            assert FaultPlan(**json.load(response)) == plan("reset-before")
        process.set_faults(None)
        assert outcome(process.port, target) == "200"
        assert process.faults_injected() == Counter({"500": 1, "reset-before": 1})
        assert process.reset() == Counter({"GET": 3, "fault:500": 1, "fault:reset-before": 1})
        bad = urllib.request.Request(process.endpoint_url + FAULTS_PATH, b'{"rate": 2}')
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(bad)
        assert caught.value.code == 400


@pytest.mark.slow
def test_a_burst_of_connections_while_the_proxy_is_starved_waits_for_no_resent_syn(s3_server):
    # A loader's 128 request threads reconnect at once after an outage, maybe while the proxy's
    # loop waits for the GIL. The kernel must queue them all: a SYN it drops is resent 1 s later,
    # then 3, 7, 15 s (a 10 s outage once took 26 s to recover from on CI).
    with CountingProxy(s3_server.port) as proxy:

        async def starve() -> None:
            time.sleep(2)  # the loop runs nothing, as when another thread holds the GIL

        asyncio.run_coroutine_threadsafe(starve(), proxy._loop)
        waits: list[float] = []

        def connect() -> None:
            started = time.monotonic()
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=30):
                waits.append(time.monotonic() - started)

        threads = [threading.Thread(target=connect) for _ in range(200)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(waits) == 200 and max(waits) < 0.9, f"slowest connect {max(waits):.1f} s"
