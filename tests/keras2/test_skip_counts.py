"""On Keras 2: `fit` with workers lists each sample skipped with `on_error="skip"` once per epoch.

Keras 2's `fit(workers=..., use_multiprocessing=...)` reads through an enqueuer:
the parent reads batch 0 (and builds the next ones ahead) before worker
processes read the epoch again, and an enqueuer that ends an epoch before `fit`
does reads the next epoch ahead, which `fit` throws away (processes) or never
trains (after the last epoch). None of those reads may add to `skipped` or to
the end-of-epoch warning's count.
"""

from __future__ import annotations

import re
import time
import warnings
from collections import Counter

import pandas as pd
import pytest

import remote_keras as rk
from tests.helpers import noise_png

BAD = (5, 13)  # with seed=1, both in batches 2-4 of epoch 0: not the batch Keras reads first
EPOCHS = 3


@pytest.fixture(scope="module")
def two_corrupt(tmp_path_factory):
    """20 local PNGs, 2 of them not images."""
    root = tmp_path_factory.mktemp("k2-skips")
    names = [f"{'ab'[i % 2]}/{i:02d}.png" for i in range(20)]
    for i, name in enumerate(names):
        path = root / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"these bytes are no image" if i in BAD else noise_png(i))
    return str(root), pd.DataFrame({"filename": names, "class": [n[0] for n in names]})


def _callbacks(tfk, it, enqueuer_first: bool) -> list:
    class EnqueuerEndsFirst(tfk.callbacks.Callback):
        """Holds each epoch's end until the enqueuer has ended the epoch and read ahead."""

        def on_epoch_end(self, epoch, logs=None):
            deadline = time.monotonic() + 10
            while it.epoch <= epoch and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.5)  # the enqueuer reads the next epoch's 5 batches meanwhile

    return [EnqueuerEndsFirst()] if enqueuer_first else []


@pytest.mark.slow
@pytest.mark.parametrize(
    "fit_kwargs, enqueuer_first",
    [
        ({"workers": 4, "use_multiprocessing": True}, False),
        ({"workers": 4, "use_multiprocessing": True}, True),
        ({"workers": 2}, True),
    ],
    ids=["processes", "processes-read-ahead", "threads-read-ahead"],
)
def test_fit_with_workers_lists_each_skip_once_per_epoch(
    tfk, two_corrupt, fit_kwargs, enqueuer_first
):
    root, df = two_corrupt
    gen = rk.ImageDataGenerator(on_error="skip")
    model = tfk.Sequential([tfk.layers.Flatten(input_shape=(6, 6, 3)), tfk.layers.Dense(2)])
    model.compile("sgd", "mse")
    with gen.flow_from_dataframe(df, root, target_size=(6, 6), batch_size=4, seed=1) as it:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            callbacks = _callbacks(tfk, it, enqueuer_first)
            model.fit(it, epochs=EPOCHS, verbose=0, callbacks=callbacks, **fit_kwargs)
        time.sleep(0.5)  # what worker processes still read ahead has reached the spool
        skipped = Counter(url.rsplit("/", 1)[-1] for url, _ in it.skipped)
        assert skipped == {"05.png": EPOCHS, "13.png": EPOCHS}
        assert it.stats.skipped == 2 * EPOCHS
    summaries = [re.search(r"(\d+) sample\(s\) skipped so far", str(w.message)) for w in caught]
    assert [int(m.group(1)) for m in summaries if m] == [2, 4, 6]
