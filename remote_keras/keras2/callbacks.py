"""Keras 2's callbacks: input-stall reports, data-version records (`front_core.callbacks`)."""

from __future__ import annotations

from remote_keras.front_core.callbacks import DataVersionCore, EpochInputReport, InputStallCore
from remote_keras.keras2 import keras_api

__all__ = ["DataVersionCallback", "EpochInputReport", "InputStallCallback"]


class InputStallCallback(InputStallCore, keras_api.Callback):
    """Keras 2's `InputStallCallback`: per epoch, how long training waited for batches.

    Arguments, options and errors are those of the Keras 3 front's class of the same name.
    """


class DataVersionCallback(DataVersionCore, keras_api.Callback):
    """Keras 2's `DataVersionCallback`: writes the data versions an iterator reads.

    Arguments, options and errors are those of the Keras 3 front's class of the same name.
    """
