"""The only module of the package that imports Keras's private `keras.src`.

Each name below has no public home in Keras 3, and the front needs it to
stay a drop-in. Tested with every Keras from 3.8.0 to 3.15.1 (CI runs the
oldest and the newest); a Keras without one of them fails at import, here,
naming it.

- `legacy_image`: `keras.src.legacy.preprocessing.image`. Keras 3 keeps
  `ImageDataGenerator`, `Iterator`, `DataFrameIterator`,
  `DirectoryIterator` and `NumpyArrayIterator` only there; the front
  subclasses them (and re-exports the last two unchanged), which is what
  makes `from remote_keras import ImageDataGenerator` a one-line swap.
- `print_msg`: `keras.src.utils.io_utils.print_msg`, through which Keras's
  iterators print "Found N images belonging to C classes." (to stdout, or
  to absl's log when `keras.config.disable_interactive_logging()` was
  called); the front prints the same line the same way.
- `file_utils`: `keras.src.utils.file_utils`, the file layer Keras's own
  `BackupAndRestore` writes its backups through (local paths and
  `tf.io.gfile` URLs); the subclass reads and writes the same files.

Two modules read `keras.src` modules that Keras has already loaded, without
importing them: `keras_agnostic/workers.py` (`py_dataset_adapter._DATA_POOLS`, Keras's
worker pools, to notice a worker that died: `multiprocessing.Pool` never
completes its task) and `pipeline/sharding.py` (`backend.distribution_lib`,
the process count on Keras < 3.15, whose `keras.distribution` cannot say it).
`keras3/backup.py` names the private attributes of Keras's `BackupAndRestore`
it relies on in one place (`_KERAS_INTERNALS`).
"""

from __future__ import annotations

from keras.src.legacy.preprocessing import image as legacy_image
from keras.src.utils import file_utils
from keras.src.utils.io_utils import print_msg

Iterator = legacy_image.Iterator
NumpyArrayIterator = legacy_image.NumpyArrayIterator

__all__ = ["Iterator", "NumpyArrayIterator", "file_utils", "legacy_image", "print_msg"]
