"""Epoch boundaries from the calls Keras makes in public (`keras_lines.epoch_clock`).

An `on_epoch_end()` after `on_epoch_begin()` ends the epoch; one outside a pass
is held until the same thread reads a batch, and dropped by `on_epoch_begin()`
(Keras's `EpochIterator.reset()`). Batches read outside a pass are handed out
again, once, by the pass.
"""

from __future__ import annotations

import random
import threading

import remote_keras as rk
from remote_keras.keras_lines import keras3_16
from remote_keras.keras_lines.epoch_clock import KEPT_BATCHES, EpochClock, PredictedOrder
from tests.helpers import assert_same_batch


def _iterator(directory, df):
    return rk.ImageDataGenerator().flow_from_dataframe(
        df, directory, target_size=(4, 4), batch_size=4, seed=3
    )


def test_an_end_inside_a_pass_ends_the_epoch_and_one_outside_is_held():
    clock = EpochClock()
    assert clock.end(4) == 0 and clock.held_here() == 1  # held: no pass began
    clock.begin()  # Keras begins its pass: the end was a reset
    assert clock.held_here() == 0 and clock.epoch == 0
    assert clock.end(4) == 1  # the end of the pass
    assert not clock.cut_short  # (no batch handed out in this process: worker processes)


def test_a_pass_that_handed_out_only_some_batches_is_cut_short():
    # Keras's JAX `fit` builds the model from one batch of a pass it abandons.
    clock = EpochClock()
    clock.begin()
    clock.handed = 1
    assert clock.end(4) == 1 and clock.cut_short
    clock.advance(1)
    clock.begin()
    clock.handed = 4
    assert clock.end(4) == 1 and not clock.cut_short


def test_a_held_end_is_not_applied_by_another_thread():
    clock = EpochClock()
    clock.end(4)
    seen: list[int] = []
    worker = threading.Thread(target=lambda: seen.append(clock.held_here()))
    worker.start()
    worker.join()
    assert seen == [0] and clock.held_here() == 1


def test_only_the_latest_batches_read_outside_a_pass_are_kept_and_a_pass_takes_them_once():
    clock = EpochClock()
    for position in range(KEPT_BATCHES + 1):
        clock.keep((0, position), f"batch {position}")
    assert sorted(clock.kept) == [(0, p) for p in range(1, KEPT_BATCHES + 1)]
    assert clock.take((0, 1)) == "batch 1"  # outside a pass: kept
    clock.begin()
    assert clock.take((0, 1)) == "batch 1"
    assert clock.take((0, 1)) is None  # handed out once
    clock.keep((0, 0), "read inside the pass")
    assert (0, 0) not in clock.kept


def test_reads_by_others_while_an_end_is_held_are_not_kept_and_push_nothing_out():
    # Keras starts its workers after its reset's `on_epoch_end()` and before
    # `on_epoch_begin()`: their reads go to Keras's queue, not to the pass again.
    clock = EpochClock()
    clock.keep((0, 0), "spec 0")
    clock.keep((0, 1), "spec 1")
    clock.end(4)  # Keras's reset, in this thread
    worker = threading.Thread(target=lambda: [clock.keep((0, p), p) for p in (2, 3)])
    worker.start()
    worker.join()
    assert clock.kept == {(0, 0): "spec 0", (0, 1): "spec 1"}
    clock.keep((0, 2), "this thread's own read")  # the holder's reads are kept as before
    assert sorted(clock.kept) == [(0, 1), (0, 2)]
    # In a forked worker process, the end copied from the parent carries the parent's pid.
    pid, thread, ends = clock.held or (0, 0, 0)
    clock.held = (pid + 1, thread, ends)
    clock.keep((0, 3), "a worker process's read")
    assert sorted(clock.kept) == [(0, 1), (0, 2)]


def test_indices_keras_workers_ask_before_the_pass_begins_tell_its_order():
    # Keras 3.16's workers ask for the first indices of `Random(1)`'s order (3, 6, 5, 2, 0, 4,
    # 1 for 7 batches) between its reset and `on_epoch_begin()`; seen only from the pass on,
    # 0, 4, 1 fit the unshuffled order better, and a resumed `fit(shuffle=True)` replayed nothing.
    clock = EpochClock()
    clock.note_asked(0)  # TensorFlow's spec batches, before the reset: not the pass's
    clock.note_asked(1)
    clock.end(7)  # Keras's reset, held by this thread
    worker = threading.Thread(target=lambda: [clock.note_asked(i) for i in (3, 6, 5, 2)])
    worker.start()
    worker.join()
    clock.begin()
    for index in (0, 4, 1):
        clock.note_asked(index)
    assert clock.asked == [3, 6, 5, 2, 0, 4, 1]
    assert keras3_16.AskedIndices(clock.asked, clock.fit_pass, 7).tell_shuffle() is True
    assert (
        keras3_16.AskedIndices(clock.asked[4:], clock.fit_pass, 7).tell_shuffle() is False
    )  # the pass's own
    clock.end(7)
    clock.advance(1)
    clock.begin()
    assert clock.asked == []  # nothing carried into the next pass


def test_spec_batches_stay_kept_when_keras_workers_read_ahead_of_the_pass(image_dir):
    directory, df = image_dir
    with _iterator(directory, df) as it:
        assert len(it) >= 4
        spec = [it[0], it[1]]
        it.on_epoch_end()  # Keras's reset
        early = threading.Thread(target=lambda: [it[2], it[3]])  # its workers, started first
        early.start()
        early.join()
        it.on_epoch_begin()
        assert it[0] is spec[0] and it[1] is spec[1]
        assert it.epoch == 0


def test_keras_reset_ends_no_epoch_and_the_spec_batches_are_not_read_twice(image_dir):
    # What TensorFlow's `fit` does: read batches 0 and 1, `on_epoch_end()` (its reset), then
    # `on_epoch_begin()` and the epoch's batches.
    directory, df = image_dir
    with _iterator(directory, df) as it, _iterator(directory, df) as reference:
        expected = [reference[i] for i in range(len(reference))]
        spec = [it[0], it[1]]
        it.on_epoch_end()
        it.on_epoch_begin()
        got = [it[i] for i in range(len(it))]
        assert got[0] is spec[0] and got[1] is spec[1]  # handed out again, not read again
        for a, b in zip(expected, got):
            assert_same_batch(a, b)
        assert it.stats.images == it.n
        it.on_epoch_end()  # the end of the pass
        assert it.epoch == 1


def test_a_loop_of_your_own_moves_to_the_next_epoch_at_its_next_read(image_dir):
    directory, df = image_dir
    with _iterator(directory, df) as it, _iterator(directory, df) as reference:
        reference.set_epoch(1)
        for i in range(len(it)):
            it[i]
        it.on_epoch_end()
        assert it.epoch == 1  # counted in this thread already
        assert_same_batch(it[0], reference[0])
        it.on_epoch_end()
        it.on_epoch_end()
        reference.set_epoch(3)
        assert_same_batch(it[1], reference[1])
        assert it.state_dict()["epoch"] == 3


def test_the_clock_proves_fit_shuffle_from_which_thread_asked_and_what_was_trained():
    # Two of Keras 3.16's 4 worker threads ask for 2 and 3 of Random(1)'s 3, 6, 5, 2, ...; the
    # threads holding 6 and 5 stall. Both stay alive, as Keras's pool threads do in a pass.
    clock = EpochClock()
    clock.end(7)
    clock.begin(keras_workers=4)
    release = threading.Event()

    def worker(index: int, asked: threading.Event) -> None:
        clock.note_asked(index)
        asked.set()
        release.wait(10)

    threads = []
    for index in (2, 3):
        asked = threading.Event()
        threads.append(threading.Thread(target=worker, args=(index, asked)))
        threads[-1].start()
        asked.wait(10)
    try:
        assert len(set(clock.askers)) == 2
        assert clock.read_shuffle(0, 7) is False  # read alone: closer to in order
        assert clock.read_shuffle(0, 7, proven=True) is None  # either order could
        # Keras trained one batch: in order it would have been 0's, never asked.
        assert clock.read_shuffle(0, 7, trained=1, proven=True) is True
    finally:
        release.set()
        for thread in threads:
            thread.join()


def test_a_predicted_order_is_followed_only_once_two_asks_matched_it():
    random.seed(11)
    prediction = PredictedOrder(8)
    drawn = list(range(8))
    random.shuffle(drawn)  # what Keras 3.8-3.15 draws after `on_epoch_begin()`
    assert prediction.order == drawn
    prediction.follow(drawn[0])
    assert prediction.after(drawn[0]) is None  # one ask tells no order
    prediction.follow(drawn[1])
    assert prediction.after(drawn[1]) == drawn[2:]
    prediction.follow((drawn[2] + 1) % 8)  # an ask off the order ends it for good
    prediction.follow(drawn[3])
    assert prediction.after(drawn[3]) is None
