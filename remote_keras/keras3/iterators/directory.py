"""`DirectoryIterator`: Keras 3's, over a folder of class sub-folders, local or remote."""

from __future__ import annotations

from remote_keras.front_core.directory import DirectoryCore
from remote_keras.keras3.iterators.base import RemoteBatchMixin
from remote_keras.keras3.iterators.hooks import KerasHooks
from remote_keras.keras3.keras_src import legacy_image


class DirectoryIterator(
    KerasHooks, DirectoryCore, RemoteBatchMixin, legacy_image.DirectoryIterator
):
    __doc__ = DirectoryCore.__doc__
