"""What the Azure (Azurite) and GCS (fake-gcs-server) test modules share.

Each backend is read through its fsspec filesystem (adlfs, gcsfs) and through obstore
(`loader="obstore"`), via a `CountingProxy` in front of the emulator, and compared with
stock Keras on the same local files.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from keras.src.legacy.preprocessing import image as keras_image

LOADERS = ("fsspec", "obstore")


def emulator_or_skip(find: Callable[[], str], what: str) -> str:
    """The emulator's binary; skips saying why when it is missing, but fails in CI."""
    try:
        return find()
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{what} is missing in CI, where .ci/run installs it: {exc}")
        pytest.skip(f"{what} is not installed here: {exc}")


def stock_batches(local: str, df: Any = None, **kwargs: Any) -> tuple[Any, list[Any]]:
    """Stock Keras's iterator over the local folder (or dataframe) and all its batches."""
    gen = keras_image.ImageDataGenerator()
    it = (
        gen.flow_from_dataframe(df, local, **kwargs)
        if df is not None
        else gen.flow_from_directory(local, **kwargs)
    )
    return it, [it[i] for i in range(len(it))]


def fit_record(iterator: Any, epochs: int) -> list[tuple[str, tuple[int, ...]]]:
    """What `model.fit` trained on, step by step: a digest of `x` and the labels `y`."""
    import keras

    class RecordingModel(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.flatten = keras.layers.Flatten()
            self.dense = keras.layers.Dense(3)
            self.seen: list[tuple[str, tuple[int, ...]]] = []

        def call(self, x: Any) -> Any:
            return self.dense(self.flatten(x))

        def train_step(self, data: Any) -> Any:
            x, y = np.asarray(data[0]), np.asarray(data[1])
            labels = tuple(int(v) for v in y.argmax(axis=1))
            self.seen.append((hashlib.sha256(x.tobytes()).hexdigest(), labels))
            return super().train_step(data)

    model = RecordingModel()
    model.compile("sgd", "categorical_crossentropy", run_eagerly=True)
    model.fit(iterator, epochs=epochs, shuffle=False, verbose=0)
    return model.seen
