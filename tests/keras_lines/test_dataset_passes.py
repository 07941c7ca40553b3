"""The passes Keras makes over a dataset, counted for `BackupAndRestore` (`dataset_passes`)."""

from __future__ import annotations

import warnings

import pytest

from remote_keras.keras_lines import dataset_passes
from remote_keras.keras_lines.dataset_passes import Keras2Fit, Passes


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


# ---------------------------------------------------------------------------- Keras 2


def _keras2_epoch(fit: Keras2Fit, epoch: int, train: _Dataset, validation: _Dataset) -> None:
    """One epoch of Keras 2's `fit`, as it makes iterators: the epoch's, then validation's."""
    list(train)  # the epoch's iterator, made before `on_epoch_begin()`
    assert fit.epoch_begin()
    fit.test_begin()
    iter(validation), list(validation)  # `evaluate` of one epoch: two iterators
    fit.epoch_end(epoch)


def _keras2_run(saved, resumes, epochs):
    """A run (in effect a process): datasets made again, a `fit` resumed at `resumes`."""
    train, validation = _Dataset("s3://b/train", 1), _Dataset("s3://b/val", 1)
    fit = Keras2Fit()
    fit.train_begin(saved, resumes)
    iter(train)  # made as the first epoch begins, never read
    for epoch in epochs:
        _keras2_epoch(fit, epoch, train, validation)
    return fit, train, validation


def test_keras2_a_backup_at_an_epochs_end_resumes_the_next_epochs_draws():
    fit, train, validation = _keras2_run([], (0, 0), range(2))
    assert (train.passes.count, validation.passes.count) == (3, 4)  # epoch 1 read draw 3
    saved = fit.state(1, 2)
    assert [(s["role"], s["passes"]) for s in saved] == [("training", 2), ("validation", 4)]
    del fit, train, validation
    _, train, validation = _keras2_run(saved, (2, 0), [2])
    # Epoch 2 reads draw 4 and its validation draws 5 and 6, as without the interruption.
    assert (train.passes.count, validation.passes.count) == (4, 6)


def test_keras2_a_backup_mid_epoch_reads_that_epoch_again_and_says_so():
    fit, train, validation = _keras2_run([], (0, 0), range(1))
    list(train)
    fit.epoch_begin()  # epoch 1 reads draw 3; a backup after its step 1
    saved = fit.state(1, 1)
    assert [(s["role"], s["passes"]) for s in saved] == [("training", 1), ("validation", 2)]
    del fit, train, validation
    with pytest.warns(UserWarning, match="resumes epoch 1 at step 2.*save_freq"):
        _, train, _ = _keras2_run(saved, (1, 2), [1])
    assert train.passes.count == 3  # epoch 1's draw again


def test_keras2_a_backup_before_an_epochs_validation_counts_that_pass():
    fit, train, validation = _keras2_run([], (0, 0), range(1))
    list(train)
    fit.epoch_begin()  # epoch 1's last step: Keras 2 resumes at epoch 2, skipping validation
    assert fit.validation_ahead(1, 2) and not fit.validation_ahead(0, 1)
    assert [s["passes"] for s in fit.state(1, 2)] == [2, 2 + 2]


def test_keras2_validation_freq_is_told_from_the_epochs_seen():
    fit = Keras2Fit()
    assert fit.validates(0) and fit.validates(5)  # nothing seen: every epoch, Keras's default
    fit._ended = {0: False, 1: True, 2: False}
    assert fit.validates(3) and not fit.validates(4)  # `validation_freq=2`
    fit._ended = {3: True, 4: False}  # a `fit` resumed at epoch 3
    assert fit.validates(5) and not fit.validates(6)


def test_keras2_one_iterator_for_every_epoch_is_named_and_not_saved():
    train = _Dataset("s3://b/train", 1)
    fit = Keras2Fit()
    fit.train_begin([], (0, 0))
    iter(train)  # `steps_per_epoch` not the dataset's size: no new iterator each epoch
    with pytest.warns(UserWarning, match="one pass of the dataset"):
        assert not fit.epoch_begin()
    assert fit.state(0, 1) == []


def test_keras2_a_validation_dataset_read_through_a_derived_one_is_saved_as_such():
    train, validation = _Dataset("s3://b/train", 1), _Dataset("s3://b/val", 1)
    fit = Keras2Fit()
    fit.train_begin([], (0, 0))
    iter(train), list(train)
    fit.epoch_begin()
    fit.test_begin()
    validation.passes.read()  # `validation_data=dataset.map(...)`: no iterator over it
    fit.epoch_end(0)
    saved = fit.state(0, 1)
    assert [(s["role"], s["derived"]) for s in saved] == [("training", False), ("validation", True)]
    del train, validation
    again = _Dataset("s3://b/train", 1), _Dataset("s3://b/val", 1)
    with pytest.warns(UserWarning, match="derived from it"):
        Keras2Fit().train_begin(saved, (1, 0))  # a restore says so
    assert [d.passes.count for d in again] == [1, 0]
