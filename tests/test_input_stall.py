"""`InputStallCallback`: per-epoch input wait, measured as training sees it."""

from __future__ import annotations

import time

import keras
import numpy as np
import pytest

import remote_keras as rk


class SlowLoader:
    """Local reads that take `delay` seconds each (an overloaded store)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __call__(self, path: str) -> bytes:
        time.sleep(self.delay)
        with open(path, "rb") as f:
            return f.read()


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
    # Epoch 0 reuses batches 0 and 1, which TensorFlow read before it to infer the tensor spec.
    for report, fetched in zip(stall.reports, (5, 7)):
        assert report.steps == len(it) == 7
        # Batches at >= `delay` each, fetched one batch at a time by 1 worker, or 4 at once;
        # half of that at least shows as waiting (TensorFlow's own prefetch overlaps some of it
        # with training steps, more of it the slower the steps run).
        floor = fetched * delay / workers * 0.5
        assert report.input_wait_s >= floor
        # The share itself depends on how fast the eager steps run on a loaded machine.
        assert report.wait_fraction == pytest.approx(report.input_wait_s / report.train_s)
        assert report.input_wait_s <= report.train_s
        images = 3 * fetched
        assert report.loader.images == images and report.loader.requests == images
    assert history.history["input_wait_fraction"] == [r.wait_fraction for r in stall.reports]
    assert lines[0].startswith("Epoch 1: waited ") and "15 images" in lines[0]


def test_a_busy_model_fed_in_time_shows_little_input_wait(image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator(rescale=1 / 255)
    with gen.flow_from_dataframe(df, directory, target_size=(8, 8), batch_size=3) as it:
        stall, _, _ = _fit(it, step_delay=0.1)
    second = stall.reports[1]  # the first epoch includes the cold start
    assert second.steps == 7
    assert second.train_s >= 7 * 0.1
    assert second.wait_fraction < 0.2


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
    # Batch 0 of epoch 1 was read when the dataset was made, so epoch 1 waits for 6.
    assert stall.reports[0].input_wait_s >= 6 * 0.15 * 0.8
    assert stall.reports[1].input_wait_s >= 7 * 0.15 * 0.8


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
