"""One timeout and one retry count for every loader; Retry-After; a slow read is logged once."""

from __future__ import annotations

import functools
import logging

import botocore.exceptions
import pytest

import remote_keras as rk
from remote_keras.pipeline import fetching
from remote_keras.storage import retry
from remote_keras.testing.proxy import FaultPlan

LOADERS = ("fsspec", "obstore")
# Not "reset-before": aiohttp (under s3fs) reconnects once, unseen, when a reused keep-alive
# connection is reset before an answer, as it cannot tell that from a stale connection.
FAULTS = ("truncate", "503", "429", "reset-mid-body")


def slow_down(retry_after: str | None) -> botocore.exceptions.ClientError:
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    response = {
        "Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."},
        "ResponseMetadata": {"HTTPStatusCode": 503, "HTTPHeaders": headers},
    }
    return botocore.exceptions.ClientError(response, "GetObject")


class Clock:
    """A fake monotonic clock that `sleep` advances."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def failing_then_ok(failures: int, error: BaseException):
    left = [failures]

    def fetch(paths):
        if left[0] > 0:
            left[0] -= 1
            return [error for _ in paths]
        return [b"ok" for _ in paths]

    return fetch


def test_retry_after_is_the_least_delay_of_a_retry():
    clock = Clock()
    policy = rk.RetryPolicy(backoff_s=0.01, max_backoff_s=0.05)
    results, retries = retry.fetch_with_retries(
        failing_then_ok(2, slow_down("2")), ["s3://b/a"], policy, clock.sleep, clock
    )
    assert results == [b"ok"] and retries == 2
    assert clock.slept == [2.0, 2.0]


def test_retry_after_is_capped_by_the_deadline_and_ignored_when_absent():
    clock = Clock()
    policy = rk.RetryPolicy(backoff_s=0.01, max_backoff_s=0.05, deadline_s=1.5)
    retry.fetch_with_retries(
        failing_then_ok(1, slow_down("30")), ["s3://b/a"], policy, clock.sleep, clock
    )
    assert clock.slept == [1.5]
    clock = Clock()
    retry.fetch_with_retries(
        failing_then_ok(1, slow_down(None)), ["s3://b/a"], policy, clock.sleep, clock
    )
    assert clock.slept and clock.slept[0] <= 0.05


def test_retry_after_is_read_as_seconds_or_as_an_http_date():
    assert retry.parse_retry_after(" 7 ") == 7.0
    now = 1_700_000_000.0
    assert retry.parse_retry_after("Tue, 14 Nov 2023 22:13:30 GMT", now=now) == pytest.approx(10)
    assert retry.parse_retry_after("soon") is None
    error = ConnectionError("wrapped")
    error.__cause__ = slow_down("3")
    assert retry.retry_after(error) == 3.0


def test_a_read_failing_for_seconds_is_logged_once_per_batch(caplog):
    clock = Clock()
    secret = "pa55wordXYZ"
    paths = [f"http://user:{secret}@127.0.0.1:1/a{i}.png" for i in range(3)]
    policy = rk.RetryPolicy(backoff_s=1.0, max_backoff_s=1.0, deadline_s=60)

    def fetch(batch):
        clock.now += 2.0  # each attempt takes 2 s
        return [ConnectionRefusedError(f"refused: {p}") for p in batch]

    caplog.set_level(logging.INFO, logger="remote_keras")
    results, retries = retry.fetch_with_retries(fetch, paths, policy, clock.sleep, clock)
    assert retries > 6 and all(isinstance(r, rk.ImageLoadError) for r in results)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert "http://***@127.0.0.1:1/a0.png" in message and "2 more" in message, message
    assert secret not in message


def read_one(url, df, options, loader, policy, monkeypatch=None, clock=None):
    if clock is not None:
        recorded = functools.partial(retry.RetryRounds, sleep=clock.sleep)
        monkeypatch.setattr(fetching, "RetryRounds", recorded)
    gen = rk.ImageDataGenerator(storage_options=options, loader=loader, retries=policy)
    with gen.flow_from_dataframe(
        df, url, target_size=(8, 8), batch_size=len(df), shuffle=False, validate_filenames=False
    ) as it:
        try:
            return it[0], it.stats
        except Exception as exc:
            return exc, it.stats


@pytest.mark.slow
@pytest.mark.parametrize("loader", LOADERS)
def test_a_stalled_read_ends_at_the_policy_timeout(s3_images, s3_options, s3_proxy, loader):
    """The client itself gives up at `timeout_s` (2 s), long before the 30 s stall ends."""
    url, df = s3_images
    s3_proxy.set_faults(FaultPlan(rate=1.0, kinds=("stall",), stall_s=30))
    try:
        error, stats = read_one(url, df[:1], s3_options, loader, rk.RetryPolicy(1, timeout_s=2))
        requests = s3_proxy.reset()
    finally:
        s3_proxy.set_faults(None)
    assert isinstance(error, rk.ImageLoadError), error
    assert "timed out" in str(error).lower() or "timeout" in str(error).lower(), error
    assert requests["GET"] == 1 and requests["fault:stall"] == 1, requests  # no hidden retry


@pytest.mark.slow
def test_the_obstore_client_times_out_by_itself(s3_images, s3_options, s3_proxy):
    """Not only the fetcher's wait: the request ends, so no thread or exit is held by it."""
    url, df = s3_images
    loader = rk.ObstoreLoader(s3_options, timeout_s=2)
    s3_proxy.set_faults(FaultPlan(rate=1.0, kinds=("stall",), stall_s=30))
    try:
        with pytest.raises(TimeoutError, match="Timed out reading"):
            loader(f"{url}/{df['filename'][0]}")
    finally:
        s3_proxy.set_faults(None)


@pytest.mark.parametrize("loader", LOADERS)
def test_stats_count_every_retry_the_faults_caused(s3_images, s3_options, s3_proxy, loader):
    url, df = s3_images
    plan = FaultPlan(rate=0.3, seed=11, kinds=FAULTS, max_faults_per_key=1)
    policy = rk.RetryPolicy(attempts=4, backoff_s=0.01, max_backoff_s=0.02, timeout_s=10)
    s3_proxy.set_faults(plan)
    try:
        batch, stats = read_one(url, df, s3_options, loader, policy)
        injected = sum(s3_proxy.faults_injected.values())
        requests = s3_proxy.reset()
    finally:
        s3_proxy.set_faults(None)
    assert not isinstance(batch, BaseException), batch
    assert injected >= 3, injected
    assert stats.retries == injected, (stats.retries, injected)
    assert requests["GET"] == len(df) + injected, requests


@pytest.mark.parametrize("loader", ["fsspec"])  # obstore's errors carry no response headers
def test_retry_after_from_the_server_is_waited(
    s3_images, s3_options, s3_proxy, monkeypatch, loader
):
    url, df = s3_images
    clock = Clock()
    policy = rk.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02)
    s3_proxy.set_faults(FaultPlan(rate=1.0, kinds=("503",), retry_after_s=2, max_faults_per_key=1))
    try:
        batch, stats = read_one(url, df[:1], s3_options, loader, policy, monkeypatch, clock)
    finally:
        s3_proxy.set_faults(None)
    assert not isinstance(batch, BaseException), batch
    assert stats.retries == 1 and clock.slept == [2.0]


@pytest.mark.slow
@pytest.mark.parametrize("loader", LOADERS)
def test_a_stalled_read_is_logged_once(
    s3_images, s3_options, s3_proxy, monkeypatch, caplog, loader
):
    url, df = s3_images
    monkeypatch.setattr(retry, "WARN_AFTER_S", 1.0)
    caplog.set_level(logging.WARNING, logger="remote_keras")
    s3_proxy.set_faults(FaultPlan(rate=1.0, kinds=("stall",), stall_s=30, max_faults_per_key=1))
    try:
        batch, stats = read_one(url, df[:2], s3_options, loader, rk.RetryPolicy(3, timeout_s=2))
    finally:
        s3_proxy.set_faults(None)
    assert not isinstance(batch, BaseException), batch
    warnings = [r.getMessage() for r in caplog.records if r.name == "remote_keras"]
    warnings = [m for m in warnings if "being retried" in m]
    assert len(warnings) == 1, warnings
    assert f"{url}/{df['filename'][0]}" in warnings[0]


@pytest.mark.slow
def test_a_request_queued_behind_others_gets_its_whole_timeout():
    """With one thread, the third read starts 2.4 s after the batch: not a timeout of 2 s."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from remote_keras.pipeline.stats import StatsRecorder

    def loader(path):
        threading.Event().wait(1.2)
        return path.encode()

    policy = rk.RetryPolicy(attempts=1, timeout_s=2)
    fetcher = fetching.Fetcher(loader, policy, None, StatsRecorder())
    with ThreadPoolExecutor(1) as pool:
        assert fetcher.fetch(["a", "b", "c"], pool) == [b"a", b"b", b"c"]
