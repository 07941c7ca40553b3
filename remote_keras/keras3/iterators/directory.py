"""`DirectoryIterator`: Keras 3's, over a folder of class sub-folders, local or remote."""

from __future__ import annotations

from remote_keras.keras3.iterators.base import RemoteBatchMixin
from remote_keras.keras3.keras_src import legacy_image
from remote_keras.keras_agnostic.directory import DirectoryCore


class DirectoryIterator(DirectoryCore, RemoteBatchMixin, legacy_image.DirectoryIterator):
    """Iterator over a folder of class sub-folders, local or remote.

    Takes every argument of Keras's `DirectoryIterator`, with the same
    defaults, plus the keyword arguments of `DataFrameIterator`. A remote
    `directory` (`"s3://bucket/train"`) is listed once: one request when it holds at most
    1,000 objects, else its class folders in parallel
    (`remote_keras.storage.listing.parallel_listing`); the training and validation subsets of one
    generator share the listing; classes, file order and `subset` splits are as for a local
    folder.
    """
