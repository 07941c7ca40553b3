"""`RemoteBatchCore`: the iterators' one shared class, composed of parts rather than mixins."""

from __future__ import annotations

import pickle

import pytest

from remote_keras.keras3.iterators import DataFrameIterator, DirectoryIterator
from remote_keras.keras_agnostic.batch_core import RemoteBatchCore
from remote_keras.keras_agnostic.lifecycle import ProcessLocal


def package_classes(cls: type) -> list[type]:
    """The classes of `cls`'s MRO defined by remote_keras."""
    return [base for base in cls.__mro__ if base.__module__.startswith("remote_keras.")]


@pytest.mark.parametrize("iterator_class", [DataFrameIterator, DirectoryIterator])
def test_an_iterator_class_has_at_most_four_of_the_package_classes(iterator_class):
    found = package_classes(iterator_class)
    assert len(found) <= 4, [c.__qualname__ for c in found]
    assert RemoteBatchCore in found


@pytest.mark.parametrize("iterator_class", [DataFrameIterator, DirectoryIterator])
def test_no_package_class_of_an_iterator_declares_what_another_declares(iterator_class):
    declared: dict[str, str] = {}
    for cls in package_classes(iterator_class):
        for name in vars(cls).get("__annotations__", {}):
            assert name not in declared, f"{name}: {cls.__qualname__} and {declared[name]}"
            declared[name] = cls.__qualname__


def test_each_process_gets_its_own_parts_and_a_pickled_copy_none_of_them(image_dir):
    import remote_keras as rk

    root, _ = image_dir
    it = rk.ImageDataGenerator().flow_from_directory(root, target_size=(8, 8), batch_size=2)
    with it:
        assert isinstance(it._local, ProcessLocal) and it.lock is it._local.lock
        state = it.__getstate__()
        assert "_local" not in state and "lock" not in state
        copy = pickle.loads(pickle.dumps(it))
        with copy:
            assert copy._local is not it._local and copy._local.is_here()
            assert copy[0][0].shape == it[0][0].shape
