"""The fronts' callbacks write every backup through `write_backup`, whatever Keras calls."""

from __future__ import annotations

from remote_keras.keras_lines.backup_hooks import Keras2BackupHooks, Keras3BackupHooks


class _Keras3Backup:
    """The part of Keras 3's `BackupAndRestore` the hooks rely on."""

    def __init__(self) -> None:
        self._weights_path, self._training_metadata_path = "w.h5", "m.json"
        self._prev_weights_path, self._prev_training_metadata_path = "w0.h5", "m0.json"
        self._last_batch_seen = 0

    def on_train_batch_end(self) -> None:
        self._save_model()  # where Keras 3 writes a backup

    def _save_model(self) -> None:
        raise AssertionError("Keras's own write is replaced")


class _Front3(Keras3BackupHooks, _Keras3Backup):
    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def write_backup(self) -> None:
        self.written += 1


def test_keras3_writes_through_the_front_and_its_files_are_named():
    callback = _Front3()
    callback.on_train_batch_end()
    assert callback.written == 1
    paths = callback.backup_paths
    assert (paths.weights, paths.metadata) == ("w.h5", "m.json")
    assert (paths.previous_weights, paths.previous_metadata) == ("w0.h5", "m0.json")
    callback.count_batches_from(6)
    assert callback._last_batch_seen == 6


class _Keras2Backup:
    def __init__(self) -> None:
        self.keras_wrote: list[tuple[int, int]] = []

    def _backup(self, epoch: int, batch: int = 0) -> None:
        self.keras_wrote.append((epoch, batch))


class _Front2(Keras2BackupHooks, _Keras2Backup):
    def write_backup(self, epoch: int, batch: int) -> None:
        self.keras_backup(epoch, batch + 100)  # the front writes its record, then Keras's


def test_keras2_writes_through_the_front_which_calls_kerass_own():
    callback = _Front2()
    callback._backup(2, 3)  # where Keras 2 writes a backup
    assert callback.keras_wrote == [(2, 103)]
    assert callback._implements_train_batch_hooks() is True
