"""The passes Keras makes over a dataset, counted for `BackupAndRestore` (`dataset_passes`)."""

from __future__ import annotations

import warnings

import pytest

from remote_keras.keras_lines import dataset_passes
from remote_keras.keras_lines.dataset_passes import Passes


class _Order:
    """Stands in for the dataset's `range(size).shuffle(...)`: reading a pass draws a seed."""

    def __init__(self) -> None:
        self.read = 0

    def batch(self, size: int) -> list[int]:
        self.read += 1
        return [0]


class _Dataset:
    """What `attach` needs of a `tf.data.Dataset`: iterators, and what it reads."""

    def __init__(self, directory: str, seed: int) -> None:
        self.directory, self.subset, self.file_paths = directory, None, ["a", "b", "c"]
        self.passes = Passes()
        self.order = _Order()
        dataset_passes.attach(self, self.order, 3, self.passes, seed)

    def __iter__(self):
        self.passes.read()
        return iter([1, 2, 3])


@pytest.fixture(autouse=True)
def _no_datasets_of_other_tests():
    with dataset_passes._lock:
        saved, dataset_passes._opened[:] = list(dataset_passes._opened), []
    yield
    with dataset_passes._lock:
        dataset_passes._opened[:] = saved


def test_each_iterator_made_draws_one_pass():
    dataset = _Dataset("s3://b/train", seed=1)
    assert isinstance(dataset, _Dataset)  # the counting class is a subclass
    list(dataset)
    list(dataset)
    assert (dataset.passes.count, dataset.passes.reads) == (2, 2)


def test_a_backup_restores_the_draws_into_the_dataset_made_again():
    first = _Dataset("s3://b/train", seed=1)
    begun = dataset_passes.counts()
    for _ in range(3):
        list(first)
    saved = dataset_passes.state(begun, None)
    assert saved == [
        {"directory": "s3://b/train", "subset": None, "seed": 1, "files": 3,
         "passes": 3, "derived": False}
    ]  # fmt: skip
    del first
    again = _Dataset("s3://b/train", seed=1)
    dataset_passes.restore(saved)
    assert again.passes.count == 3 and again.order.read == 3  # the shuffle drew 3 seeds


def test_a_backup_mid_epoch_reads_that_epoch_again():
    dataset = _Dataset("s3://b/train", seed=1)
    begun = dataset_passes.counts()
    list(dataset)
    epoch_began = dataset_passes.counts()
    list(dataset)
    assert dataset_passes.state(begun, epoch_began)[0]["passes"] == 1


def test_a_dataset_read_through_a_derived_one_is_named():
    dataset = _Dataset("s3://b/train", seed=1)
    begun = dataset_passes.counts()
    dataset.passes.read()  # read, but no iterator made over it: a `.map()` of it was
    with pytest.warns(UserWarning, match="derived from it"):
        dataset_passes.warn_derived(begun)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dataset_passes.warn_derived(begun)  # once per dataset


def test_no_open_dataset_for_a_backup_is_said():
    saved = [{"directory": "s3://b/x", "subset": None, "seed": 2, "files": 3, "passes": 1}]
    with pytest.warns(UserWarning, match="No open dataset reads"):
        dataset_passes.restore(saved)
