"""remote_keras: Keras's ImageDataGenerator, reading images from object storage.

Change one import line::

    from remote_keras import ImageDataGenerator

and `flow_from_dataframe` / `flow_from_directory` accept `s3://`, `gs://`,
`az://`, `http(s)://`, `lakefs://` and any other fsspec URL, read through a
pluggable loader on thread pools.
"""

import os
from importlib.metadata import PackageNotFoundError, version

if os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes"):
    raise ImportError(
        "remote_keras supports Keras 3 (keras>=3, `import keras`), not the Keras 2 line that "
        "TF_USE_LEGACY_KERAS=1 selects for tf.keras (tf_keras): tf_keras's fit treats a Keras 3 "
        "iterator as an endless generator, so an epoch would never end. Unset "
        "TF_USE_LEGACY_KERAS and train with `keras.Model.fit`."
    )

from keras.src.legacy.preprocessing.image import Iterator, NumpyArrayIterator

from remote_keras.callbacks import EpochInputReport, InputStallCallback
from remote_keras.errors import ImageDecodeError, ImageLoadError, MissingBackendError
from remote_keras.generator import ImageDataGenerator
from remote_keras.iterators import DataFrameIterator, DirectoryIterator
from remote_keras.loaders import FsspecLoader, ObstoreLoader, decode_image
from remote_keras.retry import RetryPolicy
from remote_keras.sharding import Shard
from remote_keras.stats import LoaderStats

try:
    __version__ = version("remote-keras")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "DataFrameIterator",
    "DirectoryIterator",
    "EpochInputReport",
    "FsspecLoader",
    "ImageDataGenerator",
    "ImageDecodeError",
    "ImageLoadError",
    "InputStallCallback",
    "Iterator",
    "LoaderStats",
    "MissingBackendError",
    "NumpyArrayIterator",
    "ObstoreLoader",
    "RetryPolicy",
    "Shard",
    "decode_image",
]
