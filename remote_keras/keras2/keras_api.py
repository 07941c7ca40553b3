"""The only module of the Keras 2 front that imports Keras, all of it through `tf.keras`.

`tf.keras` is Keras 2 here: TensorFlow 2.15's `keras` 2.15, or `tf_keras` when
`TF_USE_LEGACY_KERAS=1` (TensorFlow 2.16 and later). Public names come from
`tf.keras.preprocessing.image` and `tf.keras.utils`. One class has no public
home in Keras 2, and the front needs it: Keras 2 exports `Iterator`,
`DirectoryIterator` and `NumpyArrayIterator` but not `DataFrameIterator`, which
the front subclasses to stay a drop-in. It is read from the module that defines
the public `Iterator` (`remote_keras.keras_lines.private_homes`). Without
TensorFlow (the `tensorflow` extra), importing this module raises
`MissingBackendError` naming that extra. TensorFlow's files (`tf.io.gfile`), where
the front's `BackupAndRestore` writes its records, are here too (`GFILES`).
"""

from __future__ import annotations

import sys
from typing import Any

from remote_keras.keras_agnostic import tensorflow_import
from remote_keras.keras_lines import private_homes

try:
    import tensorflow as tf
except ImportError as exc:
    raise tensorflow_import.missing(
        "Keras 2 (tf.keras)", exc, "use Keras 3 on JAX or PyTorch, which needs none"
    ) from exc

keras: Any = tf.keras
image: Any = keras.preprocessing.image
ImageDataGenerator: Any = image.ImageDataGenerator
Iterator: Any = image.Iterator
DirectoryIterator: Any = image.DirectoryIterator
NumpyArrayIterator: Any = image.NumpyArrayIterator
DataFrameIterator: Any = private_homes.keras2_dataframe_iterator(Iterator)
Callback: Any = keras.callbacks.Callback
BackupAndRestore: Any = keras.callbacks.BackupAndRestore

__all__ = [
    "BackupAndRestore",
    "Callback",
    "DataFrameIterator",
    "DirectoryIterator",
    "GFILES",
    "ImageDataGenerator",
    "Iterator",
    "NumpyArrayIterator",
    "floatx",
    "image_data_format",
    "multi_worker_scope",
    "print_msg",
    "writes_checkpoints",
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


def multi_worker_scope() -> bool:
    """Whether this thread is in the scope of a `tf.distribute` strategy over several workers.

    Keras 2's `fit`, `evaluate` and `predict` build their data handler inside
    `model.distribute_strategy.scope()` (`keras/src/engine/training.py` lines
    1741-1760 of Keras 2.15): there, a `Sequence` is read in this thread, `x[0]`
    first (`keras/src/engine/data_adapter.py` lines 883 and 1035-1036), then
    `len(x)` unless `steps_per_epoch` is given (lines 1068-1069 and 1475). The
    scope is per thread: the batches Keras reads later, from tf.data's threads,
    are read outside it. Public API only: `tf.distribute.has_strategy()` and the
    strategy's `cluster_resolver` (chief and workers; evaluators read everything).
    """
    if not tf.distribute.has_strategy():
        return False
    resolver = getattr(tf.distribute.get_strategy(), "cluster_resolver", None)
    if resolver is None:
        return False
    cluster = resolver.cluster_spec().as_dict()
    members = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    return members > 1 and resolver.task_type in ("chief", "worker")


def writes_checkpoints(model: Any) -> bool:
    """Whether this process writes the checkpoints of `model`'s strategy (its chief).

    Keras 2's `BackupAndRestore` writes its real backup where
    `strategy.extended.should_checkpoint` says so, and the other workers write to
    temporary folders (`keras/src/distribute/worker_training_state.py` lines
    95-119 of Keras 2.15). `True` without a strategy.
    """
    strategy = getattr(model, "distribute_strategy", None)
    return True if strategy is None else bool(strategy.extended.should_checkpoint)


class GFiles:
    """`tf.io.gfile`, where Keras 2's `BackupAndRestore` writes (local paths and URLs), as
    the files of `remote_keras.keras_agnostic.backup_record` (its `Files`)."""

    def open(self, path: str, mode: str) -> Any:
        return tf.io.gfile.GFile(path, mode)

    def replace(self, source: str, target: str) -> None:
        tf.io.gfile.rename(source, target, overwrite=True)

    def exists(self, path: str) -> bool:
        return bool(tf.io.gfile.exists(path))

    def remove(self, path: str) -> None:
        try:
            tf.io.gfile.remove(path)
        except tf.errors.NotFoundError:  # removed meanwhile
            pass

    def listdir(self, folder: str) -> list[str]:
        if not tf.io.gfile.exists(folder):
            return []
        return [name.rstrip("/") for name in tf.io.gfile.listdir(folder)]

    def makedirs(self, folder: str) -> None:
        tf.io.gfile.makedirs(folder)


GFILES = GFiles()
