"""Keras 3.8 to 3.15's `fit(shuffle=True)` order from Python's `random` (`keras_lines.keras3`).

The rule itself is checked against the installed Keras's `fit` in `test_keras3_16.py`
(`test_the_installed_keras_orders_passes_by_the_rule_this_package_replays`, both lines).
"""

from __future__ import annotations

import json
import random

from remote_keras.keras_lines import keras3


def _keras_draw(count: int) -> list[int]:
    """What Keras 3.8-3.15's adapter does at a pass's start (shuffle from the global random)."""
    order = list(range(count))
    random.shuffle(order)
    return order


def test_shuffled_predicts_the_draw_and_the_state_after_it():
    random.seed(7)
    state = random.getstate()
    order, after = keras3.shuffled(9, state)
    assert _keras_draw(9) == order
    assert random.getstate() == after


def test_the_state_survives_json_and_is_set_again():
    random.seed(11)
    saved = json.loads(json.dumps(keras3.json_random_state(keras3.random_state())))
    first = _keras_draw(6)
    random.seed(99)
    keras3.set_random_state(saved)  # the JSON form, as a backup holds it
    assert _keras_draw(6) == first
    keras3.set_random_state(keras3.python_random_state(saved))  # or the tuple
    assert _keras_draw(6) == first


def test_advance_random_skips_whole_epochs_draws():
    random.seed(3)
    for _ in range(3):
        _keras_draw(5)
    expected = random.getstate()
    random.seed(3)
    keras3.advance_random(5, 3)
    assert random.getstate() == expected


def test_a_resumed_epoch_reads_what_the_uninterrupted_run_read_at_each_step():
    random.seed(5)
    state = random.getstate()
    uninterrupted = keras3.shuffled(8, state)[0]
    for done in range(8):
        positions = keras3.fit_resumption(2, done, 8, True, state).positions
        random.setstate(state)
        asked = _keras_draw(8 - done)  # the resumed fit draws from the same state
        assert [positions[i] for i in asked] == uninterrupted[done:]
    assert keras3.fit_resumption(2, 3, 8, False, None).positions == tuple(range(3, 8))


def test_fit_order_tells_shuffle_from_the_draw():
    random.seed(1)
    order = keras3.FitOrder(0, random.getstate())
    _keras_draw(4)
    order.observe(0, 4, 4)
    assert order.shuffle is True
    random.seed(1)
    unshuffled = keras3.FitOrder(0, random.getstate())
    unshuffled.observe(0, 4, 4)
    assert unshuffled.shuffle is False
