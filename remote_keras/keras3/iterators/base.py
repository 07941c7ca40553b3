"""`RemoteBatchMixin`: the shared `RemoteBatchCore` on Keras 3's legacy `Iterator`.

See the package docstring (`remote_keras.keras3.iterators`) for what changes from stock Keras.
"""

from __future__ import annotations

import keras

from remote_keras.front_core.batch_core import RemoteBatchCore
from remote_keras.keras3.keras_src import legacy_image


class RemoteBatchMixin(RemoteBatchCore, legacy_image.Iterator):
    """Batch loading through a loader and thread pools, for Keras 3's file-based iterators.

    Mixed into `DataFrameIterator` and `DirectoryIterator` ahead of Keras's
    classes; it replaces `__getitem__`, `__next__`, `on_epoch_end` and
    `_get_batches_of_transformed_samples` (`remote_keras.front_core.batch_core`).
    """

    def _keras_on_tensorflow(self) -> bool:
        return keras.backend.backend() == "tensorflow"
