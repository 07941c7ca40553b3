"""Iterators release their threads and connections: on `close()`, and when left idle."""

from __future__ import annotations

import os
import random
import threading

import psutil
import pytest

import remote_keras as rk
from remote_keras.pipeline import executors, prefetch
from tests.helpers import noise_png

ITERATORS = 20
FILES_LEFT_OPEN = 400


def _established(port: int) -> int:
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port == port
    )


def _eventually(condition, attempts: int = 100) -> bool:
    """Whether `condition()` holds within `attempts` checks (connections close asynchronously)."""
    for _ in range(attempts):
        if condition():
            return True
        threading.Event().wait(0.1)
    return condition()


def _read_epochs(url, df, options, loader, count, fits=2):
    """`count` iterators, each reading one epoch (the first `fits` of them through `fit`)."""
    import keras

    gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=options, loader=loader)
    iterators = []
    for n in range(count):
        it = gen.flow_from_dataframe(df, url, target_size=(8, 8), batch_size=4, seed=n)
        if n < fits:
            model = keras.Sequential(
                [keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(3)]
            )
            model.compile("sgd", "mse")
            model.fit(it, epochs=1, verbose=0)
        else:
            for i in range(len(it)):
                it[i]
        iterators.append(it)
        yield it


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["obstore", "fsspec"])
def test_closed_iterators_keep_no_connections(s3_server, s3_images, loader):
    url, df = s3_images
    port = s3_server.port
    first = None
    for n, it in enumerate(_read_epochs(url, df, s3_server.storage_options, loader, ITERATORS)):
        it.close()
        if n == 0:
            _eventually(lambda: _established(port) <= 8)
            first = _established(port)
    # fsspec's clients are shared by every user of the same options (its instance cache):
    # their one pool stays, as big as the most requests ever in flight together (about 20
    # here), not one pool per iterator (20 iterators leaking theirs hold hundreds).
    bound = first + 8 if loader == "obstore" else max(first, 8) + 24
    assert _eventually(lambda: _established(port) <= bound), (first, _established(port))


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["obstore", "fsspec"])
def test_idle_iterators_release_threads_and_connections(s3_server, s3_images, loader, monkeypatch):
    monkeypatch.setattr(prefetch, "IDLE_RELEASE_S", 0.3, raising=False)
    url, df = s3_images
    port = s3_server.port
    threads_before = threading.active_count()
    # Connections other tests' fsspec clients keep open to the same server (fsspec's shared
    # instances) are not this test's.
    already = _established(port)
    kept = list(_read_epochs(url, df, s3_server.storage_options, loader, ITERATORS))
    try:
        # Kept alive as `fit` and a notebook keep them, never closed: once idle they hold no
        # threads, and (obstore) no connections; fsspec's shared clients keep one pool.
        assert _eventually(lambda: threading.active_count() <= threads_before + 4), [
            t.name for t in threading.enumerate()
        ]
        assert _eventually(lambda: _established(port) <= already + 80), _established(port)
        if loader == "obstore":
            assert _eventually(lambda: _established(port) <= already + 8), (
                already,
                _established(port),
            )
        assert all(it._local.pools.releases >= 1 for it in kept)
        batch = kept[-1][0]  # and they read again on demand
        assert batch[0].shape == (4, 8, 8, 3)
    finally:
        for it in kept:
            it.close()


@pytest.mark.slow
def test_pools_are_not_released_while_work_runs():
    pools = prefetch.WorkerPools(2, 2, 1, idle_s=0.05)
    release = threading.Event()
    checks = []
    future = pools.get("batch").submit(release.wait, 30)
    try:
        for _ in range(5):  # the idle timer fires meanwhile and finds work running
            threading.Event().wait(0.1)
            checks.append(pools.releases)
        assert checks == [0] * 5 and not future.done()
    finally:
        release.set()
    assert future.result() is True
    assert _eventually(lambda: pools.releases == 1)
    pools.close()


def test_a_pool_released_while_idle_still_takes_work():
    pools = prefetch.WorkerPools(2, 2, 1, idle_s=0.05)
    old = pools.get("fetch")
    assert _eventually(lambda: pools.releases == 1)
    assert old.submit(lambda: 42).result() == 42  # a caller holding the old pool
    assert list(old.map(abs, [-1, -2])) == [1, 2]
    pools.close()
    with pytest.raises(RuntimeError, match="closed"):
        old.submit(abs, -1)


def test_daemon_threads_exit_when_idle_and_start_again_for_new_work():
    pool = executors.DaemonExecutor(3, "remote_keras-test-daemon", idle_s=0.05)
    assert [f.result(5) for f in [pool.submit(abs, -n) for n in range(6)]] == list(range(6))
    assert _eventually(lambda: not _named("remote_keras-test-daemon"))
    assert pool.submit(abs, -7).result(5) == 7  # a thread starts again
    pool.shutdown()
    assert not _named("remote_keras-test-daemon")


def test_daemon_threads_leaving_never_strand_a_task():
    # Submits race threads that are timing out: every task must still run (a stranded one
    # would time out here).
    pool = executors.DaemonExecutor(2, "remote_keras-test-race", idle_s=0.001)
    pauses = random.Random(0)
    futures = []
    for n in range(400):
        futures.append(pool.submit(abs, -n))
        if n % 3 == 0:
            threading.Event().wait(pauses.choice([0.0, 0.0005, 0.001, 0.002]))
    assert [f.result(10) for f in futures] == list(range(400))
    pool.shutdown()


@pytest.mark.slow
def test_a_dataset_pass_left_open_releases_its_threads(tmp_path, monkeypatch):
    # A pass kept alive and never closed (an exception's traceback in a notebook keeps the
    # iterator): its reads' threads leave once idle.
    monkeypatch.setattr(prefetch, "IDLE_RELEASE_S", 0.2)
    for i in range(FILES_LEFT_OPEN):  # more than TensorFlow buffers ahead: the pass stays open
        os.makedirs(tmp_path / "ab"[i % 2], exist_ok=True)
        (tmp_path / "ab"[i % 2] / f"{i:03d}.png").write_bytes(noise_png(i % 20))
    dataset = rk.image_dataset_from_directory(
        tmp_path, image_size=(8, 8), batch_size=2, shuffle=False, verbose=False
    )
    iterator = iter(dataset)
    next(iterator)
    assert _eventually(lambda: not _named("remote_keras-dataset"))
    assert next(iterator)[0].shape == (2, 8, 8, 3)  # and it reads on
    del iterator


def _named(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]
