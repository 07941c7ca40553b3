"""Which shuffle pass an `image_dataset_from_directory` dataset is at, for `BackupAndRestore`.

The dataset shuffles each pass with TensorFlow's `shuffle` op and one seed
generator shared by all passes of the dataset object, as Keras's own dataset
does: every iterator made over the dataset draws the next seeds, read or not
(Keras's `fit` makes one at the end of each epoch that it never reads:
`keras/src/trainers/epoch_iterator.py` line 125 of Keras 3.15.1; Keras 2.15 makes
one per epoch in `DataHandler.enumerate_epochs`, `keras/src/engine/data_adapter.py`
lines 1341-1346), so an epoch's order follows from the seed and the number of
iterators made before.
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
