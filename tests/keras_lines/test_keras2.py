"""Keras 2.15 and tf_keras (`keras_lines.keras2`), without Keras 2.

Its paired epoch ends (enqueuer thread + fit thread), told apart by thread alone; its
`fit(shuffle=True)` draws and a resumed epoch's order; the optimizer's step count.
"""

from __future__ import annotations

import pickle
import random
import threading

from remote_keras.keras_lines.keras2 import (
    ENQUEUED_AHEAD,
    PEEKED,
    Keras2Clock,
    KerasDraws,
    keras2_resumption,
    optimizer_steps,
)
from remote_keras.keras_lines.keras3 import shuffled


def _ends_epoch(clock: Keras2Clock) -> bool:
    return clock.end(4) == 1


def _call_from_thread(ends: Keras2Clock, calls: int = 1) -> list[bool]:
    results: list[bool] = []
    thread = threading.Thread(
        target=lambda: results.extend(_ends_epoch(ends) for _ in range(calls))
    )
    thread.start()
    thread.join()
    return results


class _Enqueuer:
    """A running thread that calls `ends_epoch()` when told to, as Keras 2's enqueuer does."""

    def __init__(self, ends: Keras2Clock) -> None:
        self.ends, self.results = ends, []
        self.go, self.done, self.stop = threading.Event(), threading.Event(), False
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        while True:
            self.go.wait()
            self.go.clear()
            if self.stop:
                return
            self.results.append(_ends_epoch(self.ends))
            self.done.set()

    def epoch_end(self) -> bool:
        self.done.clear()
        self.go.set()
        self.done.wait()
        return self.results[-1]

    def close(self) -> None:
        self.stop = True
        self.go.set()
        self.thread.join()


def test_calls_from_one_thread_each_end_an_epoch():
    ends = Keras2Clock()
    assert [_ends_epoch(ends) for _ in range(3)] == [True, True, True]
    assert not ends.paired
    assert ends.keep_limit == PEEKED  # only Keras 2's read of batch 0 is kept


def test_an_enqueuer_and_fit_end_one_epoch_per_pair_in_either_order():
    ends = Keras2Clock()
    enqueuer = _Enqueuer(ends)
    try:
        assert enqueuer.epoch_end() is True  # the enqueuer first, fit after
        assert _ends_epoch(ends) is False
        assert ends.paired
        assert _ends_epoch(ends) is True  # fit first, the enqueuer after
        assert enqueuer.epoch_end() is False
    finally:
        enqueuer.close()


def test_a_thread_started_after_an_end_does_not_complete_its_pair():
    # fit's last end had no partner (its enqueuer was stopped first); the next fit's enqueuer
    # starts a pair of its own.
    ends = Keras2Clock()
    assert _ends_epoch(ends) is True
    assert _call_from_thread(ends) == [True]
    assert _ends_epoch(ends) is False  # fit's call completes that enqueuer's pair


def test_pickled_copies_keep_what_was_learnt_but_no_threads():
    ends = Keras2Clock()
    enqueuer = _Enqueuer(ends)
    try:
        enqueuer.epoch_end()
        _ends_epoch(ends)
    finally:
        enqueuer.close()
    copy = pickle.loads(pickle.dumps(ends))
    assert copy.paired
    assert _ends_epoch(copy) is True
    assert copy.keep_limit == ENQUEUED_AHEAD  # paired: an enqueuer reads the next epoch ahead


def test_an_epoch_an_enqueuer_began_may_have_been_read_ahead_of_fit():
    # Its skips are listed once the epoch ends: the enqueuer may have read batches `fit` never
    # trains on (after the last epoch).
    ends = Keras2Clock()
    assert _ends_epoch(ends) is True and not ends.read_ahead  # fit's own end
    enqueuer = _Enqueuer(ends)
    try:
        assert enqueuer.epoch_end() is True and ends.read_ahead  # the enqueuer's, first
        assert _ends_epoch(ends) is False and ends.read_ahead  # fit's completes the pair
        assert pickle.loads(pickle.dumps(ends)).read_ahead
        assert _ends_epoch(ends) is True and not ends.read_ahead  # fit's, before the enqueuer
    finally:
        enqueuer.close()


# ------------------------------------------------------------ fit(shuffle=True)'s draws


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


def test_the_optimizer_steps_are_read_from_its_iterations():
    class Iterations:
        def numpy(self):
            return 12  # a NumPy integer from a variable, in Keras

    class Optimizer:
        iterations = Iterations()

    class Model:
        optimizer = Optimizer()

    assert optimizer_steps(Model()) == 12
    assert optimizer_steps(object()) is None  # no optimizer: no count
