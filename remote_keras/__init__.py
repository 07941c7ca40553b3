"""remote_keras: Keras's ImageDataGenerator, reading images from object storage.

Change one import line::

    from remote_keras import ImageDataGenerator

and `flow_from_dataframe` / `flow_from_directory` accept `s3://`, `gs://`,
`az://`, `http(s)://`, `lakefs://` and any other fsspec URL, read through a
pluggable loader on thread pools.
"""

import importlib
import os
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from remote_keras import _quiet

_quiet.set_level()  # before TensorFlow loads; a level the user set is kept (see `_quiet`)

if os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes"):
    raise ImportError(
        "remote_keras supports Keras 3 (keras>=3, `import keras`), not the Keras 2 line that "
        "TF_USE_LEGACY_KERAS=1 selects for tf.keras (tf_keras): tf_keras's fit treats a Keras 3 "
        "iterator as an endless generator, so an epoch would never end. Unset "
        "TF_USE_LEGACY_KERAS and train with `keras.Model.fit`."
    )

# The public names load on first use (PEP 562), so that `import remote_keras.testing...`
# (the local test servers) imports neither Keras nor TensorFlow.
_MODULES = {
    "BackupAndRestore": "remote_keras.keras3.backup",
    "ChecksumMismatchError": "remote_keras.storage.integrity",
    "DataFrameIterator": "remote_keras.keras3.iterators",
    "DataVersionCallback": "remote_keras.keras3.callbacks",
    "DirectoryIterator": "remote_keras.keras3.iterators",
    "EpochInputReport": "remote_keras.keras3.callbacks",
    "FsspecLoader": "remote_keras.storage.loaders",
    "ImageDataGenerator": "remote_keras.keras3.generator",
    "ImageDecodeError": "remote_keras.errors",
    "ImageLoadError": "remote_keras.errors",
    "InputStallCallback": "remote_keras.keras3.callbacks",
    "InvalidRowsError": "remote_keras.errors",
    "Iterator": "remote_keras.keras3.keras_src",
    "LoaderOptions": "remote_keras.pipeline.options",
    "LoaderStats": "remote_keras.pipeline.stats",
    "MissingBackendError": "remote_keras.errors",
    "NumpyArrayIterator": "remote_keras.keras3.keras_src",
    "ObstoreLoader": "remote_keras.storage.loaders",
    "RetryPolicy": "remote_keras.storage.retry",
    "Shard": "remote_keras.pipeline.sharding",
    "decode_image": "remote_keras.pipeline.decoding",
    "image_dataset_from_directory": "remote_keras.keras3.datasets",
    "pin_url": "remote_keras.storage.records",
    "pinned_urls": "remote_keras.storage.records",
    "read_lakefs_ref": "remote_keras.storage.records",
    "read_table": "remote_keras.storage.records",
    "write_data_version": "remote_keras.storage.records",
    "WorkerDiedError": "remote_keras.keras3.workers",
}

if TYPE_CHECKING:
    from remote_keras.errors import (
        ImageDecodeError,
        ImageLoadError,
        InvalidRowsError,
        MissingBackendError,
    )
    from remote_keras.keras3.backup import BackupAndRestore
    from remote_keras.keras3.callbacks import (
        DataVersionCallback,
        EpochInputReport,
        InputStallCallback,
    )
    from remote_keras.keras3.datasets import image_dataset_from_directory
    from remote_keras.keras3.generator import ImageDataGenerator
    from remote_keras.keras3.iterators import DataFrameIterator, DirectoryIterator
    from remote_keras.keras3.keras_src import Iterator, NumpyArrayIterator
    from remote_keras.keras3.workers import WorkerDiedError
    from remote_keras.pipeline.decoding import decode_image
    from remote_keras.pipeline.options import LoaderOptions
    from remote_keras.pipeline.sharding import Shard
    from remote_keras.pipeline.stats import LoaderStats
    from remote_keras.storage.integrity import ChecksumMismatchError
    from remote_keras.storage.loaders import FsspecLoader, ObstoreLoader
    from remote_keras.storage.records import (
        pin_url,
        pinned_urls,
        read_lakefs_ref,
        read_table,
        write_data_version,
    )
    from remote_keras.storage.retry import RetryPolicy

try:
    __version__ = version("remote-keras")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "BackupAndRestore",
    "ChecksumMismatchError",
    "DataFrameIterator",
    "DataVersionCallback",
    "DirectoryIterator",
    "EpochInputReport",
    "FsspecLoader",
    "ImageDataGenerator",
    "ImageDecodeError",
    "ImageLoadError",
    "InputStallCallback",
    "InvalidRowsError",
    "Iterator",
    "LoaderOptions",
    "LoaderStats",
    "MissingBackendError",
    "NumpyArrayIterator",
    "ObstoreLoader",
    "RetryPolicy",
    "Shard",
    "WorkerDiedError",
    "decode_image",
    "image_dataset_from_directory",
    "pin_url",
    "pinned_urls",
    "read_lakefs_ref",
    "read_table",
    "write_data_version",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _quiet.tensorflow_start():  # TensorFlow's start-up log kept out of the console
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
