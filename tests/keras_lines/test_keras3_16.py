"""Keras 3.16's `fit(shuffle=...)` order (`keras_lines.keras3_16`), its replay, and the rule.

The rule tests run `fit` on the installed Keras (3.15 in the main suite, 3.16 in the
nightly environment, `make test-nightly`), so a Keras that changes its draw fails here first.
"""

from __future__ import annotations

import random

import keras
import numpy as np
import pytest

from remote_keras.keras_lines import line_for_version
from remote_keras.keras_lines.keras3 import shuffled
from remote_keras.keras_lines.keras3_16 import (
    AskedIndices,
    EpochSeededReplay,
    epoch_seeded_order,
)

BATCHES = 7


class _Asked(keras.utils.PyDataset):
    """Records the indices each pass asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.passes: list[list[int]] = []

    def __len__(self) -> int:
        return BATCHES

    def __getitem__(self, idx: int):
        if self.passes:
            self.passes[-1].append(idx)
        return np.full((2, 3), idx, "float32"), np.zeros((2, 1), "float32")

    def on_epoch_begin(self) -> None:
        self.passes.append([])


def _fit(shuffle: bool, initial_epoch: int = 0) -> list[list[int]]:
    data = _Asked()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    random.seed(5)
    model.fit(data, epochs=initial_epoch + 3, initial_epoch=initial_epoch, shuffle=shuffle,
              verbose=0)  # fmt: skip
    return data.passes


@pytest.mark.parametrize("initial_epoch", [0, 2])
@pytest.mark.slow
def test_the_installed_keras_orders_passes_by_the_rule_this_package_replays(initial_epoch):
    passes = _fit(shuffle=True, initial_epoch=initial_epoch)
    if line_for_version(
        keras.__version__
    ).seeds_epochs:  # Keras 3.16: pass p of any fit from Random(p + 1)
        expected = [list(epoch_seeded_order(p, BATCHES)) for p in range(3)]
    else:  # Keras 3.8 to 3.15: one draw per pass from the global `random`
        state = random.Random(5).getstate()
        expected = []
        for _ in range(3):
            order, state = shuffled(BATCHES, state)
            expected.append(order)
    assert passes == expected
    assert _fit(shuffle=False) == [list(range(BATCHES))] * 3


def test_a_replay_asks_each_step_for_the_uninterrupted_runs_batch():
    # The uninterrupted run started at epoch 0; the resumed one starts at epoch 2, 3 batches
    # of it done. At each step the resumed fit asks for an index; it must read the batch the
    # uninterrupted run read at the same step.
    replay = EpochSeededReplay(origin=0, start=2)
    for epoch, done in ((2, 3), (3, 0), (4, 0)):
        uninterrupted = epoch_seeded_order(epoch - 0, BATCHES)[done:]
        asked = epoch_seeded_order(epoch - 2, BATCHES - done)
        positions = replay.positions(epoch, BATCHES, done)
        assert positions is not None
        assert [positions[i] for i in asked] == list(uninterrupted)
    assert replay.positions(1, BATCHES) is None  # before this fit
    assert EpochSeededReplay(0, 0).positions(3, BATCHES) is None  # the uninterrupted run
    assert EpochSeededReplay(0, 2, shuffle=False).positions(2, BATCHES) is None


def test_shuffle_is_told_from_the_first_indices_asked_even_a_little_out_of_order():
    shuffled_pass = list(epoch_seeded_order(1, BATCHES))
    assert AskedIndices(shuffled_pass[:2], 1, BATCHES).tell_shuffle() is True
    assert (
        AskedIndices([0, 1, 2, 3, 4, 6, 5], 1, BATCHES).tell_shuffle() is False
    )  # two worker threads
    assert AskedIndices(shuffled_pass[1::-1] + shuffled_pass[2:], 1, BATCHES).tell_shuffle() is True
    assert AskedIndices([], 1, BATCHES).tell_shuffle() is None
    read = EpochSeededReplay(0, 2, shuffle=None).told([0, 1], 2, BATCHES)
    assert read.shuffle is None and read.reading is False  # not proven: read, asked again
    assert read.positions(2, BATCHES) is None
    # Keras without its enqueuer asks from one thread, in order: 0 first proves unshuffled.
    proven = EpochSeededReplay(0, 2, shuffle=None).told([0], 2, BATCHES, workers=1)
    assert proven.shuffle is False and proven.positions(2, BATCHES) is None


def _asks_of_stalling_workers(order, workers, rng):
    """Arrival order of Keras's asks when `workers` threads take `order` from a queue.

    Each thread asks for an index after a random (heavy-tailed) stall once it took it, and
    takes the next one when its read is done. Returns `(asked, askers, trained)` at the end
    of Keras's first training step: it trained `order[0]` once that read was done.
    """
    free = [0.0] * workers
    asks, done = [], {}
    for index in order:
        thread = min(range(workers), key=free.__getitem__)
        asked = free[thread] + rng.expovariate(1.0) ** 3 * 0.2
        done[index] = free[thread] = asked + rng.expovariate(1.0) * 0.3
        asks.append((asked, index, thread))
    step_end = done[order[0]] + rng.random() * 0.5
    seen = sorted(ask for ask in asks if ask[0] <= step_end)
    return [index for _, index, _ in seen], [thread for _, _, thread in seen], 1


@pytest.mark.parametrize("fit_shuffle", [True, False])
def test_stalled_worker_threads_never_prove_the_wrong_order(fit_shuffle):
    # Under load, one of Keras's 4 worker threads can stall after taking an index while the
    # others ask for later ones: 2, 3 arrive before 6 of Random(1)'s 3, 6, 5, 2, ... The
    # closest-order reading then says unshuffled (CI's nightly run, restored at an epoch's
    # start, replayed nothing). Which thread asked and what Keras trained rule that out.
    rng = random.Random(7)
    order = list(epoch_seeded_order(0, BATCHES)) if fit_shuffle else list(range(BATCHES))
    misread = proven = 0
    for _ in range(2000):
        asked, askers, trained = _asks_of_stalling_workers(order, 4, rng)
        misread += AskedIndices(asked, 0, BATCHES).tell_shuffle() is (not fit_shuffle)
        verdict = AskedIndices(
            asked, 0, BATCHES, askers=askers, workers=4, trained=trained
        ).tell_shuffle(proven=True)
        assert verdict in (fit_shuffle, None), (asked, askers)
        proven += verdict is fit_shuffle
    assert misread > 20  # the schedules that fooled the reading alone are among them
    assert proven > 1500  # and most are proven at the first step


def test_the_asks_of_a_stalled_thread_prove_the_order():
    shuffled_pass = list(epoch_seeded_order(0, BATCHES))  # 3, 6, 5, 2, 0, 4, 1
    assert (
        AskedIndices([2, 3], 0, BATCHES).tell_shuffle() is False
    )  # read alone: closer to in order
    assert (
        AskedIndices([2, 3], 0, BATCHES, askers=[1, 2], workers=4, trained=1).tell_shuffle(
            proven=True
        )
        is True
    )
    # One thread asks 2 then 0: in order, 0 comes before 2.
    assert (
        AskedIndices([2, 0, 4], 0, BATCHES, askers=[1, 1, 1], workers=4).tell_shuffle(proven=True)
        is True
    )
    # Shuffled, 0 comes fifth: the 4 indices before it, unasked, would need 4 other threads.
    assert AskedIndices([0], 0, BATCHES, workers=4).tell_shuffle(proven=True) is False
    assert AskedIndices(shuffled_pass[:1], 0, BATCHES, workers=1).tell_shuffle(proven=True) is True
    assert AskedIndices([], 0, BATCHES, workers=4).tell_shuffle(proven=True) is None
    assert (
        AskedIndices([2], 0, BATCHES, workers=4).tell_shuffle(proven=True) is None
    )  # third or fourth: either could
