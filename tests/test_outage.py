"""Outages of the store: the default retry policy rides them out, batch for batch.

The proxy's outage (`CountingProxy.outage`) closes its port and resets its
connections for a while, as a restarting server does; reads then meet refused
connections and resets until it listens again on the same port. Permanent
failures still fail at once.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pandas as pd
import pytest

import remote_keras as rk
from remote_keras import errors
from remote_keras.storage.retry import RetryPolicy, as_policy, fetch_with_retries, is_transient
from remote_keras.testing.proxy import COUNTS_PATH, OUTAGE_PATH, CountingProxy, ProxyProcess
from remote_keras.testing.s3 import free_port
from tests.helpers import AUGMENT, assert_same_batch, epoch, noise_png

OUTAGE_S = 10.0
OUTAGE_AT = 2  # the batch before which the proxy goes down
# A batch is retried within `max_backoff_s` (5 s) of the store coming back; slack for 2 cores.
RECOVERY_S = 12.0
NAMES = [f"{'ab'[i % 2]}/{i:03d}.png" for i in range(160)]


def _frame(names: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"filename": names, "class": [n[0] for n in names]})


@pytest.fixture(scope="module")
def s3_data(s3_server) -> tuple[str, pd.DataFrame]:
    """160 small PNGs on S3 (10 batches of 16), written directly."""
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.storage_options, skip_instance_cache=True)
    prefix = f"data/outage-{uuid.uuid4().hex[:6]}"
    fs.pipe({f"{prefix}/{name}": noise_png(i) for i, name in enumerate(NAMES)})
    return f"s3://{prefix}", _frame(NAMES)


@pytest.fixture
def s3_proxy_down(s3_server) -> Iterator[tuple[CountingProxy, dict]]:
    """A proxy of its own in front of the S3 server (outages must not reach other tests)."""
    with CountingProxy(s3_server.port) as proxy:
        options = s3_server.storage_options
        options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=proxy.endpoint_url)
        yield proxy, options


@pytest.fixture(scope="module")
def lakefs_data(image_dir) -> Iterator[tuple[object, str]]:
    """The lakeFS stand-in with a repository whose `main` holds the 160 PNGs, committed."""
    import lakefs
    from lakefs.client import Client
    from lakefs_spec import LakeFSFileSystem

    from remote_keras.testing import LakeFSServer

    with LakeFSServer() as server:
        name = f"outage-{uuid.uuid4().hex[:6]}"
        client = Client(**server.storage_options)
        lakefs.Repository(name, client=client).create(storage_namespace=f"local://{name}")
        fs = LakeFSFileSystem(**server.storage_options)
        fs.pipe({f"lakefs://{name}/main/train/{n}": noise_png(i) for i, n in enumerate(NAMES)})
        lakefs.Branch(name, "main", client=client).commit("images")
        yield server, name


def outage_at(proxy: CountingProxy, batch: int = OUTAGE_AT):
    def before_batch(i: int) -> None:
        if i == batch:
            proxy.outage(OUTAGE_S)

    return before_batch


def assert_rode_out(proxy: CountingProxy, ended: float, stats, clean: list, faulty: list) -> None:
    """The epoch outlived one whole outage, retried through it and lost nothing."""
    ((_, back),) = proxy.outages
    assert back is not None and ended > back, "the epoch ended before the outage did"
    assert stats.retries > 0, "the outage was never met"
    assert ended - back < RECOVERY_S, f"{ended - back:.1f} s to recover"
    assert len(clean) == len(faulty)
    for a, b in zip(clean, faulty):
        assert_same_batch(a, b)


# --------------------------------------------------------------------------- the proxy's outage


def _get_counts(port: int, connection: http.client.HTTPConnection | None = None) -> int:
    connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.request("GET", COUNTS_PATH)
    response = connection.getresponse()
    response.read()
    return response.status


@pytest.mark.slow
def test_outage_refuses_resets_and_comes_back_on_the_same_port(s3_server):
    with CountingProxy(s3_server.port) as proxy:
        port = proxy.port
        kept = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        assert _get_counts(port, kept) == 200 and not proxy.is_down
        start = time.monotonic()
        proxy.outage(1.0)
        assert proxy.is_down
        with pytest.raises(ConnectionError):  # the open connection was reset
            _get_counts(port, kept)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        _wait_until_up(proxy)
        assert time.monotonic() - start > 0.9  # not before its time (a monotonic clock)
        assert proxy.port == port and _get_counts(port) == 200
        ((down, up),) = proxy.outages
        assert up - down > 0.9


def _wait_until_up(proxy: CountingProxy, guard_s: float = 60) -> None:
    """Until the outage is over (the guard stops a hang; it is not a speed test)."""
    deadline = time.monotonic() + guard_s
    while proxy.is_down:
        assert time.monotonic() < deadline, "the proxy never came back"
        time.sleep(0.01)


@pytest.mark.slow
def test_an_outage_during_an_outage_extends_it(s3_server):
    with CountingProxy(s3_server.port) as proxy:
        start = time.monotonic()
        proxy.outage(0.3)
        proxy.outage(1.0)
        _wait_until_up(proxy)
        assert time.monotonic() - start > 0.9 and len(proxy.outages) == 1
        with pytest.raises(ValueError, match="seconds"):
            proxy.outage(-1)


@pytest.mark.slow
def test_proxy_process_outage_by_method_and_magic_path(s3_server):
    with ProxyProcess(s3_server.port) as process:
        port = process.port
        start = time.monotonic()
        process.outage(1.0)  # returns once the proxy is down
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        deadline = time.monotonic() + 60  # a guard against hanging, not a speed test
        while True:
            try:
                assert _get_counts(port) == 200
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the proxy never came back"
                time.sleep(0.02)
        assert time.monotonic() - start > 0.9  # not before its time (a monotonic clock)
        bad = urllib.request.Request(f"http://127.0.0.1:{port}{OUTAGE_PATH}", b'{"seconds": -1}')
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(bad, timeout=5)
        assert caught.value.code == 400
        body = json.dumps({"seconds": 0.5}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}{OUTAGE_PATH}", body)
        with urllib.request.urlopen(request, timeout=5) as response:
            assert json.load(response) == {"seconds": 0.5}
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)


# --------------------------------------------------------------------------- the policy, unit


class FakeTime:
    """`sleep` and `clock` for `fetch_with_retries`, without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def down_until(time_: FakeTime, up_at: float, exc=ConnectionRefusedError):
    """A batch fetch that fails every path (translated) until `up_at`, each call taking 10 ms."""
    calls: list[int] = []

    def fetch(paths: list[str]) -> list:
        calls.append(len(paths))
        time_.now += 0.01
        if time_.now < up_at:
            return [errors.translate(p, exc("Connection refused")) for p in paths]
        return [f"bytes of {p}".encode() for p in paths]

    fetch.calls = calls
    return fetch


@pytest.mark.slow
def test_the_default_policy_waits_out_a_long_outage_of_a_big_batch():
    time_ = FakeTime()
    paths = [f"s3://b/{i}.png" for i in range(256)]  # far more than any fixed budget
    fetch = down_until(time_, up_at=120.0)
    results, retries = fetch_with_retries(fetch, paths, RetryPolicy(), time_.sleep, time_.clock)
    assert results == [f"bytes of {p}".encode() for p in paths]
    assert retries == 256 * (len(fetch.calls) - 1)
    assert 120.0 <= time_.now < 120.0 + 5.0 + 0.1  # back within one capped backoff
    assert max(time_.sleeps) <= 5.0 and set(fetch.calls) == {256}


def test_at_the_deadline_it_gives_up_naming_url_attempts_seconds_and_cause():
    time_ = FakeTime()
    fetch = down_until(time_, up_at=float("inf"), exc=ConnectionResetError)
    policy = RetryPolicy(deadline_s=30.0)
    (error,), retries = fetch_with_retries(
        fetch, ["s3://b/k.png"], policy, time_.sleep, time_.clock
    )
    assert isinstance(error, rk.ImageLoadError) and error.url == "s3://b/k.png"
    assert error.attempts == len(fetch.calls) == retries + 1
    assert 30.0 <= error.seconds < 30.1 and time_.now == error.seconds
    message = str(error)
    assert f"after {error.attempts} attempt(s) over 30.0 s" in message
    assert "'s3://b/k.png'" in message and "ConnectionResetError: Connection refused" in message


def test_attempts_and_budget_still_cap_retries_when_set():
    for retries_arg, most in ((1, 1), (3, 3), (RetryPolicy(attempts=4), 4)):
        time_ = FakeTime()
        fetch = down_until(time_, up_at=float("inf"))
        policy = as_policy(retries_arg)
        (error,), _ = fetch_with_retries(fetch, ["s3://b/k"], policy, time_.sleep, time_.clock)
        assert error.attempts == most and len(fetch.calls) == most
    time_ = FakeTime()
    fetch = down_until(time_, up_at=float("inf"))
    paths = [f"s3://b/{i}" for i in range(6)]
    policy = RetryPolicy(budget=10)
    results, retries = fetch_with_retries(fetch, paths, policy, time_.sleep, time_.clock)
    assert retries == 10 and sum(fetch.calls) == 16
    assert all(isinstance(r, rk.ImageLoadError) for r in results)


def test_permanent_failures_are_never_retried_by_the_default_policy():
    time_ = FakeTime()
    for exc in (FileNotFoundError, PermissionError):
        fetch = down_until(time_, up_at=float("inf"), exc=exc)
        (error,), retries = fetch_with_retries(
            fetch, ["s3://b/k"], RetryPolicy(), time_.sleep, time_.clock
        )
        assert isinstance(error, exc) and retries == 0 and fetch.calls == [1]


class _Obstore(Exception):
    """Named like obstore's errors, whose kind shows only in their text."""


_Obstore.__name__ = "GenericError"


def _urllib3_dns_error(reason: str) -> BaseException:
    import urllib3.exceptions

    resolution = urllib3.exceptions.NameResolutionError(
        "lakefs.example", None, socket.gaierror(reason)
    )
    try:
        raise urllib3.exceptions.MaxRetryError(None, "/api/v1/x", resolution) from resolution
    except urllib3.exceptions.MaxRetryError as error:
        return error


@pytest.mark.parametrize(
    "exc, transient",
    [
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), False),
        (_urllib3_dns_error("[Errno -2] Name or service not known"), False),
        (_Obstore("error sending request: dns error: Name or service not known"), False),
        (ConnectionError("Cannot connect to host x:443 [nodename nor servname provided]"), False),
        (_urllib3_dns_error("[Errno -3] Temporary failure in name resolution"), True),
        (_Obstore("error sending request for url: tcp connect error: Connection refused"), True),
        (ConnectionRefusedError("refused"), True),
    ],
)
def test_unknown_hosts_fail_at_once_and_temporary_dns_failures_are_retried(exc, transient):
    assert is_transient(exc) is transient
    assert is_transient(errors.translate("lakefs://r/main/k.png", exc)) is transient


def test_a_refused_lakefs_connection_is_transient_raw_and_translated():
    from lakefs_spec import LakeFSFileSystem

    from remote_keras.storage import lakefs

    fs = LakeFSFileSystem(
        host=f"http://127.0.0.1:{free_port()}", username="a", password="b", skip_instance_cache=True
    )
    url = "lakefs://repo/main/k.png"
    with pytest.raises(Exception) as caught:
        lakefs.get_object(fs, url)
    assert type(caught.value).__name__ == "MaxRetryError"
    assert is_transient(caught.value)
    translated = errors.translate(url, caught.value)
    assert isinstance(translated, ConnectionError) and is_transient(translated)


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
@pytest.mark.parametrize("loader", [None, "obstore"])
def test_default_settings_ride_out_an_outage_on_s3(s3_data, s3_proxy_down, loader):
    url, df = s3_data
    proxy, options = s3_proxy_down
    gen = rk.ImageDataGenerator(**AUGMENT, storage_options=options)
    kwargs = dict(target_size=(6, 6), batch_size=16, seed=5, validate_filenames=False)
    if loader is not None:
        kwargs["loader"] = loader
    with gen.flow_from_dataframe(df, url, **kwargs) as it:
        clean = epoch(it)
    with gen.flow_from_dataframe(df, url, **kwargs) as it:
        faulty = epoch(it, outage_at(proxy))
        ended = time.monotonic()
        stats = it.stats
    assert_rode_out(proxy, ended, stats, clean, faulty)


@pytest.mark.slow
def test_default_settings_ride_out_an_outage_on_lakefs(lakefs_data):
    server, repo = lakefs_data
    with CountingProxy(server.port) as proxy:
        options = dict(server.storage_options, host=proxy.endpoint_url)
        gen = rk.ImageDataGenerator(**AUGMENT, storage_options=options)
        kwargs = dict(target_size=(6, 6), batch_size=16, seed=5)
        with gen.flow_from_directory(f"lakefs://{repo}/main/train", **kwargs) as it:
            clean = epoch(it)
        with gen.flow_from_directory(f"lakefs://{repo}/main/train", **kwargs) as it:
            faulty = epoch(it, outage_at(proxy))
            ended = time.monotonic()
            stats = it.stats
        assert_rode_out(proxy, ended, stats, clean, faulty)


@pytest.mark.slow
def test_fit_with_default_arguments_rides_out_an_outage(s3_data, s3_proxy_down):
    import keras

    url, df = s3_data
    proxy, options = s3_proxy_down

    class Outage(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == OUTAGE_AT:
                proxy.outage(OUTAGE_S)

    gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=options)
    kwargs = dict(target_size=(6, 6), batch_size=8, validate_filenames=False)  # 20 batches
    with gen.flow_from_dataframe(df, url, **kwargs) as it:
        model = keras.Sequential(
            [keras.Input((6, 6, 3)), keras.layers.Flatten(), keras.layers.Dense(2, "softmax")]
        )
        model.compile("sgd", "categorical_crossentropy")
        history = model.fit(it, epochs=1, verbose=0, callbacks=[Outage()])
        ended = time.monotonic()
        assert it.stats.retries > 0 and it.stats.images >= len(df)
    ((_, back),) = proxy.outages
    assert back is not None and ended > back and len(history.history["loss"]) == 1


@pytest.mark.parametrize("loader", [None, "obstore"])
def test_a_missing_object_still_fails_at_once(s3_data, s3_proxy_down, loader):
    url, df = s3_data
    proxy, options = s3_proxy_down
    df = _frame([NAMES[0], "a/missing.png"])
    gen = rk.ImageDataGenerator(storage_options=options)
    kwargs = {} if loader is None else {"loader": loader}
    with gen.flow_from_dataframe(df, url, validate_filenames=False, shuffle=False, **kwargs) as it:
        proxy.reset()
        with pytest.raises(FileNotFoundError, match=f"{url}/a/missing.png"):
            it[0]
        assert it.stats.retries == 0
    assert proxy.reset() == {"GET": 2}  # each file asked for once: the 404 is not retried


def test_a_missing_lakefs_object_still_fails_at_once(lakefs_data):
    server, repo = lakefs_data
    df = _frame([NAMES[0], "a/missing.png"])
    gen = rk.ImageDataGenerator(storage_options=server.storage_options)
    url = f"lakefs://{repo}/main/train"
    with gen.flow_from_dataframe(df, url, validate_filenames=False, shuffle=False) as it:
        with pytest.raises(FileNotFoundError, match="a/missing.png"):
            it[0]
        assert it.stats.retries == 0  # the 404 is final: not retried


# --------------------------------------------------------------------------- lakeFS's pool


class _Records(logging.Handler):
    """Collects the messages of warnings (`Handler.handle` holds its lock around `emit`)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _pool_warnings(options: dict, repo: str) -> list[str]:
    records = _Records()
    logger = logging.getLogger("urllib3")
    logger.addHandler(records)
    try:
        gen = rk.ImageDataGenerator(storage_options=options)
        with gen.flow_from_directory(
            f"lakefs://{repo}/main/train", target_size=(6, 6), batch_size=40
        ) as it:
            epoch(it)
    finally:
        logger.removeHandler(records)
    return [m for m in records.messages if "Connection pool is full" in m]


@pytest.mark.slow
def test_a_lakefs_epoch_never_fills_the_connection_pool(lakefs_data, monkeypatch):
    from remote_keras.storage import connections

    server, repo = lakefs_data
    options = dict(server.storage_options, skip_instance_cache=True)  # a fresh client each
    assert not _pool_warnings(options, repo)
    monkeypatch.setattr(
        connections, "LIMITS", connections.Limits(per_host=0)
    )  # the SDK's own pool: the test can tell
    assert _pool_warnings(options, repo)


def test_fit_shows_the_give_up_message_whatever_the_backend_wraps_it_in():
    import keras

    def loader(path: str) -> bytes:
        if path.endswith("/a/040.png"):
            raise ConnectionResetError("reset by peer (injected)")
        return noise_png(0)

    df = _frame(NAMES[:64])
    gen = rk.ImageDataGenerator(loader=loader, retries=1)
    kwargs = dict(target_size=(6, 6), batch_size=8, validate_filenames=False, shuffle=False)
    with gen.flow_from_dataframe(df, "s3://bucket", **kwargs) as it:
        model = keras.Sequential(
            [keras.Input((6, 6, 3)), keras.layers.Flatten(), keras.layers.Dense(2, "softmax")]
        )
        model.compile("sgd", "categorical_crossentropy")
        with pytest.raises(Exception) as caught:
            model.fit(it, epochs=1, verbose=0)
    message = str(caught.value)
    assert "Gave up reading 's3://bucket/a/040.png' after 1 attempt(s)" in message
    assert "reset by peer (injected)" in message


@pytest.mark.slow
def test_image_dataset_from_directory_rides_out_an_outage_on_s3(s3_data, s3_proxy_down):
    url, _ = s3_data
    proxy, options = s3_proxy_down
    kwargs = dict(storage_options=options, image_size=(6, 6), batch_size=16, seed=5)
    clean = list(rk.image_dataset_from_directory(url, **kwargs).as_numpy_iterator())
    dataset = rk.image_dataset_from_directory(url, **kwargs)  # listed before the outage
    proxy.outage(3.0)  # the first reads meet it
    faulty = list(dataset.as_numpy_iterator())
    ended = time.monotonic()
    ((_, back),) = proxy.outages
    assert back is not None and ended > back, "the pass ended before the outage did"
    assert ended - back < RECOVERY_S, f"{ended - back:.1f} s to recover"
    assert len(clean) == len(faulty) == len(NAMES) // 16
    for a, b in zip(clean, faulty):
        assert_same_batch(a, b)
