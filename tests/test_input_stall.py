"""`InputStallCallback`: per-epoch input wait, measured as training sees it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import keras
import numpy as np
import pytest

import remote_keras as rk
from remote_keras.testing.data import write_class_tree
from tests.helpers import SlowLoader, needs_jax, needs_torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SlowStep(keras.layers.Layer):
    """Identity that takes `delay` seconds per call (a busy accelerator)."""

    def __init__(self, delay: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.delay = delay

    def call(self, x):
        time.sleep(self.delay)
        return x


def _fit(it, step_delay: float, epochs: int = 2, **fit_kwargs):
    model = keras.Sequential(
        [keras.Input((8, 8, 3)), SlowStep(step_delay), keras.layers.Flatten(),
         keras.layers.Dense(3, activation="softmax")]
    )  # fmt: skip
    model.compile("sgd", "categorical_crossentropy", run_eagerly=True)  # sleeps every step
    lines = []
    stall = rk.InputStallCallback(it, print_fn=lines.append)
    history = model.fit(it, epochs=epochs, callbacks=[stall], verbose=0, **fit_kwargs)
    return stall, lines, history


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 4])
def test_a_slow_store_shows_as_input_wait(image_dir, workers):
    directory, df = image_dir
    # Slower per request with more workers, so that the wait per epoch stays well above the
    # eager training steps' own time on a loaded machine (it was 0.15 s for both, and flaky).
    delay = 0.15 * workers
    gen = rk.ImageDataGenerator(rescale=1 / 255, loader=SlowLoader(delay))
    with gen.flow_from_dataframe(
        df, directory, target_size=(8, 8), batch_size=3, workers=workers, prefetch_batches=0
    ) as it:
        stall, lines, history = _fit(it, step_delay=0.0)
    assert len(stall.reports) == 2
    # Epoch 0 counts batches 0 and 1 too, which TensorFlow read before it to infer the tensor
    # spec (and hands out again).
    for report, fetched in zip(stall.reports, (7, 7)):
        assert report.steps == len(it) == 7
        # Steps wait (how long depends on how fast the machine runs the eager steps; the
        # exact accounting is checked with an injected clock below).
        assert 0 < report.input_wait_s <= report.train_s
        assert report.wait_fraction == pytest.approx(report.input_wait_s / report.train_s)
        images = 3 * fetched
        assert report.loader.images == images and report.loader.requests == images
    assert history.history["input_wait_fraction"] == [r.wait_fraction for r in stall.reports]
    assert lines[0].startswith("Epoch 1: waited ") and "21 images" in lines[0]


def fit_twice(directory: str, batch_size: int) -> dict:
    """Two `fit`s of two epochs on one iterator, fresh then reused, each with a new callback.

    Returns:
        `reports`: per `fit`, per epoch, `[steps, images, requests, carried]`; `images`:
        the iterator's images decoded in each `fit`.
    """
    gen = rk.ImageDataGenerator(rescale=1 / 255)
    reports, images = [], []
    with gen.flow_from_directory(directory, target_size=(8, 8), batch_size=batch_size) as it:
        for _ in range(2):
            model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                      keras.layers.Dense(3, activation="softmax")])  # fmt: skip
            model.compile("sgd", "categorical_crossentropy")
            before = it.stats.images
            stall = rk.InputStallCallback(it, verbose=0)
            model.fit(it, epochs=2, callbacks=[stall], verbose=0)
            images.append(it.stats.images - before)
            reports.append(
                [[r.steps, r.loader.images, r.loader.requests, r.loader.carried]
                 for r in stall.reports]
            )  # fmt: skip
    return {"backend": keras.backend.backend(), "reports": reports, "images": images}


@pytest.fixture(scope="module")
def images_36(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("images_36")
    write_class_tree(root, per_class=12)
    return str(root)


def _fit_twice_on(backend: str, directory: str, batch_size: int) -> dict:
    if backend == keras.backend.backend():
        return fit_twice(directory, batch_size)
    script = (
        "import json, sys\n"
        "from tests.test_input_stall import fit_twice\n"
        "print('REPORT', json.dumps(fit_twice(sys.argv[1], int(sys.argv[2]))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, directory, str(batch_size)],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
        env=dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-6000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.parametrize("batch_size", [4, 12])
@pytest.mark.parametrize(
    "backend",
    ["tensorflow", pytest.param("jax", marks=needs_jax), pytest.param("torch", marks=needs_torch)],
)
def test_each_epoch_of_fit_reports_what_it_read(images_36, backend, batch_size):
    """36 images: every epoch reports its 36, on a fresh iterator and on a reused one.

    What Keras read before the first epoch began counts in it: TensorFlow's tensor-spec batches
    (handed out again), JAX's and PyTorch's model-building batch (its files carried into the
    epoch, not fetched again, but decoded again: one batch more `images`, not `requests`).
    (It reported 12 and 0 of 36 on TensorFlow with a batch of 4 and 12, reused or not.)
    """
    result = _fit_twice_on(backend, images_36, batch_size)
    assert result["backend"] == backend
    steps = 36 // batch_size
    build = 0 if backend == "tensorflow" else batch_size  # decoded twice: Keras built from it
    for reports, images in zip(result["reports"], result["images"]):  # fresh, then reused
        assert reports == [[steps, 36 + build, 36, build], [steps, 36, 36, 0]]
        assert sum(report[1] for report in reports) == images  # all the `fit` read, once


class FakeTime:
    """Stands in for the `time` module where hand-offs and steps are timed; `now` moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._lock = threading.Lock()

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds

    def __getattr__(self, name: str):
        return getattr(time, name)


@pytest.fixture
def fake_time(monkeypatch):
    from remote_keras.keras_agnostic import batch_core, callbacks, scheduling

    clock = FakeTime()
    for module in (callbacks, batch_core, scheduling):
        monkeypatch.setattr(module, "time", clock)
    return clock


def _train_by_hand(it, stall, clock, step_s: float, epochs: int = 2) -> None:
    """What `fit` does with the callback, one step after another, each taking `step_s`."""
    for epoch in range(epochs):
        stall.on_epoch_begin(epoch)
        for k in range(len(it)):
            it[k]
            clock.advance(step_s)
            stall.on_train_batch_end(k)
        stall.on_epoch_end(epoch, {})


@pytest.mark.parametrize("read_s", [0.0, 0.2])
def test_input_wait_is_the_time_steps_wait_for_batches(image_dir, fake_time, read_s):
    """Batches ready at once: no wait, however busy the model; each read taking `read_s`: the
    steps wait for every read (one batch at a time, nothing built ahead)."""
    directory, df = image_dir

    def timed_read(path):
        fake_time.advance(read_s)
        with open(path, "rb") as f:
            return f.read()

    gen = rk.ImageDataGenerator(rescale=1 / 255, loader=timed_read)
    with gen.flow_from_dataframe(
        df, directory, target_size=(8, 8), batch_size=3, shuffle=False, prefetch_batches=0
    ) as it:
        stall = rk.InputStallCallback(it, verbose=0)
        _train_by_hand(it, stall, fake_time, step_s=0.1)
    for report in stall.reports:
        assert report.steps == 7
        assert report.input_wait_s == pytest.approx(7 * 3 * read_s)
        assert report.train_s == pytest.approx(7 * (3 * read_s + 0.1))
        assert report.wait_fraction == pytest.approx(3 * read_s / (3 * read_s + 0.1))
        assert report.loader.images == 21


def test_batches_built_ahead_are_not_waited_for(image_dir, fake_time):
    """A batch handed out during the step before it costs no wait; one handed out after its
    step asked costs the difference (steps of 1 s; batches 2 and 5 are 0.5 s late)."""
    directory, df = image_dir
    late = {2, 5}
    with rk.ImageDataGenerator().flow_from_dataframe(
        df, directory, target_size=(8, 8), batch_size=3, shuffle=False, prefetch_batches=0
    ) as it:
        stall = rk.InputStallCallback(it, verbose=0)
        n = len(it)
        stall.on_epoch_begin(0)
        it[0]
        for k in range(n):
            fake_time.advance(0.5)
            if k + 1 < n and k + 1 not in late:
                it[k + 1]  # built half-way through step k, before step k + 1 asks
            fake_time.advance(0.5)
            stall.on_train_batch_end(k)
            if k + 1 in late:
                fake_time.advance(0.5)  # step k + 1 asked, and waits
                it[k + 1]
        stall.on_epoch_end(0, {})
    (report,) = stall.reports
    assert report.steps == n == 7
    assert report.input_wait_s == pytest.approx(0.5 * len(late))
    assert report.train_s == pytest.approx(n * 1.0 + 0.5 * len(late))


@pytest.mark.slow
def test_input_wait_through_to_tf_dataset(image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator(rescale=1 / 255, loader=SlowLoader(0.15))
    with gen.flow_from_dataframe(
        df, directory, target_size=(8, 8), batch_size=3, prefetch_batches=0
    ) as it:
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(3, activation="softmax")])  # fmt: skip
        model.compile("sgd", "categorical_crossentropy")
        stall = rk.InputStallCallback(it, verbose=0)
        model.fit(it.to_tf_dataset(), epochs=2, callbacks=[stall], verbose=0)
    assert [r.steps for r in stall.reports] == [7, 7]
    # Measured through the dataset too (batch 0 of epoch 1 was read when it was made).
    for report in stall.reports:
        assert 0 < report.input_wait_s <= report.train_s


@pytest.mark.slow
def test_batches_built_in_worker_processes_are_reported_as_not_measured(image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator(rescale=1 / 255)
    with gen.flow_from_dataframe(
        df, directory, target_size=(8, 8), batch_size=3, workers=2, use_multiprocessing=True
    ) as it:
        stall, lines, history = _fit(it, step_delay=0.0, epochs=1)
    assert stall.reports[0].input_wait_s is None
    assert "input wait not measured" in lines[0]
    assert "input_wait_s" not in history.history
    assert np.isfinite(history.history["loss"][0])


def test_hand_offs_are_recorded_only_for_a_callback(image_dir):
    directory, df = image_dir
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, target_size=(8, 8)) as it:
        it[0]
        assert it.handoffs.since(0.0) == []  # plain use keeps no per-batch log
        rk.InputStallCallback(it, verbose=0)
        it[0]
        assert len(it.handoffs.since(0.0)) == 1
