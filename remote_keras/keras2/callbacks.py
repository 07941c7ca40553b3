"""Keras 2's callbacks: input-stall reports, data-version records (`front_core.callbacks`)."""

from __future__ import annotations

from remote_keras.front_core.callbacks import DataVersionCore, EpochInputReport, InputStallCore
from remote_keras.keras2 import keras_api

__all__ = ["DataVersionCallback", "EpochInputReport", "InputStallCallback"]


class InputStallCallback(InputStallCore, keras_api.Callback):
    __doc__ = InputStallCore.__doc__


class DataVersionCallback(DataVersionCore, keras_api.Callback):
    __doc__ = DataVersionCore.__doc__
