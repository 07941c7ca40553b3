"""Keras 2's `fit(shuffle=True)` draws and a resumed epoch's order, without Keras 2."""

from __future__ import annotations

import random

from remote_keras.keras2.call_order import KerasDraws, keras2_resumption
from remote_keras.keras_agnostic.fit_order import shuffled


def _keras2_epoch(length: int, shuffle: bool) -> list[int]:
    """What Keras 2's adapter asks for in an epoch: `len()`, then the shuffled indices."""
    order = list(range(length))
    if shuffle:
        random.shuffle(order)
    return order


def test_a_resumed_epoch_maps_each_step_to_the_uninterrupted_runs_batch():
    for shuffle in (False, True):
        random.seed(3)
        state = random.getstate()
        uninterrupted = _keras2_epoch(7, shuffle)
        for done in range(7):
            positions = keras2_resumption(4, done, 7, shuffle, state).positions
            random.setstate(state)
            asked = _keras2_epoch(7, shuffle)  # Keras draws the same order again
            trained = [positions[index] for index in asked[: 7 - done]]
            assert trained == uninterrupted[done:]
            assert sorted(positions) == list(range(7))  # reads ahead stay in the epoch


def test_an_armed_state_is_set_at_len_until_disarmed():
    draws = KerasDraws()
    random.seed(1)
    saved = random.getstate()
    random.seed(2)
    draws.arm(saved)
    draws.at_len()
    assert random.getstate() == saved
    random.random()
    draws.disarm()
    draws.at_len()
    assert random.getstate() != saved


def test_the_draw_is_told_from_the_states_seen_at_len():
    draws = KerasDraws()
    random.seed(5)
    draws.at_len()
    before = random.getstate()
    _keras2_epoch(6, shuffle=True)
    draws.at_len()  # a later `len()` (after the draw) does not hide it
    assert draws.drawn_from(6) == (before, True)
    assert random.getstate() == shuffled(6, before)[1]
    draws.mark()
    draws.at_len()
    assert draws.drawn_from(6)[1] is False  # `fit(shuffle=False)`: nothing drawn
    draws.mark()
    draws.at_len()
    random.random()  # something else drew
    assert draws.drawn_from(6) == (None, None)
