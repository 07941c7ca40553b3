"""`ImageDataGenerator`: Keras 3's, with `flow_from_*` building remote-aware iterators."""

from __future__ import annotations

from remote_keras.front_core.generator import GeneratorCore
from remote_keras.keras3.iterators import DataFrameIterator, DirectoryIterator
from remote_keras.keras3.keras_src import legacy_image


class ImageDataGenerator(GeneratorCore, legacy_image.ImageDataGenerator):
    __doc__ = GeneratorCore.__doc__
    dataframe_iterator = DataFrameIterator
    directory_iterator = DirectoryIterator
