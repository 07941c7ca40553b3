"""`BackupAndRestore` on Keras 2: Keras 2's own, and the iterator continues its data stream.

Keras 2's `tf.keras.callbacks.BackupAndRestore` restores the model, the
optimizer and the epoch `fit` starts at (`save_freq="epoch"`, or a number of
steps). Given `train_iterator=`, this subclass also records, next to Keras's
backup, which epoch the iterator reads (`remote_keras_iterator.json`, the
iterator's `state_dict()`), and on restart moves the iterator to that epoch,
so the resumed epochs read the batches, order and augmentation they would have
read without the interruption. Keras 2 (TensorFlow 2.15's, and tf_keras 2.21)
runs an epoch interrupted mid-way again from its start, with `save_freq` in steps
too (the model comes back as saved at that step, then the whole epoch trains):
the iterator reads that epoch again from its start, in the same order and with
the same augmentation. So the stream of epochs is exact; the batches of the
interrupted epoch trained before the interruption are trained again, as with
stock Keras 2. (Keras 3's `remote_keras.BackupAndRestore` resumes mid-epoch.)
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from remote_keras.keras2 import keras_api

STATE_FILE = "remote_keras_iterator.json"


class BackupAndRestore(keras_api.BackupAndRestore):
    """Keras 2's `BackupAndRestore`, which also brings `train_iterator` back to its epoch.

    Args:
        backup_dir: Where Keras 2 keeps its backup (a local path or a
            `tf.io.gfile` URL); the iterator's record is written there too.
        train_iterator: The remote_keras iterator passed to `fit`, or `None`
            (then this is Keras 2's callback unchanged).
        **kwargs: Keras 2's arguments (`save_freq`, `delete_checkpoint`, ...).

    Example:

    ```python
    backup = BackupAndRestore("ckpt/backup", train_iterator=train)
    model.fit(train, epochs=10, callbacks=[backup])  # rerun the same line after a crash
    ```
    """

    def __init__(self, backup_dir: str, train_iterator: Any = None, **kwargs: Any) -> None:
        super().__init__(backup_dir, **kwargs)
        self.train_iterator = train_iterator
        self.state_path = posixpath.join(str(backup_dir), STATE_FILE)

    def on_train_begin(self, logs: dict | None = None) -> None:
        super().on_train_begin(logs)
        if self.train_iterator is None or not keras_api.gfile.exists(self.state_path):
            return
        with keras_api.gfile.GFile(self.state_path, "r") as f:
            state = json.load(f)
        self.train_iterator.load_state_dict(state)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        super().on_epoch_begin(epoch, logs)
        self._record(epoch)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        super().on_epoch_end(epoch, logs)
        self._record(epoch + 1)

    def on_train_end(self, logs: dict | None = None) -> None:
        super().on_train_end(logs)
        delete = getattr(self, "delete_checkpoint", True)
        if delete and keras_api.gfile.exists(self.state_path):
            keras_api.gfile.remove(self.state_path)

    def _record(self, epoch: int) -> None:
        """Writes the iterator's state at the start of `epoch` (the epoch a restart reads)."""
        if self.train_iterator is None:
            return
        keras_api.gfile.makedirs(posixpath.dirname(self.state_path) or ".")
        state = self.train_iterator.state_dict(epoch=epoch, batch=0)
        with keras_api.gfile.GFile(self.state_path, "w") as f:
            json.dump(state, f)
