"""`KerasLine`: one per supported Keras line, chosen once from the Keras the program loaded."""

from __future__ import annotations

import pytest

from remote_keras import keras_lines
from remote_keras.keras_lines import KERAS_2, KERAS_3, KERAS_3_16, line_for_version, line_of


@pytest.mark.parametrize(
    ("version", "line"),
    [
        ("2.15.0", KERAS_2),
        ("2.21.0", KERAS_2),
        ("3.8.0", KERAS_3),
        ("3.15.1", KERAS_3),
        ("3.16.0.dev2026102704", KERAS_3_16),
        ("3.16.0", KERAS_3_16),
        ("4.0.0", KERAS_3_16),
    ],
)
def test_a_version_names_its_line(version, line):
    assert line_for_version(version) is line


def test_each_line_says_how_fit_draws_its_order():
    assert (KERAS_3.seeds_epochs, KERAS_3.draws_after_epoch_begin) == (False, True)
    assert (KERAS_3_16.seeds_epochs, KERAS_3_16.draws_after_epoch_begin) == (True, False)
    assert not KERAS_2.seeds_epochs and not KERAS_2.calls_epoch_begin
    assert KERAS_3.calls_epoch_begin and KERAS_3_16.calls_epoch_begin


def test_the_keras3_line_is_the_installed_kerass_and_chosen_once():
    keras = pytest.importorskip("keras")
    assert line_of("keras3") is line_for_version(keras.__version__)
    assert line_of("keras2") is KERAS_2
    assert line_of.cache_info().currsize >= 1  # chosen once per process


def test_only_a_line_that_seeds_epochs_shards_batches_itself():
    assert KERAS_3.batch_shard() is None and KERAS_2.batch_shard() is None
    assert KERAS_3_16.batch_shard() is None  # no keras.distribution set in this process


def test_a_keras_lacking_what_the_backup_extends_is_named():
    class Partial:
        def __init__(self):
            self._weights_path = "w"
            self._last_batch_seen = 0

    with pytest.raises(RuntimeError, match="_training_metadata_path.*_save_model") as caught:
        KERAS_3.check_backup(Partial(), Partial)
    assert "Keras 3.8-3.15" in str(caught.value)
    with pytest.raises(RuntimeError, match="_backup, _implements_train_batch_hooks"):
        KERAS_2.check_backup(Partial(), Partial)


def test_the_installed_kerass_backup_has_what_the_line_relies_on():
    """Keras 3 here; Keras 2.15 in `.venv-keras2` (`make test-keras2` runs this file too)."""
    keras = pytest.importorskip("keras")
    callback = keras.callbacks.BackupAndRestore("unused")
    line = line_for_version(keras.__version__)
    line.check_backup(callback, type(callback))  # raises naming what is missing


def test_the_keras_version_is_read_from_the_loaded_keras(monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "keras", raising=False)
    assert keras_lines.keras_version() == "?"
