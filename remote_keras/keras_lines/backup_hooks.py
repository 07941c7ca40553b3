"""What the fronts' `BackupAndRestore` need of Keras's own, behind a public interface.

Each front subclasses its Keras's `BackupAndRestore` and puts the mixin of its
line ahead of it: the mixin overrides the one private method through which
that Keras writes a backup, calling the front's public `write_backup`, and
reads and sets the private attributes the front relies on. What each line
has is listed in its `KerasLine.backup_internals` and checked when the
callback is made (`KerasLine.check_backup`).

- Keras 3 (`keras/src/callbacks/backup_and_restore.py`, Keras 3.8.0 and 3.15.1
  alike): its file paths (lines 98-105), its batch counter `_last_batch_seen`
  (lines 92, 192-206) and `_save_model()` (line 164, the one place it writes).
- Keras 2 (`keras/src/callbacks.py` of Keras 2.15, lines 1934-1935 and
  1976-1977; tf_keras 2.21 alike): `_backup(epoch, batch)`, the one place it
  writes, and `_implements_train_batch_hooks`, which must say yes for an
  epoch's first step to be seen with `save_freq="epoch"` too.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class BackupPaths:
    """The files of Keras 3's backup: its weights and metadata, and their previous copies."""

    weights: str
    metadata: str
    previous_weights: str
    previous_metadata: str


class Keras3BackupHooks:
    """Keras 3's `BackupAndRestore` internals, for the Keras 3 front's subclass."""

    def write_backup(self) -> None:
        """Writes a backup: the weights and the metadata (the front's own)."""
        raise NotImplementedError

    def _save_model(self) -> None:  # Keras 3 writes every backup through this
        self.write_backup()

    @property
    def backup_paths(self) -> BackupPaths:
        """Where Keras 3 keeps this backup's files."""
        own: Any = self
        return BackupPaths(
            own._weights_path,
            own._training_metadata_path,
            own._prev_weights_path,
            own._prev_training_metadata_path,
        )

    def count_batches_from(self, batch: int) -> None:
        """Makes Keras count the batches of a resumed epoch from `batch` (for `save_freq`)."""
        self._last_batch_seen = batch


class Keras2BackupHooks:
    """Keras 2's `BackupAndRestore` internals, for the Keras 2 front's subclass."""

    def write_backup(self, epoch: int, batch: int) -> None:
        """Writes a backup after step `batch` of `epoch` (the front calls `keras_backup`)."""
        raise NotImplementedError

    def _implements_train_batch_hooks(self) -> bool:
        return True  # each epoch's first step tells how its order was drawn

    def _backup(self, epoch: int, batch: int = 0) -> None:  # Keras 2 writes every backup here
        self.write_backup(epoch, batch)

    def keras_backup(self, epoch: int, batch: int) -> None:
        """Writes Keras 2's own backup (its `_backup`) after step `batch` of `epoch`."""
        super()._backup(epoch=epoch, batch=batch)  # type: ignore[misc]
