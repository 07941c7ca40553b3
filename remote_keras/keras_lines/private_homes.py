"""Keras's names that have no public home, read from the modules each line keeps them in.

Imported by name (`importlib`), so that nothing below the fronts imports Keras:
only the front that runs on a line asks for its names.

- Keras 3 (3.8.0 to 3.16): `keras.src.legacy.preprocessing.image` is the only
  home of `ImageDataGenerator`, `Iterator`, `DataFrameIterator`,
  `DirectoryIterator` and `NumpyArrayIterator` (lines 949, 21, 695, 397 and 520
  of Keras 3.15.1), which the front subclasses (and re-exports the last two
  unchanged); `keras.src.utils.io_utils.print_msg` prints "Found N images
  belonging to C classes." as Keras's iterators do (`image.py` lines 494 and
  781: to stdout, or to absl's log when interactive logging is off);
  `keras.src.utils.file_utils` (`exists`, `File`, `copy`, `makedirs`: lines
  528-600) is the file layer Keras's `BackupAndRestore` writes its backups
  through (local paths and `tf.io.gfile` URLs).
- Keras 2 (2.15, tf_keras): `DataFrameIterator` is not exported; it is defined
  beside the public `Iterator` (`keras/src/preprocessing/image.py` lines 59 and
  843 of Keras 2.15; `tf_keras/src/preprocessing/image.py`, the same lines).
"""

from __future__ import annotations

import importlib
from typing import Any


def keras3_legacy_image() -> Any:
    """Keras 3's `keras.src.legacy.preprocessing.image` module."""
    return importlib.import_module("keras.src.legacy.preprocessing.image")


def keras3_file_utils() -> Any:
    """Keras 3's `keras.src.utils.file_utils` module."""
    return importlib.import_module("keras.src.utils.file_utils")


def keras3_print_msg() -> Any:
    """Keras 3's `keras.src.utils.io_utils.print_msg`."""
    return importlib.import_module("keras.src.utils.io_utils").print_msg


def keras2_dataframe_iterator(iterator_class: type) -> Any:
    """Keras 2's `DataFrameIterator`, from the module of its public `Iterator`."""
    return importlib.import_module(iterator_class.__module__).DataFrameIterator
