"""Which shuffle pass an `image_dataset_from_directory` dataset is at, for `BackupAndRestore`.

The dataset shuffles each pass with TensorFlow's `shuffle` op and one seed
generator shared by all passes of the dataset object, as Keras's own dataset
does: every iterator made over the dataset draws the next seeds, read or not
(Keras's `fit` makes one at the end of each epoch that it never reads:
`keras/src/trainers/epoch_iterator.py` line 125 of Keras 3.15.1; Keras 2 makes one
before its first epoch and one per epoch, `Keras2Fit`), so an epoch's order follows
from the seed and the number of iterators made before.
A dataset made again after a restart starts again at the first draw. Each
dataset here counts its draws: the iterators made over it (`iter(dataset)`, as
Keras's `fit` and `evaluate` and `as_numpy_iterator` make them) and the passes
`skip_passes` replayed. `rk.BackupAndRestore` saves, with each backup, the
count of every dataset `fit` read, and on restore moves the open dataset that
reads the same files with the same seed to that count, so that the resumed
epochs have the uninterrupted run's orders. Iterators made over a dataset
derived from it (`dataset.map(...)`) are not counted: such a run cannot be
continued exactly, and the restore warns.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any

from remote_keras import errors

_opened: list[weakref.ref] = []  # the datasets made in this process, oldest first
_lock = threading.Lock()


class Passes:
    """A dataset's counts: seeds drawn (iterators made, passes skipped) and passes read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0  # seeds drawn
        self.reads = 0  # passes that fetched files

    def begin(self) -> None:
        """One more draw (an iterator made, or a pass skipped)."""
        with self._lock:
            self.count += 1

    def read(self) -> None:
        """One more pass fetched files."""
        with self._lock:
            self.reads += 1


_counting: dict[type, type] = {}  # dataset class -> its subclass counting iterators


def _count_iterators(dataset: Any, passes: Passes) -> None:
    """Makes `iter(dataset)` count a draw (the class is swapped for a counting subclass)."""
    base = type(dataset)
    with _lock:
        counting = _counting.get(base)
        if counting is None:

            def __iter__(self: Any) -> Any:
                self._rk_passes.begin()
                return base.__iter__(self)

            attributes = {"__iter__": __iter__, "__module__": base.__module__}
            counting = _counting[base] = type(base.__name__, (base,), attributes)
    dataset._rk_passes = passes
    dataset.__class__ = counting


def attach(dataset: Any, order: Any, size: int, passes: Passes, seed: int | None) -> None:
    """Gives `dataset` its `skip_passes` and registers it for `BackupAndRestore`.

    Args:
        dataset: The `tf.data.Dataset` of one subset.
        order: Its `range(size).shuffle(...)` (or unshuffled) order of samples.
        size: Samples per pass.
        passes: The dataset's count of passes.
        seed: The shuffle's seed.
    """

    def skip_passes(count: int) -> None:
        """Advances the shuffle by `count` draws without reading a file.

        The shuffle's seed generator is shared by every iterator made over this
        dataset, so a dataset made again with the same seed, then `skip_passes(k)`,
        yields as its next pass the order the first one's iterator `k + 1` had.
        Keras's `fit` makes more iterators than it reads (one at each epoch's end
        when the number of batches is known: epoch `e` is then iterator `2e + 1`);
        `rk.BackupAndRestore` counts them for you.

        Args:
            count: Iterators made over the first dataset before the pass wanted.
        """
        for _ in range(int(count)):
            for _ in order.batch(max(size, 1)):
                pass
            passes.begin()

    dataset.skip_passes = skip_passes
    dataset._rk_seed = seed
    _count_iterators(dataset, passes)
    with _lock:
        _opened[:] = [ref for ref in _opened if ref() is not None]
        _opened.append(weakref.ref(dataset))


def open_datasets() -> list[Any]:
    """The datasets of this process still referenced, oldest first."""
    with _lock:
        found = [ref() for ref in _opened]
    return [dataset for dataset in found if dataset is not None]


Snapshot = list[tuple[weakref.ref, int, int]]


def counts() -> Snapshot:
    """A snapshot of every open dataset's draws and passes read."""
    return [(weakref.ref(d), d._rk_passes.count, d._rk_passes.reads) for d in open_datasets()]


def _key(dataset: Any) -> dict[str, Any]:
    return {
        "directory": errors.redact(str(dataset.directory)),
        "subset": dataset.subset,
        "seed": dataset._rk_seed,
        "files": len(dataset.file_paths),
    }


def _in(snapshot: Snapshot | None, dataset: Any) -> tuple[int, int] | None:
    for ref, count, reads in snapshot or ():
        if ref() is dataset:
            return count, reads
    return None


def state(at_train_begin: Snapshot, at_epoch_begin: Snapshot | None) -> list[dict[str, Any]]:
    """The draws to restore, for each dataset read since training began.

    Args:
        at_train_begin: `counts()` when `fit` began: datasets whose counts have
            not moved since were not read by this `fit`.
        at_epoch_begin: `counts()` when the epoch in progress began, for a
            backup taken mid-epoch (that epoch is read again from its start);
            `None` for a backup at an epoch's end.
    """
    saved = []
    for dataset in open_datasets():
        passes = dataset._rk_passes
        now = (passes.count, passes.reads)
        if _in(at_train_begin, dataset) == now:
            continue
        then = _in(at_epoch_begin, dataset) if at_epoch_begin is not None else None
        saved.append(
            {
                **_key(dataset),
                "passes": (then or now)[0],
                # More passes read than iterators made: some read through a derived dataset.
                "derived": passes.reads > passes.count,
            }
        )
    return saved


def warn_derived(at_train_begin: Snapshot) -> None:
    """Warns, once per dataset, when `fit` reads one through a dataset derived from it.

    Called after `fit`'s first step: a dataset whose passes read moved since
    training began while no iterator was made over it is read through another
    (`.cache()`, `.prefetch()`, `.map()`), whose iterators draw its shuffle's
    seeds uncounted, so a backup cannot continue its orders.
    """
    for dataset in open_datasets():
        passes = dataset._rk_passes
        begun = _in(at_train_begin, dataset)
        if begun is None or getattr(dataset, "_rk_warned_derived", False):
            continue
        count, reads = begun
        if passes.reads > reads and passes.count == count:
            dataset._rk_warned_derived = True
            warnings.warn(
                f"`fit` reads the dataset of {errors.redact(str(dataset.directory))!r} "
                f"(subset={dataset.subset!r}) through a dataset derived from it (such as "
                "`.cache()`, `.prefetch()` or `.map()`): `BackupAndRestore` cannot count its "
                "passes, so a resumed run's epochs would not have the interrupted run's "
                "orders. To resume exactly, pass the dataset itself to `fit` (it fetches "
                "ahead already; preprocessing layers go in the model).",
                stacklevel=3,
            )


def restore(saved: list[dict[str, Any]]) -> None:
    """Moves each open dataset reading what a saved one read to the saved count of passes.

    Among several open datasets reading the same files with the same seed,
    the one made last that has not passed the saved count is moved.
    """
    for entry in saved:
        passes = entry["passes"]
        key = {name: entry[name] for name in ("directory", "subset", "seed", "files")}
        if entry.get("derived"):
            warnings.warn(
                f"The dataset reading {key['directory']!r} (subset={key['subset']!r}) was read "
                "through a dataset derived from it (e.g. `dataset.map(...)`), whose passes it "
                "cannot count: the resumed epochs' orders may differ from the interrupted "
                "run's. Pass the dataset itself to `fit` (preprocessing layers in the model).",
                stacklevel=3,
            )
        same = [d for d in open_datasets() if _key(d) == key]
        behind = [d for d in same if d._rk_passes.count <= passes]
        if behind:
            behind[-1].skip_passes(passes - behind[-1]._rk_passes.count)
        elif same:
            warnings.warn(
                f"The dataset reading {key['directory']!r} (subset={key['subset']!r}) has "
                f"made {same[-1]._rk_passes.count} passes, more than the {passes} of the "
                "backup: its epochs do not continue the interrupted run's orders. Make the "
                "dataset again (with the same seed) before `fit` to resume them.",
                stacklevel=3,
            )
        else:
            warnings.warn(
                f"No open dataset reads {key['directory']!r} (subset={key['subset']!r}, "
                f"seed={key['seed']}, {key['files']} files) as the backed-up one did: "
                "its epochs start again at the first pass's order.",
                stacklevel=3,
            )


# ---------------------------------------------------------------------------- Keras 2


class Keras2Fit:
    """The datasets one Keras 2 `fit` reads, and the draws a backup of it saves.

    Keras 2's `fit` (TensorFlow 2.15's Keras; tf_keras 2.21 alike) makes its
    iterators in `DataHandler.enumerate_epochs` (`keras/src/engine/data_adapter.py`
    lines 1338-1346 of Keras 2.15, `tf_keras/src/engine/data_adapter.py` lines
    1350-1358): one as its first epoch begins, never read, then, where it reads
    a new pass each epoch (`DatasetAdapter.should_recreate_iterator`, lines 789-802
    and 799-811: no `steps_per_epoch`, or the dataset's size), one at the start of
    each epoch, before `on_epoch_begin()`; all after `on_train_begin()`, where
    Keras's backup is restored (`keras/src/engine/training.py` lines 1777-1794 of
    Keras 2.15, `tf_keras/src/engine/training.py` lines 1774-1791). So a resumed
    `fit` makes one iterator more than the uninterrupted run before the epoch it
    resumes: a backup that resumes at the next epoch saves the count less one;
    one that resumes mid-epoch saves the count its epoch began with less two,
    for the resumed epoch to read that epoch's order again, from its first batch
    (Keras 2 reads a new pass and counts its steps from the saved one).

    A validation pass is an `evaluate` of one epoch through the same method
    (`training.py` lines 2282-2288 of Keras 2.15, 2278-2284 of tf_keras), after
    `on_test_begin()`. Its draws are counted as made; a backup at an epoch's last
    step (resumed at the next epoch) comes before that epoch's pass, whose draws
    (as many as the last pass made, else two) it adds if `fit` validates after
    that epoch: `Model._should_eval` (lines 4041-4046 of Keras 2.15, 4036-4041 of
    tf_keras), `(epoch + 1) % validation_freq == 0`, with the smallest frequency
    the epochs of this `fit` seen so far fit.
    """

    def __init__(self) -> None:
        self._begun: Snapshot = []  # before the restore: what this `fit` moved since
        self._restored: Snapshot = []  # after it: what Keras moved before the first epoch
        self._epoch: Snapshot = []  # when the epoch in progress began
        self._test: Snapshot = []  # when the validation pass in progress began
        self._training: list[weakref.ref] | None = None  # known at the first epoch
        self._single: list[weakref.ref] = []  # one iterator for every epoch: not continued
        self._ended: dict[int, bool] = {}  # the epochs ended: validated after, or not
        self._validating = False

    def train_begin(self, saved: list[dict[str, Any]], resumes: tuple[int, int]) -> None:
        """`on_train_begin()`, after Keras restored: moves the datasets to the `saved` draws.

        Called once, on a new `Keras2Fit`, by each `fit`.

        Args:
            saved: The record's `datasets` (`[]`: none, or no backup).
            resumes: `(epoch, step)` the record resumes at.
        """
        self._begun = counts()
        epoch, step = resumes
        if step and any(entry.get("role") == "training" for entry in saved):
            warnings.warn(
                f"Keras 2 resumes epoch {epoch} at step {step}, but `fit` reads a new pass of "
                "its dataset: the resumed epoch trains that epoch's order from its first "
                "batch again (not the batches it had left); later epochs have the "
                'uninterrupted run\'s orders. Back up with `save_freq="epoch"` to resume '
                "a dataset exactly.",
                stacklevel=3,
            )
        restore(saved)
        self._restored = counts()

    def epoch_begin(self) -> bool:
        """`on_epoch_begin()`: whether `fit` trains on a counted dataset (its first epoch's)."""
        self._epoch = counts()
        if self._training is None:
            made = [(d, d._rk_passes.count - (_in(self._restored, d) or (0, 0))[0])
                    for d in open_datasets()]  # fmt: skip
            self._training = [weakref.ref(d) for d, count in made if count > 1]
            self._single = [weakref.ref(d) for d, count in made if count == 1]
            for dataset in (d for d, count in made if count == 1):
                warnings.warn(
                    f"`fit` reads one pass of the dataset of "
                    f"{errors.redact(str(dataset.directory))!r} across its epochs "
                    "(`steps_per_epoch` is not its number of batches): `BackupAndRestore` "
                    "cannot continue its order. Leave out `steps_per_epoch` to resume exactly.",
                    stacklevel=3,
                )
        return bool(self._training)

    def test_begin(self) -> None:
        """`on_test_begin()`: a validation pass begins."""
        self._test, self._validating = counts(), True

    def epoch_end(self, epoch: int) -> None:
        """`on_epoch_end()`, before a backup there."""
        for dataset in open_datasets() if self._validating else ():
            began = _in(self._test, dataset)
            if began is not None and dataset._rk_passes.count > began[0]:
                dataset._rk_validation_draws = dataset._rk_passes.count - began[0]
        self._ended[epoch], self._validating = self._validating, False

    def validates(self, epoch: int) -> bool:
        """Whether `fit` validates after `epoch`, by the epochs ended so far (else: each)."""
        for frequency in range(1, epoch + 2):
            if all(((e + 1) % frequency == 0) == v for e, v in self._ended.items()):
                return (epoch + 1) % frequency == 0
        return True

    def validation_ahead(self, epoch: int, resumes: int) -> bool:
        """Whether a backup now, resuming at epoch `resumes`, skips `epoch`'s validation pass."""
        return resumes == epoch + 1 and epoch not in self._ended and self.validates(epoch)

    def state(self, epoch: int, resumes: int) -> list[dict[str, Any]]:
        """The draws to restore, for each dataset this `fit` moved (restored or read).

        Args:
            epoch: The epoch in progress.
            resumes: The epoch the backup resumes at (`epoch`: mid-epoch).
        """
        training = [ref() for ref in self._training or ()]
        single = [ref() for ref in self._single]
        ahead = self.validation_ahead(epoch, resumes)
        saved = []
        for dataset in open_datasets():
            passes = dataset._rk_passes
            if _in(self._begun, dataset) == (passes.count, passes.reads):
                continue
            if any(dataset is d for d in single):
                continue
            role, count = "validation", passes.count
            if any(dataset is d for d in training):
                role, began = "training", _in(self._epoch, dataset)
                count = began[0] - 2 if resumes == epoch and began is not None else count - 1
            elif ahead:
                count += getattr(dataset, "_rk_validation_draws", 2)
            derived = passes.reads > passes.count
            saved.append({**_key(dataset), "passes": count, "derived": derived, "role": role})
        return saved
