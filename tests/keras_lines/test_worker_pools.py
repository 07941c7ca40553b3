"""Keras's registries of its worker pools, read from the modules Keras loaded."""

from __future__ import annotations

import sys
import types

from remote_keras.keras_lines import worker_pools


def test_the_pools_of_every_loaded_registry_are_found(monkeypatch):
    pool_a, pool_b = object(), object()
    for name, pools in zip(worker_pools.REGISTRIES, ({pool_a}, set(), {pool_b})):
        module = types.ModuleType(name)
        module._DATA_POOLS = pools  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)
    found = worker_pools.keras_worker_pools()
    assert len(found) == 2 and pool_a in found and pool_b in found


def test_no_registry_loaded_means_no_pools(monkeypatch):
    for name in worker_pools.REGISTRIES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert worker_pools.keras_worker_pools() == []


def test_the_installed_kerass_registry_is_where_the_layer_looks():
    import keras  # noqa: F401 - loads Keras's adapter module
    from keras.src.trainers.data_adapters import py_dataset_adapter

    assert py_dataset_adapter.__name__ in worker_pools.REGISTRIES
    assert list(py_dataset_adapter._DATA_POOLS) == worker_pools.keras_worker_pools() == []
