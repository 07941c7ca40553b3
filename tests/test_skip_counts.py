"""With `on_error="skip"`, each skipped sample is listed once per epoch, however often it was read.

A batch read twice in one epoch (read ahead and thrown away, or read by the
parent and again by Keras's worker processes) skips its unreadable samples
twice; `skipped` and the end-of-epoch warning count them once.
"""

from __future__ import annotations

import inspect
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import warnings
from collections import Counter

import keras
import pandas as pd
import pytest

import remote_keras as rk
from remote_keras.pipeline import skips
from remote_keras.pipeline.reader import BatchReader
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


def test_skip_warnings_name_next_and_batch_reader_calls(two_corrupt):
    """`next(it)`, `BatchReader.batch` and a loop over `epoch_batches` are named too."""
    root, df = two_corrupt
    gen = rk.ImageDataGenerator(on_error="skip")
    kwargs = dict(target_size=(6, 6), batch_size=4, shuffle=False)  # 05 and 13: batches 1, 3
    paths = [os.path.join(root, name) for name in df["filename"]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gen.flow_from_dataframe(df, root, **kwargs) as it:
            nexts = inspect.currentframe().f_lineno + 1
            batches = [next(it), next(it)]  # 05's batch (4 read ahead: none of epoch 1's skips)
        with BatchReader(paths, batch_size=4, shuffle=False, on_error="skip") as reader:
            read = inspect.currentframe().f_lineno + 1
            reader.batch(0, 1)
            looped = inspect.currentframe().f_lineno + 1
            for _ in reader.epoch_batches(1):
                pass
    assert [len(batch[0]) for batch in batches] == [4, 3]
    assert _skip_warnings(caught) == [
        (__file__, nexts, "first"),
        (__file__, read, "first"),
        (__file__, looped, "first"),
    ]


def test_warn_names_the_counted_line_in_other_threads():
    """No frame of another thread is looked at: there, `stacklevel` is counted on any Python."""

    lines = []

    def public():
        skips.warn("counted", stacklevel=2)

    def in_a_thread():
        lines.append(inspect.currentframe().f_lineno + 1)
        public()  # the caller of `public`: stacklevel 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread = threading.Thread(target=in_a_thread)
        thread.start()
        thread.join()
    assert [(w.filename, w.lineno, str(w.message)) for w in caught] == [
        (__file__, lines[0], "counted")
    ]


def test_library_dirs_import_nothing():
    code = (
        "import sys\n"
        "from remote_keras.pipeline import skips\n"
        "before = set(sys.modules)\n"
        "dirs = skips.library_dirs()\n"
        "assert set(sys.modules) == before, set(sys.modules) - before\n"
        "import keras, os\n"
        "assert os.path.join(os.path.dirname(keras.__file__), '') in dirs, dirs\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_skip_warnings_in_fit_name_the_fit_call(two_corrupt, workers):
    """Once per epoch and a summary at each epoch's end, never at a line of remote_keras.

    Under `fit` the iterator's caller is Keras: its line is named, except on Python 3.12+ in
    the main thread (the summaries), which names the `fit` line. The first skip of an epoch
    is warned on TensorFlow's thread or Keras's `workers`' (or on the main thread, if its
    batch was read ahead): no frame of the test's there."""
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
    ours = os.path.join(os.path.dirname(rk.__file__), "")
    keras_dir = os.path.join(os.path.dirname(keras.__file__), "")
    for filename, lineno, kind in found:
        assert not filename.startswith(ours), found
        if sys.version_info < (3, 12):
            assert filename.startswith(keras_dir), found  # Keras's call of the iterator
        elif kind != "first":
            assert (filename, lineno) == (__file__, line), found
        else:
            assert (filename, lineno) == (__file__, line) or filename.startswith(keras_dir), found
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
    code = "from remote_keras.pipeline.skips import warn\nwarn('gone', stacklevel=1)\n"
    result = subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "<string>:2: UserWarning: gone" in result.stderr
