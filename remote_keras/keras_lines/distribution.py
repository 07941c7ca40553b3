"""Where a training cluster says this process stands, and how Keras shards what it reads.

Read from the frameworks the program already loaded, never imported here
(`sys.modules`): the active `tf.distribute` strategy, the `TF_CONFIG`
environment variable (chief and workers take part; evaluators and parameter
servers read everything), and a multi-process `keras.distribution` (JAX).

Keras lines: only from Keras 3.15 does a `keras.distribution` say which shard
a process reads (`Distribution.num_processes`, `data_shard_id`,
`num_model_replicas`: `KERAS_SHARD_API`). On Keras 3.8 to 3.14, a distribution
set while several (JAX) processes run raises a `RuntimeError` asking for
explicit `num_shards` / `shard_index` rather than let every process silently
read the whole dataset; with one process, it reads everything, as it should.
From Keras 3.16, Keras's `fit` shards a `PyDataset`'s batches itself
(`keras_batch_shard`); from 3.15 it splits a `tf.data.Dataset` after reading it
(`keras_dataset_split`). Keras 2 has no `keras.distribution`: `tf.distribute`
says it.
"""

from __future__ import annotations

import json
import os
import sys


def find(sources: tuple[str, ...] | None = None) -> tuple[int, int, str] | None:
    """This process's place in the first cluster found among `SOURCES` that has several.

    Args:
        sources: The names of the sources to ask, in `SOURCES`'s order (`None`: all).

    Returns:
        `(index, count, source)`, or `None` where no source has more than one process.
    """
    for source, look in SOURCES:
        if sources is not None and source not in sources:
            continue
        found = look()
        if found is not None and found[1] > 1:
            return found[0], found[1], source
    return None


def keras_dataset_split() -> int:
    """Processes among which Keras's `fit` splits a `tf.data.Dataset` after reading it.

    A multi-process distribution with `auto_shard_dataset=True` (the default of
    `DataParallel`) rebatches a `tf.data.Dataset` to the per-process batch and
    keeps every `count`-th of those batches: `Distribution.distribute_dataset`
    (`distribution_lib.py` lines 440-505 of Keras 3.15.1) or, from Keras 3.16,
    `TFDatasetAdapter` (`tf_dataset_adapter.py` lines 35-83 of
    3.16.0.dev2026102704). Every process reads every file. `1` where Keras does
    not split one (no distribution, one process, or one model replica, whose
    processes all train on the whole batch).
    """
    distribution = getattr(sys.modules.get("keras"), "distribution", None)
    current = distribution.distribution() if distribution is not None else None
    if current is None or not getattr(current, "auto_shard_dataset", False):
        return 1
    if not all(hasattr(type(current), name) for name in KERAS_SHARD_API):  # Keras < 3.15
        return _backend_process_count()
    if current.num_processes <= 1:
        return 1
    try:
        replicas = int(current.num_model_replicas)
    except NotImplementedError:
        return int(current.num_processes)
    return 1 if replicas == 1 else min(replicas, int(current.num_processes))


def keras_batch_shard() -> tuple[int, int] | None:
    """`(data_shard_id, num_data_shards)` where Keras's `fit` shards a `PyDataset` itself.

    From Keras 3.16, a distribution with `auto_shard_dataset=True` (the default of
    `DataParallel`) makes Keras's `PyDataset` adapter ask each process for every
    `num_data_shards`-th batch only (`py_dataset_adapter.py` lines 220-222, 277 and
    698 of 3.16.0.dev2026102704). Callers check the Keras line (`KerasLine.batch_shard`).
    """
    distribution = getattr(sys.modules.get("keras"), "distribution", None)
    current = distribution.distribution() if distribution is not None else None
    if current is None or not getattr(current, "auto_shard_dataset", False):
        return None
    try:
        count = int(current.num_data_shards)
        index = int(current.data_shard_id)
    except NotImplementedError:
        return None
    return (index, count) if count > 1 else None


def in_tf_multi_worker() -> bool:
    """Whether TensorFlow multi-worker training (a strategy or `TF_CONFIG`) is set up."""
    return find(("tf.distribute", "TF_CONFIG")) is not None  # never asks keras.distribution


def _position(cluster: dict, task_type: str | None, task_id: int | None) -> tuple[int, int]:
    """`(index, count)` of a task among the cluster's chief and workers."""
    members = [("chief", i) for i in range(len(cluster.get("chief", [])))]
    members += [("worker", i) for i in range(len(cluster.get("worker", [])))]
    if task_type is None or task_id is None or (task_type, task_id) not in members:
        return 0, 1  # evaluator, parameter server, or not part of the cluster
    return members.index((task_type, task_id)), len(members)


def _from_tf_config() -> tuple[int, int] | None:
    text = os.environ.get("TF_CONFIG")
    if not text:
        return None
    try:
        config = json.loads(text)
        cluster = config.get("cluster") or {}
        task = config.get("task") or {}
        return _position(cluster, task.get("type"), int(task.get("index", 0)))
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"TF_CONFIG is not valid JSON of a cluster and task: {exc}") from exc


def _from_tf_strategy() -> tuple[int, int] | None:
    tf = sys.modules.get("tensorflow")  # only if the program uses TensorFlow already
    if tf is None or not tf.distribute.has_strategy():
        return None
    resolver = getattr(tf.distribute.get_strategy(), "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return None
    return _position(resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id)


def _from_keras_distribution() -> tuple[int, int] | None:
    keras = sys.modules.get("keras")  # only if the program uses Keras already
    # Keras 2 (TensorFlow 2.15's `keras`) has no `keras.distribution`: tf.distribute says it.
    distribution = getattr(keras, "distribution", None)
    if distribution is None:
        return None
    current = distribution.distribution()
    if current is None:
        return None
    if all(hasattr(type(current), name) for name in KERAS_SHARD_API):  # Keras >= 3.15
        processes = current.num_processes
        if processes <= 1:
            return None
        try:
            return current.data_shard_id, min(current.num_model_replicas, processes)
        except NotImplementedError:
            reason = f"{type(current).__name__} does not say how it splits the data"
    else:
        processes = _backend_process_count()
        if processes <= 1:
            return None
        reason = (
            f"Keras {keras_version()} cannot say which part of the data this process reads "
            "(Distribution.num_processes, data_shard_id and num_model_replicas need Keras >= 3.15)"
        )
    raise RuntimeError(
        f"A keras.distribution ({type(current).__name__}) is set and {processes} processes run, "
        f"but {reason}, so every process would read the whole dataset. Pass the shard "
        "explicitly, e.g. num_shards=jax.process_count(), shard_index=jax.process_index() "
        "(or num_shards=1 to read everything in every process), or upgrade Keras."
    )


# Where `detect` looks, in order.
SOURCES = (
    ("tf.distribute", _from_tf_strategy),
    ("TF_CONFIG", _from_tf_config),
    ("keras.distribution", _from_keras_distribution),
)

# What a `keras.distribution.Distribution` tells about its processes from Keras 3.15 on.
KERAS_SHARD_API = ("num_processes", "data_shard_id", "num_model_replicas")


def _backend_process_count() -> int:
    """Processes of the Keras backend's multi-process runtime (JAX's, before Keras 3.15)."""
    # The backend's module, loaded with Keras (this is only asked when Keras is): no import here.
    distribution_lib = getattr(sys.modules.get("keras.src.backend"), "distribution_lib", None)
    count = getattr(distribution_lib, "num_processes", None)
    if count is not None:
        return int(count())
    jax = sys.modules.get("jax")
    return int(jax.process_count()) if jax is not None else 1


def keras_version() -> str:
    """`keras.__version__` of the Keras the program imported (`"?"` before it did)."""
    return str(getattr(sys.modules.get("keras"), "__version__", "?"))
