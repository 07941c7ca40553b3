"""Keras 3's callbacks: input-stall reports, data-version records (`front_core.callbacks`)."""

from __future__ import annotations

import keras

from remote_keras.front_core.callbacks import DataVersionCore, EpochInputReport, InputStallCore

__all__ = ["DataVersionCallback", "EpochInputReport", "InputStallCallback"]


class InputStallCallback(InputStallCore, keras.callbacks.Callback):
    __doc__ = InputStallCore.__doc__


class DataVersionCallback(DataVersionCore, keras.callbacks.Callback):
    __doc__ = DataVersionCore.__doc__
