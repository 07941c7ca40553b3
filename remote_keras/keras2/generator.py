"""`ImageDataGenerator`: Keras 2's (`tf.keras`), `flow_from_*` building remote-aware iterators."""

from __future__ import annotations

from remote_keras.keras2 import keras_api
from remote_keras.keras2.iterators import DataFrameIterator, DirectoryIterator
from remote_keras.keras_agnostic.generator import GeneratorCore


class ImageDataGenerator(GeneratorCore, keras_api.ImageDataGenerator):
    """Keras 2's `ImageDataGenerator` (`tf.keras`), reading from local disk or object storage.

    Arguments, options and errors are those of the Keras 3 front's class of the same name.
    """

    dataframe_iterator = DataFrameIterator
    directory_iterator = DirectoryIterator
