"""Retries that never lose data, the skip policy, timeouts and determinism."""

from __future__ import annotations

import gc
import io
import random
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import fsspec
import numpy as np
import pandas as pd
import pytest

import remote_keras as rk
from remote_keras import errors
from remote_keras.storage.retry import RetryPolicy, fetch_with_retries, is_transient
from tests.conftest import PROCESS_THREADS, make_image
from tests.helpers import AUGMENT, assert_same_batch, epoch


class Status503(Exception):
    status = 503


@pytest.mark.parametrize(
    "exc, transient",
    [
        (ConnectionResetError("reset"), True),
        (TimeoutError("slow"), True),
        (Status503("slow down"), True),
        (FileNotFoundError("gone"), False),
        (PermissionError("denied"), False),
        (errors.ImageDecodeError("u", "corrupt"), False),
        (ValueError("something else"), False),
    ],
)
def test_transient_errors_are_told_apart(exc, transient):
    assert is_transient(exc) is transient
    wrapped = errors.translate("s3://b/k.png", exc)  # what the loaders return
    assert is_transient(wrapped) is transient


class Flaky:
    """Fails each path's first `failures` reads with a transient error."""

    def __init__(self, failures: int, exc: type[BaseException] = ConnectionResetError) -> None:
        self.failures = failures
        self.exc = exc
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, path: str) -> bytes:
        with self.lock:
            self.calls[path] = self.calls.get(path, 0) + 1
            count = self.calls[path]
        if count <= self.failures:
            raise self.exc(f"injected failure {count}")
        with open(path, "rb") as f:
            return f.read()


def fetch_all(loader):
    def fetch(paths):
        out = []
        for p in paths:
            try:
                out.append(loader(p))
            except Exception as exc:
                out.append(errors.translate(p, exc))
        return out

    return fetch


def test_transient_failures_are_retried_until_they_succeed(image_dir):
    directory, df = image_dir
    paths = [f"{directory}/{name}" for name in df["filename"][:5]]
    loader = Flaky(failures=2)
    sleeps = []
    results, retries = fetch_with_retries(fetch_all(loader), paths, RetryPolicy(), sleeps.append)
    assert [r[:8] for r in results] == [open(p, "rb").read()[:8] for p in paths]
    assert retries == 10 and len(sleeps) == 2
    assert all(0 <= s <= 0.1 * 2**3 for s in sleeps)  # capped exponential, full jitter


def test_exhausted_retries_name_url_attempts_and_cause(image_dir):
    directory, df = image_dir
    path = f"{directory}/{df['filename'][0]}"
    results, _ = fetch_with_retries(
        fetch_all(Flaky(failures=99)), [path], RetryPolicy(attempts=3), lambda s: None
    )
    error = results[0]
    assert isinstance(error, rk.ImageLoadError) and error.attempts == 3
    assert path in str(error) and "3 attempt(s)" in str(error)
    assert "ConnectionResetError: injected failure 3" in str(error)


def test_permanent_failures_and_the_budget_are_respected(image_dir):
    directory, df = image_dir
    paths = [f"{directory}/{name}" for name in df["filename"][:6]]
    missing = Flaky(failures=99, exc=FileNotFoundError)
    results, retries = fetch_with_retries(fetch_all(missing), paths, RetryPolicy(), lambda s: None)
    assert retries == 0 and set(missing.calls.values()) == {1}
    assert all(isinstance(r, FileNotFoundError) for r in results)
    flaky = Flaky(failures=99)
    _, retries = fetch_with_retries(fetch_all(flaky), paths, RetryPolicy(budget=4), lambda s: None)
    assert retries == 4 and sum(flaky.calls.values()) == 6 + 4


class RandomFaults:
    """A loader failing transiently at `rate`, seeded, whatever the call order."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.injected = 0

    def __call__(self, path: str) -> bytes:
        with self.lock:
            fail = self.rng.random() < self.rate
            self.injected += fail
        if fail:
            raise ConnectionResetError("injected")
        with open(path, "rb") as f:
            return f.read()


def test_a_faulty_epoch_equals_the_fault_free_one(image_dir):
    directory, df = image_dir
    kwargs = dict(target_size=(8, 8), batch_size=4, seed=7)
    fast = RetryPolicy(backoff_s=0.001)
    with rk.ImageDataGenerator(**AUGMENT).flow_from_dataframe(df, directory, **kwargs) as it:
        clean = epoch(it)
    faults = RandomFaults(rate=0.2, seed=1)
    gen = rk.ImageDataGenerator(**AUGMENT, loader=faults, retries=fast)
    with gen.flow_from_dataframe(df, directory, workers=2, prefetch_batches=2, **kwargs) as it:
        faulty = epoch(it)
        assert it.retries_made >= faults.injected > 0
    for a, b in zip(clean, faulty):
        assert_same_batch(a, b)


def test_a_stalled_request_times_out_and_is_retried(image_dir):
    directory, df = image_dir
    stalled, release = set(), threading.Event()
    still_stalled = []  # first reads of each file, held until the test ends

    def stalls_once(path):
        if path not in stalled:
            stalled.add(path)
            still_stalled.append(path)
            release.wait(60)  # no answer: the retry policy's timeout must cut it
            still_stalled.remove(path)
        with open(path, "rb") as f:
            return f.read()

    gen = rk.ImageDataGenerator(loader=stalls_once, retries=RetryPolicy(timeout_s=0.2))
    try:
        with gen.flow_from_dataframe(df, directory, batch_size=3, prefetch_batches=0) as it:
            x, _ = it[0]
            # The batch came from the retries while its first reads were still unanswered.
            assert len(still_stalled) == 3
            assert it.retries_made == 3 and x.shape[0] == 3
    finally:
        release.set()


def corrupt_dataset() -> pd.DataFrame:
    """Six PNGs in memory://, of which #2 is truncated and #4 is not an image."""
    fs = fsspec.filesystem("memory")
    rows = []
    for i in range(6):
        buffer = io.BytesIO()
        make_image(np.random.default_rng(i), 6, 6).save(buffer, "PNG")
        data = buffer.getvalue()
        if i == 2:
            data = data[: len(data) // 2]  # truncated
        if i == 4:
            data = b"not an image at all"
        fs.pipe(f"/skiptest/{i}.png", data)
        rows.append({"filename": f"memory://skiptest/{i}.png", "class": "a", "value": i})
    return pd.DataFrame(rows)


def test_unreadable_samples_raise_by_default_naming_the_url():
    df = corrupt_dataset()
    with rk.ImageDataGenerator().flow_from_dataframe(df, batch_size=6, shuffle=False) as it:
        with pytest.raises(rk.ImageDecodeError, match="memory://skiptest/2.png"):
            it[0]


def test_skip_drops_counts_and_reports_unreadable_samples():
    df = corrupt_dataset()
    gen = rk.ImageDataGenerator(on_error="skip")
    it = gen.flow_from_dataframe(
        df, batch_size=4, shuffle=False, class_mode="raw", y_col="value", target_size=(6, 6)
    )
    with it, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (x0, y0), (x1, y1) = it[0], it[1]
        assert y0.tolist() == [0, 1, 3] and x0.shape[0] == 3
        assert y1.tolist() == [5] and x1.shape[0] == 1
        assert [p for p, _ in it.skipped] == ["memory://skiptest/2.png", "memory://skiptest/4.png"]
        assert (
            len([w for w in caught if "on_error='skip'" in str(w.message)]) == 1
        )  # once per epoch
        it.on_epoch_end()
    assert any("2 sample(s) skipped" in str(w.message) for w in caught)


def test_seeded_batches_do_not_depend_on_workers_prefetch_or_faults(image_dir):
    directory, df = image_dir
    kwargs = dict(target_size=(8, 8), batch_size=5, seed=11)
    runs = []
    for workers, depth, rate in ((1, 0, 0.0), (4, 8, 0.0), (2, 2, 0.3)):
        gen = rk.ImageDataGenerator(
            **AUGMENT, loader=RandomFaults(rate, seed=3), retries=RetryPolicy(backoff_s=0.001)
        )
        with gen.flow_from_dataframe(
            df, directory, workers=workers, prefetch_batches=depth, **kwargs
        ) as it:
            with ThreadPoolExecutor(workers) as pool:
                first = list(pool.map(it.__getitem__, range(len(it))))
            it.on_epoch_end()
            second = [it[i] for i in reversed(range(len(it)))][::-1]
        runs.append(first + second)
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert_same_batch(a, b)


def test_bad_policies_are_rejected():
    with pytest.raises(ValueError, match="attempts >= 1"):
        RetryPolicy(attempts=0)
    with pytest.raises(TypeError, match="`retries` must be"):
        rk.ImageDataGenerator().flow_from_dataframe(
            pd.DataFrame({"filename": [], "class": []}), retries="many"
        )
    with pytest.raises(ValueError, match='`on_error` must be "raise" or "skip"'):
        rk.ImageDataGenerator(on_error="ignore").flow_from_dataframe(
            pd.DataFrame({"filename": [], "class": []})
        )


def _fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
def test_many_create_iterate_close_cycles_leak_nothing(image_dir):
    import gc

    import psutil

    directory, df = image_dir
    gen = rk.ImageDataGenerator()

    def cycle():
        with gen.flow_from_dataframe(df, directory, target_size=(8, 8), batch_size=8) as it:
            it[0]
            it[1]

    for _ in range(20):  # warm-up: imports, caches, allocator pools
        cycle()
    gc.collect()
    threads, fds = threading.active_count(), _fds()
    rss = psutil.Process().memory_info().rss
    for _ in range(200):
        cycle()
    gc.collect()
    deadline = time.monotonic() + 5
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= threads
    assert _fds() <= fds + 2
    assert psutil.Process().memory_info().rss - rss < 40 * 2**20


@pytest.mark.slow
def test_keyboard_interrupt_stops_background_work_promptly(image_dir):
    import os
    import signal

    directory, df = image_dir
    calls, closed, release = [], threading.Event(), threading.Event()

    def slow(path):
        calls.append(closed.is_set())
        if len(calls) == 2:  # both reads the batch may have in flight have started: Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)
        release.wait(60)
        with open(path, "rb") as f:
            return f.read()

    gen = rk.ImageDataGenerator(loader=slow)
    it = gen.flow_from_dataframe(df, directory, batch_size=21, max_in_flight=2)
    try:
        with pytest.raises(KeyboardInterrupt):
            with it:
                it[0]  # 21 files, 2 at a time: held until released, unless interrupted
        closed.set()
    finally:
        release.set()  # the two reads in flight finish now; nothing may start after them
    _wait_for_no_threads()
    assert len(calls) == 2
    assert calls == [False, False]  # nothing new started after close()


def _wait_for_no_threads(timeout_s: float = 60) -> None:
    """Until no thread of the package runs (a guard against hanging, not a speed test)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        gc.collect()
        names = [t.name for t in threading.enumerate() if t.name.startswith("remote_keras-")]
        if not [name for name in names if name not in PROCESS_THREADS]:
            return
        time.sleep(0.02)


@pytest.mark.slow
def test_secrets_never_reach_reprs_errors_warnings_or_logs(s3_images, s3_options, caplog):
    import logging

    url, df = s3_images
    secret = "Sup3r-Secret-Value-For-Tests"
    options = dict(s3_options, secret=secret)
    caplog.set_level(logging.DEBUG, logger="remote_keras")
    caplog.set_level(logging.WARNING)
    texts = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gen = rk.ImageDataGenerator(storage_options=options, on_error="skip")
        texts.append(repr(gen))
        for loader in ("fsspec", "obstore"):
            it = gen.flow_from_dataframe(
                df, url, validate_filenames=False, loader=loader, retries=1, batch_size=4
            )
            texts += [repr(it), repr(it.loader), repr(it.filesystems)]
            with it, pytest.raises(PermissionError) as info:
                it[0]
            texts += [str(info.value), repr(info.value)]
        with pytest.raises(PermissionError) as info:
            gen.flow_from_directory(url)
        texts.append(str(info.value))
    texts += [str(w.message) for w in caught] + [caplog.text]
    assert texts and not [t for t in texts if secret in t]


def test_zero_byte_files_and_decompression_bombs_are_decode_errors(monkeypatch):
    from PIL import Image

    fs = fsspec.filesystem("memory")
    buffer = io.BytesIO()
    make_image(np.random.default_rng(0), 40, 40).save(buffer, "PNG")
    fs.pipe({"/bombs/a/empty.png": b"", "/bombs/a/big.png": buffer.getvalue()})
    gen = rk.ImageDataGenerator()
    for name, reason in (("empty.png", "cannot identify"), ("big.png", "DecompressionBomb")):
        df = pd.DataFrame({"filename": [f"memory://bombs/a/{name}"], "class": ["a"]})
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 40x40 > 2 x 100 pixels
        with gen.flow_from_dataframe(df) as it:
            with pytest.raises(rk.ImageDecodeError, match=f"memory://bombs/a/{name}.*{reason}"):
                it[0]
