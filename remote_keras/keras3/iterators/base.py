"""`RemoteBatchMixin`: the shared `RemoteBatchCore` on Keras 3's legacy `Iterator`.

See the package docstring (`remote_keras.keras3.iterators`) for what changes from stock Keras.
"""

from __future__ import annotations

import keras

from remote_keras.keras3.keras_src import legacy_image
from remote_keras.keras_agnostic import fit_order
from remote_keras.keras_agnostic.batch_core import RemoteBatchCore
from remote_keras.keras_agnostic.epoch_clock import KEPT_BATCHES
from remote_keras.pipeline import sharding

# Keras 3.16 draws `fit(shuffle=True)`'s orders from `Random(pass)` and shards batches itself.
_SEEDS_EPOCHS = fit_order.seeds_epochs(keras.__version__)


class RemoteBatchMixin(RemoteBatchCore, legacy_image.Iterator):
    """Batch loading through a loader and thread pools, for Keras 3's file-based iterators.

    Mixed into `DataFrameIterator` and `DirectoryIterator` ahead of Keras's
    classes; it replaces `__getitem__`, `__next__`, `on_epoch_end` and
    `_get_batches_of_transformed_samples` (`remote_keras.keras_agnostic.batch_core`).
    """

    def _keras_on_tensorflow(self) -> bool:
        return keras.backend.backend() == "tensorflow"

    def _finish_init(self) -> None:
        super()._finish_init()
        if _SEEDS_EPOCHS and self.workers > 1:
            # Keras 3.16's JAX `fit` builds its state from a batch of a queue its worker
            # threads fill before the first pass (and then drop): the pass reads them again.
            self._clock.keep_limit = KEPT_BATCHES + self.workers

    def _keras_seeds_epochs(self) -> bool:
        return _SEEDS_EPOCHS

    def _keras_batch_shard(self) -> tuple[int, int] | None:
        return sharding.keras_batch_shard() if _SEEDS_EPOCHS else None
