"""`CarriedReads`: what a pass cut short at its first batch read serves the next pass, once."""

from __future__ import annotations

import pickle

from remote_keras.pipeline.carried import CarriedReads


def test_a_pass_cut_short_at_one_batch_carries_its_reads_once():
    carried = CarriedReads()
    carried.record()
    carried.put("s3://b/a.jpg", b"a")
    carried.end_pass(cut_short_at_one=True)
    carried.put("s3://b/late.jpg", b"x")  # not recording between passes
    assert carried.take("s3://b/late.jpg") is None
    assert carried.take("s3://b/a.jpg") == b"a"
    assert carried.take("s3://b/a.jpg") is None  # taken once


def test_a_pass_that_goes_on_or_ends_whole_carries_nothing():
    carried = CarriedReads()
    carried.record()
    carried.put("a", b"a")
    carried.stop_recording()  # its second batch was asked for
    carried.put("b", b"b")
    carried.end_pass(cut_short_at_one=False)
    assert carried.take("a") is None and carried.take("b") is None


def test_what_the_next_pass_leaves_is_dropped_when_it_ends():
    carried = CarriedReads()
    carried.record()
    carried.put("a", b"a")
    carried.end_pass(cut_short_at_one=True)
    carried.record()  # the next pass reads something else, and ends whole
    carried.end_pass(cut_short_at_one=False)
    assert carried.take("a") is None


def test_a_copy_in_another_process_carries_nothing():
    carried = CarriedReads()
    carried.record()
    carried.put("a", b"a")
    carried.end_pass(cut_short_at_one=True)
    copy = pickle.loads(pickle.dumps(carried))
    assert copy.take("a") is None
    assert carried.take("a") == b"a"
