"""Iterators release their threads and connections: on `close()`, and when left idle."""

from __future__ import annotations

import threading

import psutil
import pytest

import remote_keras as rk
from remote_keras.pipeline import prefetch

ITERATORS = 20


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
        assert all(it._pools.releases >= 1 for it in kept)
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
