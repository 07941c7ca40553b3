"""Thread pools, prefetching, thread safety, PyDataset knobs and clean shutdown."""

from __future__ import annotations

import gc
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import remote_keras as rk
from remote_keras.pipeline import batches
from tests.conftest import PROCESS_THREADS
from tests.helpers import GatedLoader, SlowLoader


def our_threads() -> list[str]:
    """The package's threads of iterators (not the process's own, `PROCESS_THREADS`)."""
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith("remote_keras-") and t.name not in PROCESS_THREADS
    ]


def test_files_of_a_batch_are_fetched_concurrently_and_bounded(image_dir):
    directory, df = image_dir
    loader = GatedLoader()
    gen = rk.ImageDataGenerator(loader=loader)
    with gen.flow_from_dataframe(
        df, directory, batch_size=21, max_in_flight=8, prefetch_batches=0
    ) as it:
        with ThreadPoolExecutor(1) as pool:
            batch = pool.submit(it.__getitem__, 0)
            # Eight reads of the batch wait at once, none of them finished: concurrent.
            assert loader.wait_for_active(8), f"only {loader.active} reads at once"
            loader.gate.set()
            x, _ = batch.result(timeout=60)
    assert x.shape[0] == 21 and loader.calls == 21
    assert loader.peak == 8  # bounded by max_in_flight, and actually reached


def test_in_order_reads_are_prefetched(image_dir):
    directory, df = image_dir
    loader = SlowLoader(0.0)
    gen = rk.ImageDataGenerator(loader=loader)
    with gen.flow_from_dataframe(df, directory, batch_size=3, shuffle=False) as it:
        ahead = 3 * it.options.prefetch_batches
        it[0]  # the model trains on it; the next batches load meanwhile
        assert loader.wait_for_calls(3 + ahead), f"{loader.calls - 3} files read ahead"
        read_before = dict(loader.paths)
        it[1]
        read_after = dict(loader.paths)
    batch_1 = it.filepaths[3:6]
    # Batch 1 came from what was read ahead: its files had been read, and were not read again.
    assert all(read_before.get(path) == 1 for path in batch_1), read_before
    assert all(read_after[path] == 1 for path in batch_1)


def test_random_order_does_not_prefetch_wrongly(image_dir):
    directory, df = image_dir
    loader = SlowLoader(0.0)
    gen = rk.ImageDataGenerator(loader=loader)
    with gen.flow_from_dataframe(df, directory, batch_size=3, shuffle=False, workers=1) as it:
        for idx in (5, 1, 6, 2, 0):  # a shuffled fit epoch: no idx follows its predecessor
            it[idx]
        time.sleep(0.2)
    # Only the first read (whose predecessor is unknown) may start look-ahead.
    assert loader.calls <= 3 * (5 + it.options.prefetch_batches)


def test_concurrent_getitem_covers_every_sample_exactly_once(image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator(rotation_range=20)
    kwargs = dict(target_size=(8, 8), batch_size=2, shuffle=True, seed=9, class_mode="raw",
                  y_col="value")  # fmt: skip
    expected = gen.flow_from_dataframe(df, directory, **kwargs)
    with expected:
        sequential = [expected[i] for i in range(len(expected))]
    with gen.flow_from_dataframe(df, directory, **kwargs) as it:
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(it.__getitem__, range(len(it))))
    for (x1, y1), (x2, y2) in zip(sequential, results):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    seen = np.concatenate([y for _, y in results])
    assert sorted(seen.tolist()) == sorted(df["value"].tolist())


def test_concurrent_next_yields_each_sample_once_per_epoch(image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator()
    with gen.flow_from_dataframe(
        df, directory, target_size=(4, 4), batch_size=3, class_mode="raw", y_col="value", seed=1
    ) as it:
        with ThreadPoolExecutor(8) as pool:
            batches = list(pool.map(lambda _: next(it), range(len(it))))
    seen = np.concatenate([y for _, y in batches])
    assert sorted(seen.tolist()) == sorted(df["value"].tolist())


def test_pydataset_knobs_reach_the_base(image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator(workers=3)
    with gen.flow_from_dataframe(df, directory, use_multiprocessing=True, max_queue_size=7) as it:
        assert (it.workers, it.use_multiprocessing, it.max_queue_size) == (3, True, 7)
    with gen.flow_from_directory(directory, workers=2) as it:
        assert (it.workers, it.use_multiprocessing, it.max_queue_size) == (2, False, 10)


BAD_KNOBS = [
    ("workers", 0),
    ("prefetch_batches", -1),
    ("max_in_flight", 0),
    ("max_queue_size", "x"),
]


@pytest.mark.parametrize("name, value", BAD_KNOBS)
def test_bad_knobs_are_rejected_with_received(image_dir, name, value):
    directory, df = image_dir
    with pytest.raises(ValueError, match=f"Received: {name}="):
        rk.ImageDataGenerator().flow_from_dataframe(df, directory, **{name: value})


@pytest.mark.slow
def test_close_stops_threads_and_refuses_more_work(image_dir):
    directory, df = image_dir
    it = rk.ImageDataGenerator().flow_from_dataframe(df, directory, batch_size=4)
    it[0]
    assert our_threads()
    it.close()
    _wait_until(lambda: not our_threads())
    assert not our_threads()
    with pytest.raises(RuntimeError, match="closed"):
        it[1]


@pytest.mark.slow
def test_collected_iterator_leaves_no_threads(image_dir):
    directory, df = image_dir
    for _ in range(5):
        it = rk.ImageDataGenerator().flow_from_dataframe(df, directory, batch_size=4)
        it[0]
        del it
    gc.collect()
    _wait_until(lambda: not our_threads())
    assert not our_threads()


def test_decoding_uses_a_pool_per_core(image_dir):
    directory, df = image_dir
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory) as it:
        it[0]
        decode = [n for n in our_threads() if "decode" in n]
        assert 1 <= len(decode) <= (os.cpu_count() or 1)


@pytest.mark.slow
def test_fit_with_shuffle_and_worker_threads_sees_every_sample(image_dir, monkeypatch):
    import keras

    directory, df = image_dir
    seen = []

    class Record(keras.callbacks.Callback):
        pass

    gen = rk.ImageDataGenerator(rescale=1 / 255)
    with gen.flow_from_dataframe(
        df, directory, target_size=(8, 8), batch_size=4, workers=4, seed=3
    ) as it:
        original = batches.assemble

        def recording(targets, plan, batch_x, save_to=None):
            seen.append(plan.indices.copy())
            return original(targets, plan, batch_x, save_to)

        monkeypatch.setattr(batches, "assemble", recording)
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(3, activation="softmax")])  # fmt: skip
        model.compile("sgd", "categorical_crossentropy")
        model.fit(it, epochs=2, verbose=0, callbacks=[Record()])
    # TF reads two batches to infer the signature; epoch 0 reuses them, so each epoch builds
    # every batch exactly once.
    per_epoch = len(it)
    assert len(seen) == 2 * per_epoch
    for epoch in range(2):
        chunk = seen[epoch * per_epoch : (epoch + 1) * per_epoch]
        assert sorted(np.concatenate(chunk).tolist()) == list(range(it.n))


def _wait_until(condition, timeout: float = 60.0) -> None:
    """Until `condition()` holds: the timeout guards against a hang; it is not a speed test."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        gc.collect()  # Keras's iterators hold a reference cycle (their index generator)
        time.sleep(0.05)


@pytest.mark.slow
def test_a_failed_prefetched_batch_is_retried_when_asked_for(image_dir):
    directory, df = image_dir
    failed = set()

    def flaky(path):
        if path.endswith("dog_0.png") and path not in failed:
            failed.add(path)
            raise ConnectionResetError("reset by peer")
        with open(path, "rb") as f:
            return f.read()

    gen = rk.ImageDataGenerator(loader=flaky)
    with gen.flow_from_dataframe(
        df, directory, batch_size=7, shuffle=False, target_size=(4, 4)
    ) as it:
        it[0]  # batch 1 (holding dog_0.png) is built ahead and fails once
        _wait_until(lambda: failed)
        x, _ = it[1]
    assert failed and x.shape == (7, 4, 4, 3)
