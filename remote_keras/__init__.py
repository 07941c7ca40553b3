"""remote_keras: Keras's ImageDataGenerator, reading images from object storage.

Change one import line::

    from remote_keras import ImageDataGenerator

and `flow_from_dataframe` / `flow_from_directory` accept `s3://`, `gs://`,
`az://`, `http(s)://`, `lakefs://` and any other fsspec URL, read through a
pluggable loader on thread pools.
"""

import importlib
import importlib.util
import logging
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from remote_keras import _quiet, keras_lines

_quiet.set_level()  # before TensorFlow loads; a level the user set is kept (see `_quiet`)

# The public names load on first use (PEP 562), so that `import remote_keras.testing...`
# (the local test servers) imports neither Keras nor TensorFlow. Names that differ by Keras
# come from the front `_front()` picks (`remote_keras.keras3` or `remote_keras.keras2`).
_FRONT_NAMES = {
    "BackupAndRestore": "backup",
    "DataFrameIterator": "iterators",
    "DataVersionCallback": "callbacks",
    "DirectoryIterator": "iterators",
    "ImageDataGenerator": "generator",
    "InputStallCallback": "callbacks",
    "Iterator": {"keras3": "keras_src", "keras2": "keras_api"},
    "NumpyArrayIterator": {"keras3": "keras_src", "keras2": "keras_api"},
    "image_dataset_from_directory": "datasets",
}
_MODULES = {
    "ChecksumMismatchError": "remote_keras.errors",
    "EpochInputReport": "remote_keras.keras_agnostic.callbacks",
    "FsspecLoader": "remote_keras.storage.loaders",
    "ImageDecodeError": "remote_keras.errors",
    "ImageLoadError": "remote_keras.errors",
    "InvalidRowsError": "remote_keras.errors",
    "LoaderOptions": "remote_keras.pipeline.options",
    "LoaderStats": "remote_keras.pipeline.stats",
    "MissingBackendError": "remote_keras.errors",
    "ObstoreLoader": "remote_keras.storage.loaders",
    "RetryPolicy": "remote_keras.storage.retry",
    "Shard": "remote_keras.pipeline.sharding",
    "decode_image": "remote_keras.pipeline.decoding",
    "pin_url": "remote_keras.storage.data_versions",
    "pinned_urls": "remote_keras.storage.data_versions",
    "read_lakefs_ref": "remote_keras.storage.data_versions",
    "read_table": "remote_keras.storage.data_versions",
    "write_data_version": "remote_keras.storage.data_versions",
    "WorkerDiedError": "remote_keras.errors",
}

if TYPE_CHECKING:
    from remote_keras.errors import (
        ChecksumMismatchError,
        ImageDecodeError,
        ImageLoadError,
        InvalidRowsError,
        MissingBackendError,
        WorkerDiedError,
    )
    from remote_keras.keras3.backup import BackupAndRestore
    from remote_keras.keras3.callbacks import DataVersionCallback, InputStallCallback
    from remote_keras.keras3.datasets import image_dataset_from_directory
    from remote_keras.keras3.generator import ImageDataGenerator
    from remote_keras.keras3.iterators import DataFrameIterator, DirectoryIterator
    from remote_keras.keras3.keras_src import Iterator, NumpyArrayIterator
    from remote_keras.keras_agnostic.callbacks import EpochInputReport
    from remote_keras.pipeline.decoding import decode_image
    from remote_keras.pipeline.options import LoaderOptions
    from remote_keras.pipeline.sharding import Shard
    from remote_keras.pipeline.stats import LoaderStats
    from remote_keras.storage.data_versions import (
        pin_url,
        pinned_urls,
        read_lakefs_ref,
        read_table,
        write_data_version,
    )
    from remote_keras.storage.loaders import FsspecLoader, ObstoreLoader
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


_OTHER_BACKEND = (
    "set KERAS_BACKEND=jax or KERAS_BACKEND=torch (or `backend` in ~/.keras/keras.json) "
    "before Keras is imported"
)
_logger = logging.getLogger("remote_keras")


def _front() -> str:
    """`"keras2"` where `tf.keras` is Keras 2, else `"keras3"`; logs the choice once (DEBUG).

    Keras 2 is `tf_keras` when `TF_USE_LEGACY_KERAS` is set (TensorFlow then
    serves it as `tf.keras`), or an installed `keras` 2.x (TensorFlow <= 2.15).
    Without TensorFlow (an extra), `TF_USE_LEGACY_KERAS` means nothing: `keras` is it.
    """
    chosen = globals().get("_chosen_front")
    if chosen is not None:
        return chosen
    chosen, why = keras_lines.installed_front(_quiet.tensorflow_installed())
    _logger.debug("remote_keras: using the %s front (%s)", chosen, why)
    globals()["_chosen_front"] = chosen
    return chosen


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    front_module = _FRONT_NAMES.get(name)
    if front_module is not None:
        front = _front()
        if isinstance(front_module, dict):
            front_module = front_module[front]
        module = f"remote_keras.{front}.{front_module}"
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _quiet.tensorflow_start():  # TensorFlow's start-up log kept out of the console
        try:
            value = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as exc:
            if front_module is None or (exc.name or "").split(".")[0] != "tensorflow":
                raise
            # Keras 3 on its default backend, TensorFlow, which is an extra of this package.
            from remote_keras.keras_agnostic import tensorflow_import

            raise tensorflow_import.missing(
                "Keras on its TensorFlow backend (Keras's default)", exc, _OTHER_BACKEND
            ) from exc
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
