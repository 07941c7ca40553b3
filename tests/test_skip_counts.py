"""With `on_error="skip"`, each skipped sample is listed once per epoch, however often it was read.

A batch read twice in one epoch (read ahead and thrown away, or read by the
parent and again by Keras's worker processes) skips its unreadable samples
twice; `skipped` and the end-of-epoch warning count them once.
"""

from __future__ import annotations

import inspect
import multiprocessing
import re
import subprocess
import sys
import warnings
from collections import Counter

import keras
import pandas as pd
import pytest

import remote_keras as rk
from remote_keras.pipeline.skips import SkipLog
from tests.helpers import noise_png

BAD = (5, 13)  # with seed=1, both in batches 2-4 of epoch 0
EPOCHS = 3


def _skip_again_in_a_child(log: SkipLog) -> None:
    log.add("s3://b/5.png", "ImageDecodeError: again", epoch=0, slot=5)
    log.add("s3://b/5.png", "ImageDecodeError: next epoch", epoch=1, slot=9)


def test_a_slot_skipped_again_in_its_epoch_is_listed_once_whichever_process_skipped_it():
    log = SkipLog()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log.add("s3://b/5.png", "ImageDecodeError: first", epoch=0, slot=5)
        child = multiprocessing.get_context("fork").Process(
            target=_skip_again_in_a_child, args=(log,)
        )
        child.start()
        child.join()
        log.add("s3://b/5.png", "ImageDecodeError: unplaced", epoch=0)  # no slot: never merged
    assert child.exitcode == 0
    assert [reason for _, reason in log.records()] == [
        "ImageDecodeError: first",
        "ImageDecodeError: next epoch",
        "ImageDecodeError: unplaced",
    ]
    assert len(log.records(before=1)) == 2  # epoch 0's only


@pytest.fixture(scope="module")
def two_corrupt(tmp_path_factory):
    """20 local PNGs, 2 of them not images."""
    root = tmp_path_factory.mktemp("skips")
    names = [f"{'ab'[i % 2]}/{i:02d}.png" for i in range(20)]
    for i, name in enumerate(names):
        path = root / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"these bytes are no image" if i in BAD else noise_png(i))
    return str(root), pd.DataFrame({"filename": names, "class": [n[0] for n in names]})


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers",
    [{"workers": 2, "use_multiprocessing": True}, {"workers": 2}],
    ids=["processes", "threads"],
)
def test_fit_with_workers_lists_each_skip_once_per_epoch(two_corrupt, workers):
    root, df = two_corrupt
    gen = rk.ImageDataGenerator(on_error="skip")
    model = keras.Sequential(
        [keras.Input((6, 6, 3)), keras.layers.Flatten(), keras.layers.Dense(2)]
    )
    model.compile("sgd", "mse")
    kwargs = dict(target_size=(6, 6), batch_size=4, seed=1, **workers)
    with gen.flow_from_dataframe(df, root, **kwargs) as it:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # A look at epoch 0's batches 2-4 before `fit`: TensorFlow's spec batches (0 and 1)
            # push them out of those kept for the pass, whose workers read them again.
            looked = [it[i] for i in range(2, len(it))]
            model.fit(it, epochs=EPOCHS, verbose=0)
        skipped = Counter(url.rsplit("/", 1)[-1] for url, _ in it.skipped)
        assert skipped == {"05.png": EPOCHS, "13.png": EPOCHS}
        assert it.stats.skipped == 2 * EPOCHS
    assert sum(len(batch[0]) for batch in looked) == 10  # 12 samples, 2 skipped
    summaries = [re.search(r"(\d+) sample\(s\) skipped so far", str(w.message)) for w in caught]
    assert [int(m.group(1)) for m in summaries if m] == [2, 4, 6]


def _skip_warnings(caught) -> list[tuple[str, int, str]]:
    """`(file, line, kind)` of the skip warnings caught: `first` of an epoch, or `N so far`."""
    found = []
    for w in caught:
        text = str(w.message)
        if text.startswith("Skipped an unreadable sample"):
            found.append((w.filename, w.lineno, "first"))
        elif "skipped so far" in text:
            found.append((w.filename, w.lineno, text.split(" sample(s)")[0] + " so far"))
    return found


def test_skip_warnings_name_the_line_that_asked_for_the_batch(two_corrupt):
    """Not `concurrent/futures/thread.py`, where the batch was built (nor remote_keras)."""
    root, df = two_corrupt
    gen = rk.ImageDataGenerator(on_error="skip")
    kwargs = dict(target_size=(6, 6), batch_size=4, shuffle=False)  # 05 and 13: batches 1, 3
    with gen.flow_from_dataframe(df, root, **kwargs) as it:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            asked = inspect.currentframe().f_lineno + 1
            batches = [it[i] for i in range(len(it))]  # built ahead, on the iterator's threads
            ended = inspect.currentframe().f_lineno + 1
            it.on_epoch_end()  # the summary (a loop of one's own hears it at once)
            it[0]
        assert sorted(url.rsplit("/", 1)[-1] for url, _ in it.skipped) == ["05.png", "13.png"]
    assert sum(len(batch[0]) for batch in batches) == 18
    # One warning at the epoch's first skip, one summary where the epoch ended.
    assert _skip_warnings(caught) == [(__file__, asked, "first"), (__file__, ended, "2 so far")]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_skip_warnings_in_fit_name_the_fit_call(two_corrupt, workers):
    """TensorFlow's thread (and Keras's `workers` threads) ask for the batches: the warnings
    name the user's `fit` line, once per epoch and a summary at each epoch's end."""
    root, df = two_corrupt
    gen = rk.ImageDataGenerator(on_error="skip")
    model = keras.Sequential(
        [keras.Input((6, 6, 3)), keras.layers.Flatten(), keras.layers.Dense(2)]
    )
    model.compile("sgd", "mse")
    kwargs = dict(target_size=(6, 6), batch_size=4, seed=1, workers=workers)
    with gen.flow_from_dataframe(df, root, **kwargs) as it:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line = inspect.currentframe().f_lineno + 1
            model.fit(it, epochs=2, verbose=0)
        skipped = Counter(url.rsplit("/", 1)[-1] for url, _ in it.skipped)
    assert skipped == {"05.png": 2, "13.png": 2}
    found = _skip_warnings(caught)
    assert {where[:2] for where in found} == {(__file__, line)}
    kinds = [kind for _, _, kind in found]
    assert kinds.count("first") == 2  # one per epoch
    # Each epoch's end, after its first skip. (Keras's workers may read a batch with a skip
    # before Keras resets the iterator for the first epoch: a summary of 1 at that reset.)
    assert [kind for kind in kinds if kind != "1 so far"] == [
        "first",
        "2 so far",
        "first",
        "4 so far",
    ]


def test_a_python_c_scripts_line_is_named_though_its_source_is_not_there():
    """`python -c`'s `__main__` has a loader that raises when asked for the source (the warning
    stopped `fit` with an `ImportError` when it was asked to show the line)."""
    code = "from remote_keras.pipeline.skips import warn_at_user_line\nwarn_at_user_line('gone')\n"
    result = subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "<string>:2: UserWarning: gone" in result.stderr
