"""What the Azure (Azurite) and GCS (fake-gcs-server) test modules share.

Each backend is read through its fsspec filesystem (adlfs, gcsfs) and through obstore
(`loader="obstore"`), via a `CountingProxy` in front of the emulator, and compared with
stock Keras on the same local files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

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
