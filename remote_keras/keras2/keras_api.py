"""The only module of the Keras 2 front that imports Keras, all of it through `tf.keras`.

`tf.keras` is Keras 2 here: TensorFlow 2.15's `keras` 2.15, or `tf_keras` when
`TF_USE_LEGACY_KERAS=1` (TensorFlow 2.16 and later). Public names come from
`tf.keras.preprocessing.image` and `tf.keras.utils`. One class has no public
home in Keras 2, and the front needs it: Keras 2 exports `Iterator`,
`DirectoryIterator` and `NumpyArrayIterator` but not `DataFrameIterator`, which
the front subclasses to stay a drop-in. It is read from the module that defines
the public `Iterator` (`keras.src.preprocessing.image`,
`tf_keras.src.preprocessing.image`).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import tensorflow as tf

keras: Any = tf.keras
image: Any = keras.preprocessing.image
ImageDataGenerator: Any = image.ImageDataGenerator
Iterator: Any = image.Iterator
DirectoryIterator: Any = image.DirectoryIterator
NumpyArrayIterator: Any = image.NumpyArrayIterator
DataFrameIterator: Any = importlib.import_module(Iterator.__module__).DataFrameIterator
Callback: Any = keras.callbacks.Callback
BackupAndRestore: Any = keras.callbacks.BackupAndRestore
gfile: Any = tf.io.gfile  # where Keras 2's BackupAndRestore writes (local paths and URLs)

__all__ = [
    "BackupAndRestore",
    "Callback",
    "DataFrameIterator",
    "DirectoryIterator",
    "ImageDataGenerator",
    "Iterator",
    "NumpyArrayIterator",
    "floatx",
    "gfile",
    "image_data_format",
    "print_msg",
]


def floatx() -> str:
    """Keras's default float type (`tf.keras.backend.floatx()`)."""
    return keras.backend.floatx()


def image_data_format() -> str:
    """Keras's default image data format (`tf.keras.backend.image_data_format()`)."""
    return keras.backend.image_data_format()


def print_msg(message: str) -> None:
    """Prints as Keras 2's iterators do: to stdout, or to absl's log when interactive
    logging is off (`tf.keras.utils.disable_interactive_logging()`)."""
    if keras.utils.is_interactive_logging_enabled():
        sys.stdout.write(message + "\n")
        sys.stdout.flush()
    else:
        from absl import logging as absl_logging

        absl_logging.info(message)
