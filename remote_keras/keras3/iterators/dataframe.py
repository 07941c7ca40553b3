"""`DataFrameIterator`: Keras 3's, over images named in a dataframe, local or remote."""

from __future__ import annotations

from remote_keras.front_core.dataframe import DataFrameCore
from remote_keras.keras3.iterators.base import RemoteBatchMixin
from remote_keras.keras3.iterators.hooks import KerasHooks
from remote_keras.keras3.keras_src import legacy_image


class DataFrameIterator(
    KerasHooks, DataFrameCore, RemoteBatchMixin, legacy_image.DataFrameIterator
):
    __doc__ = DataFrameCore.__doc__
