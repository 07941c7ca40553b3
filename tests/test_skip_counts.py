"""With `on_error="skip"`, each skipped sample is listed once per epoch, however often it was read.

A batch read twice in one epoch (read ahead and thrown away, or read by the
parent and again by Keras's worker processes) skips its unreadable samples
twice; `skipped` and the end-of-epoch warning count them once.
"""

from __future__ import annotations

import multiprocessing
import re
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
