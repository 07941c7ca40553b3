"""`RemoteBatchMixin`: the shared `RemoteBatchCore` on Keras 3's legacy `Iterator`.

See the package docstring (`remote_keras.keras3.iterators`) for what changes from stock Keras.
"""

from __future__ import annotations

import types
import warnings

import keras

from remote_keras.keras3.keras_src import legacy_image, print_msg
from remote_keras.keras_agnostic.batch_core import RemoteBatchCore
from remote_keras.keras_lines import line_of
from remote_keras.keras_lines.epoch_clock import KEPT_BATCHES, PredictedOrder

# What the shared iterator core asks of Keras 3 (`RemoteBatchCore.keras_api`).
KERAS_3_API = types.SimpleNamespace(
    floatx=keras.config.floatx,
    image_data_format=keras.config.image_data_format,
    print_msg=print_msg,
    Iterator=legacy_image.Iterator,
    ImageDataGenerator=legacy_image.ImageDataGenerator,
)


class RemoteBatchMixin(RemoteBatchCore, legacy_image.Iterator):
    """Batch loading through a loader and thread pools, for Keras 3's file-based iterators.

    Mixed into `DataFrameIterator` and `DirectoryIterator` ahead of Keras's
    classes; it replaces `__getitem__`, `__next__`, `on_epoch_end` and
    `_get_batches_of_transformed_samples` (`remote_keras.keras_agnostic.batch_core`).

    On the JAX and PyTorch backends Keras reads the iterator from its own
    thread (`workers` and `use_multiprocessing` read as 1 and `False` there):
    Keras's worker queue (`OrderedEnqueuer`) keeps the batches its workers
    read for a pass that `fit` abandons (the trainers of these backends
    build the model from a pass's first batch) and hands them to the next
    pass, so each epoch would train some batches of the previous one (about
    14% of the images twice and as many never, measured with Keras's own
    iterator too). The iterator reads ahead itself instead (`prefetch_batches`).
    """

    keras_line = line_of("keras3")  # the Keras 3 line the program loaded
    keras_api = KERAS_3_API

    @property
    def workers(self) -> int:
        """Threads Keras asks for batches from (`PyDataset.workers`; 1 off TensorFlow)."""
        return self._workers if self._keras_on_tensorflow() else 1

    @workers.setter
    def workers(self, value: int) -> None:
        self._workers = value

    @property
    def use_multiprocessing(self) -> bool:
        """Whether Keras asks from worker processes (`PyDataset`'s; `False` off TensorFlow)."""
        return self._use_multiprocessing and self._keras_on_tensorflow()

    @use_multiprocessing.setter
    def use_multiprocessing(self, value: bool) -> None:
        self._use_multiprocessing = value

    def _keras_on_tensorflow(self) -> bool:
        return keras.backend.backend() == "tensorflow"

    def _finish_init(self) -> None:
        super()._finish_init()
        if self.options.use_multiprocessing and not self._keras_on_tensorflow():
            warnings.warn(
                f"use_multiprocessing=True is not used on Keras's {keras.backend.backend()} "
                "backend: Keras's worker queue hands batches read for one pass to the next "
                "there (some images trained twice in an epoch, others never). Keras reads "
                "from its own thread and the iterator reads ahead in its own threads.",
                stacklevel=4,  # the user's `flow_from_*` call
            )
        if self.keras_line.seeds_epochs and self.workers > 1:
            # Keras 3.16's JAX `fit` builds its state from a batch of a queue its worker
            # threads fill before the first pass (and then drop): the pass reads them again.
            self._clock.keep_limit = KEPT_BATCHES + self.workers

    def on_epoch_begin(self) -> None:
        """Called by Keras before each pass (see `RemoteBatchCore.on_epoch_begin`)."""
        super().on_epoch_begin()
        line = self.keras_line
        if line.draws_after_epoch_begin and self.workers == 1 and not self.use_multiprocessing:
            # Keras 3.8-3.15 draw the pass's order from Python's `random` after this call.
            with self.lock:
                count = self._clock.batches(self._length())
                self._clock.prediction = PredictedOrder(count)
