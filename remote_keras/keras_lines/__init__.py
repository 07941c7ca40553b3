"""What the package knows about how each Keras line drives an input, in one place.

Keras never says which epoch it trains, whether `fit` shuffles, or which part
of the data a process reads: each way in tells them from the calls Keras makes
in public, by the rules of the Keras line it runs on. Those rules live in this
package only, each module citing the Keras source lines it relies on:

- `epoch_clock`: epochs and passes from `on_epoch_begin()`/`on_epoch_end()`
  (Keras 3; `keras2.Keras2Clock` is Keras 2's).
- `keras3`: Keras 3.8 to 3.15's `fit(shuffle=True)` order, drawn from Python's
  global `random`, its replay, and the reads and writes of that state.
- `keras3_16`: Keras 3.16's order, drawn from `Random(pass)`, and its replay.
- `keras2`: Keras 2.15's and tf_keras's epoch ends and draws.
- `dataset_passes`: the passes Keras makes over a `tf.data.Dataset` or grain
  dataset, and their shuffle seeds.
- `distribution`: where a cluster says this process stands, and how Keras
  shards batches (3.16) and datasets (3.15 on).
- `worker_pools`: Keras's registries of its worker process pools.
- `backup_hooks`: the internals of Keras's `BackupAndRestore`, as a public
  interface for the fronts' subclasses.
- `private_homes`: Keras's names with no public home, imported by name.
- `resumption`: `Resumption`, the rest of an interrupted epoch.

`KerasLine` is what a front asks of the line it runs on; `line_of` chooses it,
once, from the Keras the program loaded. No other module of the package reads
Keras's version or a Keras private, or Python's global `random` state
(`tests/keras_lines/test_boundary.py` checks). The layer has no import
statement of Keras: it reads the modules the program already loaded, and
`private_homes` imports Keras's private modules by name when a front asks.

Adding a Keras line (say 3.17, if it changed how `fit` draws its order):
a module beside `keras3_16.py` with its rule and its test file under
`tests/keras_lines/`, a `KerasLine` for it below, and its version in
`line_for_version`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version

from remote_keras.keras_lines import distribution
from remote_keras.keras_lines.distribution import keras_version


@dataclasses.dataclass(frozen=True)
class KerasLine:
    """How one Keras line drives a `PyDataset` / `Sequence` (one instance per line).

    Attributes:
        name: The line, as messages name it.
        seeds_epochs: `fit(shuffle=True)` draws pass `p` of a `fit` from
            `Random(p + 1)` and shards a `PyDataset`'s batches itself
            (`keras3_16`); else it draws from Python's global `random`
            (`keras3`, `keras2`).
        calls_epoch_begin: Keras calls `on_epoch_begin()` before each pass
            (Keras 3; Keras 2 never does).
        builds_from_a_pass: Off TensorFlow, `fit` and `evaluate` build an
            unbuilt model from the first batch of a pass they abandon (Keras
            3.8 to 3.15's JAX and PyTorch trainers: `EpochClock.built_model`).
        backup_internals: The private attributes of Keras's own
            `BackupAndRestore` that the front's subclass relies on.
    """

    name: str
    seeds_epochs: bool
    calls_epoch_begin: bool
    builds_from_a_pass: bool
    backup_internals: tuple[str, ...]

    @property
    def draws_after_epoch_begin(self) -> bool:
        """Whether `fit` draws a pass's order from Python's global `random` right after
        `on_epoch_begin()` (Keras 3.8 to 3.15: `epoch_clock.PredictedOrder` predicts it then)."""
        return self.calls_epoch_begin and not self.seeds_epochs

    def batch_shard(self) -> tuple[int, int] | None:
        """`(data_shard_id, num_data_shards)` where this line's `fit` shards batches itself."""
        return distribution.keras_batch_shard() if self.seeds_epochs else None

    def check_backup(self, callback: object, keras_class: type) -> None:
        """Raises `RuntimeError` naming what Keras's `BackupAndRestore` lacks of `backup_internals`.

        Args:
            callback: An instance of the front's `BackupAndRestore`, made.
            keras_class: Keras's `BackupAndRestore`, which it extends.
        """
        missing = [
            name
            for name in self.backup_internals
            if not hasattr(keras_class, name) and name not in vars(callback)
        ]
        if missing:
            raise RuntimeError(
                f"remote_keras.BackupAndRestore extends {self.name}'s BackupAndRestore, which "
                f"lacks {', '.join(missing)} here (tested with Keras 3.8 to 3.16, Keras 2.15 "
                "and tf_keras 2.19 to 2.21)."
            )


# Keras 3's `BackupAndRestore` (keras/src/callbacks/backup_and_restore.py, Keras 3.8.0 and
# 3.15.1 alike): its file paths (lines 98-105), its batch counter `_last_batch_seen` (lines 92,
# 192-206: set on restore so that backups fall where the uninterrupted run's did) and
# `_save_model()` (line 164: the one place Keras writes a backup).
_KERAS3_BACKUP = (
    "_weights_path",
    "_training_metadata_path",
    "_prev_weights_path",
    "_prev_training_metadata_path",
    "_last_batch_seen",
    "_save_model",
)

KERAS_3 = KerasLine(
    name="Keras 3.8-3.15",
    seeds_epochs=False,
    calls_epoch_begin=True,
    builds_from_a_pass=True,
    backup_internals=_KERAS3_BACKUP,
)
# Keras 2 (TensorFlow 2.15's Keras, tf_keras): it never calls `on_epoch_begin()` and draws its
# order at `len()` (`keras2`); the front's callback extends Keras 2's own methods
# (keras/src/callbacks.py of Keras 2.15, lines 1934-1935 and 1976-1977; tf_keras 2.21 alike):
# `_backup(epoch, batch)`, the one place it writes a backup, and
# `_implements_train_batch_hooks`, which must say yes for the first step of each epoch to be
# seen with `save_freq="epoch"` too.
KERAS_2 = replace(
    KERAS_3,
    name="Keras 2",
    calls_epoch_begin=False,
    builds_from_a_pass=False,
    backup_internals=("_backup", "_implements_train_batch_hooks"),
)
# Keras 3.16 (keras-team/keras commit ea6968a): `fit` draws each pass's order from
# `Random(pass)` and shards batches itself (`keras3_16`); its trainers no longer build a model
# from an abandoned pass.
KERAS_3_16 = replace(KERAS_3, name="Keras 3.16", seeds_epochs=True, builds_from_a_pass=False)


def line_for_version(version: str) -> KerasLine:
    """The line of a Keras version string (`"2.15.0"`, `"3.15.1"`, `"3.16.0.dev2026102704"`).

    Args:
        version: `keras.__version__` (or `tf_keras.__version__`).

    Returns:
        `KERAS_2` for 2.x, `KERAS_3_16` from 3.16 on, else `KERAS_3`.
    """
    major, minor = (int(part) for part in version.split(".")[:2])
    if major < 3:
        return KERAS_2
    return KERAS_3_16 if (major, minor) >= (3, 16) else KERAS_3


@functools.cache
def line_of(front: str) -> KerasLine:
    """The line the front `front` runs on, chosen once per process.

    Args:
        front: `"keras3"` (Keras 3, read from the `keras` the program
            imported) or `"keras2"` (TensorFlow 2.15's `tf.keras`, or tf_keras).

    Returns:
        The `KerasLine`.
    """
    if front == "keras2":
        return KERAS_2
    return line_for_version(keras_version())


_LEGACY_ON = ("1", "true", "yes")


def installed_front(tensorflow_installed: bool) -> tuple[str, str]:
    """The front the installed Keras needs, and why: `"keras2"` where `tf.keras` is Keras 2.

    Keras 2 is `tf_keras` when `TF_USE_LEGACY_KERAS` is set (TensorFlow then
    serves it as `tf.keras`), or an installed `keras` 2.x (TensorFlow <= 2.15).
    Without TensorFlow (an extra), `TF_USE_LEGACY_KERAS` means nothing: `keras` is it.
    Nothing is imported.

    Args:
        tensorflow_installed: Whether TensorFlow is installed.

    Returns:
        `("keras2" or "keras3", the reason, for a log line)`.

    Raises:
        ImportError: `TF_USE_LEGACY_KERAS` is set but `tf_keras` is not installed.
    """
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in _LEGACY_ON
    if legacy and tensorflow_installed:
        if importlib.util.find_spec("tf_keras") is None:
            raise ImportError(
                "TF_USE_LEGACY_KERAS is set, which makes tf.keras the tf_keras package, but "
                "tf_keras is not installed: `pip install tf-keras` (the version matching "
                "TensorFlow's), or unset TF_USE_LEGACY_KERAS to use Keras 3."
            )
        return "keras2", "TF_USE_LEGACY_KERAS is set: tf.keras is tf_keras (Keras 2)"
    try:
        installed = version("keras")
    except PackageNotFoundError:
        installed = ""
    if installed.startswith("2."):
        chosen, why = "keras2", f"the installed keras is {installed} (Keras 2)"
    else:
        chosen, why = "keras3", f"the installed keras is {installed or 'absent'}"
    if legacy:
        why += "; TF_USE_LEGACY_KERAS is set, but TensorFlow, which reads it, is not installed"
    return chosen, why


__all__ = [
    "KERAS_2",
    "KERAS_3",
    "KERAS_3_16",
    "KerasLine",
    "keras_version",
    "line_for_version",
    "line_of",
]
