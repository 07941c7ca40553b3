"""The Keras 2 tests: they run where `tf.keras` is Keras 2 (`make test-keras2`, `.ci/test-keras2`).

Elsewhere every test here is skipped, saying so. `REMOTE_KERAS_EXPECT_KERAS2=1`
(which `.ci/test-keras2` sets) turns a run without Keras 2 into a failure, so the
Keras 2 runs cannot skip them all silently.
"""

from __future__ import annotations

import os

import pytest

import remote_keras

KERAS2 = remote_keras._front() == "keras2"
REASON = "tf.keras is not Keras 2 here: `make test-keras2` runs these (TF 2.15, and tf_keras)"


def pytest_collection_modifyitems(config, items):
    expected = os.environ.get("REMOTE_KERAS_EXPECT_KERAS2") == "1"
    if expected and not KERAS2:
        raise pytest.UsageError("REMOTE_KERAS_EXPECT_KERAS2=1 but tf.keras is not Keras 2 here")
    if KERAS2:
        return
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.skip(reason=REASON))


@pytest.fixture(scope="session")
def tfk():
    """`tf.keras` (Keras 2 in these tests)."""
    import tensorflow as tf

    return tf.keras


@pytest.fixture(scope="session")
def stock_image(tfk):
    """Keras 2's own `tf.keras.preprocessing.image`, with its `DataFrameIterator`."""
    from remote_keras.keras2 import keras_api

    return keras_api
