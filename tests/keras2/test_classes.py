"""Keras 2's iterators are composed as Keras 3's: at most 4 of the package's classes."""

from __future__ import annotations

import pytest


def package_classes(cls: type) -> list[type]:
    """The classes of `cls`'s MRO defined by remote_keras (as `tests/test_batch_core.py`)."""
    return [base for base in cls.__mro__ if base.__module__.startswith("remote_keras.")]


@pytest.mark.parametrize("name", ["DataFrameIterator", "DirectoryIterator"])
def test_a_keras_2_iterator_class_has_at_most_four_of_the_package_classes(name):
    from remote_keras.keras2 import iterators
    from remote_keras.keras_agnostic.batch_core import RemoteBatchCore

    found = package_classes(getattr(iterators, name))
    assert len(found) <= 4, [c.__qualname__ for c in found]
    assert RemoteBatchCore in found
    declared: dict[str, str] = {}
    for cls in found:
        for attribute in vars(cls).get("__annotations__", {}):
            assert attribute not in declared, (
                f"{attribute}: {cls.__qualname__}, {declared[attribute]}"
            )
            declared[attribute] = cls.__qualname__
