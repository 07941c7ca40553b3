"""Keras 2's callbacks: input-stall reports, data-version records (`keras_agnostic.callbacks`)."""

from __future__ import annotations

from remote_keras.keras2 import keras_api
from remote_keras.keras_agnostic.callbacks import DataVersionCore, EpochInputReport, InputStallCore

__all__ = ["DataVersionCallback", "EpochInputReport", "InputStallCallback"]


class InputStallCallback(InputStallCore, keras_api.Callback):
    """Keras 2's `InputStallCallback`: per epoch, how long training waited for batches.

    Arguments, options and errors are those of the Keras 3 front's class of the same name.
    """


class DataVersionCallback(DataVersionCore, keras_api.Callback):
    """Keras 2's `DataVersionCallback`: writes the data versions an iterator reads.

    Arguments, options and errors are those of the Keras 3 front's class of the same name.
    """
