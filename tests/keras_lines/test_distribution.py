"""Shard detection from `keras.distribution` across the supported Keras range, 3.8 to 3.15.

Only from Keras 3.15 does a `keras.distribution.Distribution` say which shard a process
reads (`num_processes`, `data_shard_id`, `num_model_replicas`). On 3.8 to 3.14, a
distribution set while several (JAX) processes run must raise, naming `num_shards` /
`shard_index`, instead of letting every process read the whole dataset. These tests run
in one process on the TensorFlow backend: stand-in distributions have the old or the new
API, and the backend's process count is patched to simulate a multi-process run. They
also run on the oldest supported Keras (`make test-oldest`), where the installed Keras's
own `DataParallel` lacks the new API.
"""

from __future__ import annotations

import sys

import keras
import pytest

import remote_keras as rk
from remote_keras.keras_lines import distribution
from remote_keras.pipeline import sharding

KERAS = tuple(int(part) for part in keras.__version__.split(".")[:2])


class OldDistribution:
    """A `keras.distribution` of Keras 3.8 to 3.14: it does not say its processes or shard."""


class NewDistribution:
    """A `keras.distribution` of Keras >= 3.15."""

    def __init__(self, processes: int, shard: int, replicas: int | None):
        self._processes, self._shard, self._replicas = processes, shard, replicas

    @property
    def num_processes(self) -> int:
        return self._processes

    @property
    def data_shard_id(self) -> int:
        return self._shard

    @property
    def num_model_replicas(self) -> int:
        if self._replicas is None:
            raise NotImplementedError
        return self._replicas


@pytest.fixture
def processes(monkeypatch):
    """Sets how many processes the Keras backend reports, as `jax.distributed` would."""
    from keras.src.backend import distribution_lib

    def simulate(count: int, index: int = 0) -> None:
        monkeypatch.setattr(distribution_lib, "num_processes", lambda: count, raising=False)
        monkeypatch.setattr(distribution_lib, "process_id", lambda: index, raising=False)

    return simulate


@pytest.fixture
def active(monkeypatch):
    """Makes `keras.distribution.distribution()` return the given object."""

    def set_active(current) -> None:
        monkeypatch.setattr(keras.distribution, "distribution", lambda: current)

    return set_active


def test_old_keras_with_several_processes_raises_instead_of_reading_everything(
    image_dir, processes, active
):
    processes(2)
    active(OldDistribution())
    directory, df = image_dir
    message = r"num_shards=jax\.process_count\(\), shard_index=jax\.process_index\(\)"
    with pytest.raises(RuntimeError, match=message) as error:
        rk.ImageDataGenerator().flow_from_dataframe(df, directory)
    assert "2 processes" in str(error.value)
    assert "Keras >= 3.15" in str(error.value)
    assert "OldDistribution" in str(error.value)
    with pytest.raises(RuntimeError, match="num_shards"):
        rk.ImageDataGenerator().flow_from_directory(directory)


def test_old_keras_with_explicit_shards_works(image_dir, processes, active):
    processes(2, index=1)
    active(OldDistribution())
    directory, df = image_dir
    gen = rk.ImageDataGenerator()
    with gen.flow_from_dataframe(df, directory, seed=0, num_shards=2, shard_index=1) as it:
        assert it.shard == sharding.Shard(1, 2, "pad", "argument")
    with gen.flow_from_dataframe(df, directory, num_shards=1) as it:
        assert it.shard.count == 1 and it.samples == len(df)


def test_old_keras_in_one_process_reads_everything(image_dir, processes, active):
    processes(1)
    active(OldDistribution())
    directory, df = image_dir
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory) as it:
        assert it.shard == sharding.Shard()


def test_old_keras_without_a_backend_process_count_asks_jax(monkeypatch, active):
    from keras.src.backend import distribution_lib

    class FakeJax:
        @staticmethod
        def process_count() -> int:
            return 4

    monkeypatch.delattr(distribution_lib, "num_processes", raising=False)
    monkeypatch.setitem(sys.modules, "jax", FakeJax)
    active(OldDistribution())
    with pytest.raises(RuntimeError, match="4 processes"):
        sharding.detect()


def test_new_keras_says_the_shard(image_dir, active):
    active(NewDistribution(processes=4, shard=3, replicas=8))
    directory, df = image_dir
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, seed=0) as it:
        assert it.shard == sharding.Shard(3, 4, "pad", "keras.distribution")
    active(NewDistribution(processes=4, shard=1, replicas=2))  # 2 processes per replica
    assert sharding.detect() == sharding.Shard(1, 2, source="keras.distribution")
    active(NewDistribution(processes=1, shard=0, replicas=1))
    assert sharding.detect() == sharding.Shard()


def test_new_keras_distribution_that_cannot_say_its_replicas_raises(active):
    active(NewDistribution(processes=2, shard=0, replicas=None))
    with pytest.raises(RuntimeError, match="does not say how it splits the data"):
        sharding.detect()


def test_tf_multi_worker_check_never_asks_keras_distribution(processes, active):
    processes(2)
    active(OldDistribution())
    assert distribution.in_tf_multi_worker() is False


def test_the_installed_keras_distribution(processes):
    """Keras's own `DataParallel`: the new API from 3.15 on, a clear error before it."""
    processes(2)  # before construction: Keras reads the process count in __init__
    parallel = keras.distribution.DataParallel(devices=["cpu:0"])
    has_api = all(hasattr(type(parallel), name) for name in distribution.KERAS_SHARD_API)
    assert has_api == (KERAS >= (3, 15)), keras.__version__
    with parallel.scope():
        if has_api:
            sharding.detect()  # Keras answers (1 replica on one CPU: no split)
        else:
            with pytest.raises(RuntimeError, match=f"Keras {keras.__version__} cannot say"):
                sharding.detect()
    assert keras.distribution.distribution() is None
