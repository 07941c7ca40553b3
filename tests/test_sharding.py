"""Sharding between training workers: arguments, detection, and two real MWMS workers on S3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

import keras
import numpy as np
import pytest

import remote_keras as rk
from remote_keras.keras_lines import line_for_version
from remote_keras.pipeline import sharding
from remote_keras.testing.data import write_class_tree
from tests.helpers import free_ports


def _sample_ids(it) -> list[int]:
    """Indices of the samples an iterator yields over one epoch, read from the plans."""
    with it.lock:
        order = it._planner.order(it.epoch)
    return [int(j) for j in order]


def _ids_read(it) -> list[int]:
    """The samples actually read: labels hold the row index (class_mode="raw", y_col="value")."""
    return [int(v) for i in range(len(it)) for v in it[i][1]]


@pytest.fixture
def numbered(image_dir):
    """The image folder's dataframe with `value` = row index, so batches name their rows."""
    directory, df = image_dir
    return directory, df.assign(value=np.arange(len(df), dtype="float32"))


@pytest.mark.parametrize("remainder", ["pad", "drop"])
@pytest.mark.parametrize("count", [2, 3, 4, 5])
def test_shards_are_disjoint_cover_the_data_and_have_equal_length(numbered, count, remainder):
    directory, df = numbered
    n = len(df)  # 21
    gen = rk.ImageDataGenerator()
    for epoch in range(2):
        per_shard = []
        for index in range(count):
            with gen.flow_from_dataframe(
                df, directory, y_col="value", class_mode="raw", target_size=(4, 4),
                batch_size=4, seed=7, num_shards=count, shard_index=index,
                shard_remainder=remainder,
            ) as it:  # fmt: skip
                assert it.shard == sharding.Shard(index, count, remainder, "argument")
                for _ in range(epoch):
                    it.on_epoch_end()
                per_shard.append(_ids_read(it))
                assert len(it) == -(-len(per_shard[-1]) // 4)
        sizes = {len(ids) for ids in per_shard}
        assert sizes == {-(-n // count) if remainder == "pad" else n // count}
        everything = sum(per_shard, [])
        if remainder == "pad":
            assert set(everything) == set(range(n))
            assert len(everything) - n == (-n) % count  # only the padding repeats
        else:
            assert len(set(everything)) == len(everything) == n - n % count
        if epoch == 0:
            first_epoch = per_shard
    assert per_shard != first_epoch  # a new global permutation each epoch


@pytest.mark.parametrize("remote", [False, True], ids=["local", "s3"])
def test_flow_from_directory_shards_too(image_dir, s3_images, s3_options, remote):
    directory = s3_images[0] if remote else image_dir[0]
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    seen = []
    for index in range(2):
        with gen.flow_from_directory(
            directory, target_size=(4, 4), batch_size=4, seed=2, num_shards=2, shard_index=index
        ) as it:
            assert len(it) == 3  # 21 images: 11 per shard (one padded), batches of 4, 4, 3
            with it.lock:
                seen.append([it.filenames[j] for j in it._planner.order(0)])
            assert sum(len(it[i][0]) for i in range(len(it))) == 11
    assert len(seen[0]) == len(seen[1]) == 11
    assert set(seen[0]) | set(seen[1]) == set(it.filenames)


def test_a_single_shard_is_the_unsharded_iterator(numbered):
    directory, df = numbered
    gen = rk.ImageDataGenerator(rotation_range=30)
    options = dict(y_col="value", class_mode="raw", target_size=(8, 8), batch_size=5, seed=3)
    with (
        gen.flow_from_dataframe(df, directory, **options) as plain,
        gen.flow_from_dataframe(df, directory, num_shards=1, shard_index=0, **options) as one,
    ):
        for i in range(len(plain)):
            np.testing.assert_array_equal(plain[i][0], one[i][0])


def test_shards_draw_different_augmentations(numbered):
    directory, df = numbered
    df = df.assign(filename=df["filename"].iloc[0])  # every row the same image
    gen = rk.ImageDataGenerator(rotation_range=90, zoom_range=0.5)
    batches = []
    for index in range(2):
        with gen.flow_from_dataframe(
            df, directory, y_col="value", class_mode="raw", target_size=(8, 8), batch_size=4,
            seed=1, num_shards=2, shard_index=index, validate_filenames=False,
        ) as it:  # fmt: skip
            batches.append(it[0][0])
    assert not np.array_equal(batches[0], batches[1])


def test_shuffling_without_a_seed_uses_one_seed_on_every_worker(numbered):
    directory, df = numbered
    gen = rk.ImageDataGenerator()
    orders = []
    for index in range(2):
        with pytest.warns(UserWarning, match="using seed=0"):
            it = gen.flow_from_dataframe(
                df, directory, target_size=(4, 4), num_shards=2, shard_index=index
            )
        with it:
            assert it.seed == 0
            orders.append(_sample_ids(it))
    assert not set(orders[0]) & set(orders[1][:-1])  # the last one of shard 1 is padding


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_shards": 2}, "Pass both"),
        ({"shard_index": 1}, "Pass both"),
        ({"num_shards": 2, "shard_index": 2}, r"in \[0, 2\)"),
        ({"num_shards": 0, "shard_index": 0}, "integer >= 1"),
        ({"num_shards": 2, "shard_index": 0, "shard_remainder": "wrap"}, '"pad" or "drop"'),
    ],
)
def test_bad_shard_arguments_are_refused(image_dir, kwargs, message):
    directory, df = image_dir
    with pytest.raises(ValueError, match=message):
        rk.ImageDataGenerator().flow_from_dataframe(df, directory, **kwargs)


@pytest.mark.parametrize(
    ("cluster", "task", "expected"),
    [
        ({"worker": ["a:1", "b:1", "c:1"]}, {"type": "worker", "index": 2}, (2, 3)),
        ({"chief": ["a:1"], "worker": ["b:1", "c:1"]}, {"type": "chief", "index": 0}, (0, 3)),
        ({"chief": ["a:1"], "worker": ["b:1", "c:1"]}, {"type": "worker", "index": 0}, (1, 3)),
        (
            {"chief": ["a:1"], "worker": ["b:1"], "evaluator": ["e:1"]},
            {"type": "evaluator", "index": 0},
            (0, 1),
        ),  # fmt: skip
        ({"worker": ["a:1"]}, {"type": "worker", "index": 0}, (0, 1)),
    ],
)
def test_tf_config_is_detected(monkeypatch, image_dir, cluster, task, expected):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": task}))
    directory, df = image_dir
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, seed=0) as it:
        assert (it.shard.index, it.shard.count) == expected
        assert it.shard.source == ("TF_CONFIG" if expected[1] > 1 else "none")
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, num_shards=1) as it:
        assert it.shard.count == 1  # an explicit argument wins


def test_a_single_machine_strategy_does_not_shard(image_dir):
    import tensorflow as tf

    directory, df = image_dir
    with tf.distribute.MirroredStrategy(["CPU:0"]).scope():
        with rk.ImageDataGenerator().flow_from_dataframe(df, directory) as it:
            assert it.shard == sharding.Shard()
            assert len(it) == -(-len(df) // 32)


def test_broken_tf_config_is_named(monkeypatch, image_dir):
    monkeypatch.setenv("TF_CONFIG", "{not json")
    directory, df = image_dir
    with pytest.raises(ValueError, match="TF_CONFIG"):
        rk.ImageDataGenerator().flow_from_dataframe(df, directory)


def test_fit_refuses_a_shard_that_tf_distribute_would_split_again(monkeypatch, numbered):
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    directory, df = numbered
    model = keras.Sequential(
        [keras.Input((4, 4, 3)), keras.layers.Flatten(), keras.layers.Dense(1)]
    )
    model.compile("sgd", "mse")
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}})
    )
    with rk.ImageDataGenerator().flow_from_dataframe(
        df, directory, y_col="value", class_mode="raw", target_size=(4, 4), seed=0
    ) as it:
        assert it.shard == sharding.Shard(1, 2, "pad", "TF_CONFIG")
        with pytest.raises(ValueError, match=r"to_tf_dataset\(\)"):
            model.fit(it, epochs=1, verbose=0)
        history = model.fit(it.to_tf_dataset(), epochs=1, verbose=0)  # not split again here
    assert np.isfinite(history.history["loss"][0])


# Records `(epoch, url)` of every read, for the worker scripts below.
RECORDING_LOADER = """
from remote_keras.storage.loaders import FsspecLoader

reads = []

class RecordingLoader(FsspecLoader):
    iterator = None

    def load_many(self, paths, executor=None):
        reads.extend([(self.iterator.epoch, p) for p in paths])
        return super().load_many(paths, executor=executor)

    def load_many_checked(self, paths, executor=None):  # what reads with verify_checksums=True
        reads.extend([(self.iterator.epoch, p) for p in paths])
        return super().load_many_checked(paths, executor=executor)
"""

WORKER_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    spec, index = json.loads(sys.argv[1]), int(sys.argv[2])
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": spec["workers"]}, "task": {"type": "worker", "index": index}}
    )
    import keras, numpy as np, pandas as pd, tensorflow as tf
    import remote_keras as rk
    RECORDING_LOADER

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    loader = RecordingLoader(spec["options"])
    df = pd.DataFrame(spec["rows"])
    gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=spec["options"])
    train = gen.flow_from_dataframe(df, spec["directory"], target_size=(8, 8), batch_size=4,
                                    loader=loader)
    loader.iterator = train
    with strategy.scope():
        val = gen.flow_from_dataframe(df, spec["directory"], target_size=(8, 8), batch_size=4,
                                      shuffle=False)
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(3, activation="softmax")])
        optimizer = keras.optimizers.SGD(0.1)
    # Keras 3's `fit` fails under MultiWorkerMirroredStrategy (keras-team/keras#20585),
    # so this is TensorFlow's custom training loop for it.
    per_example = keras.losses.CategoricalCrossentropy(reduction=None)

    def replica_step(x, y, training):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(per_example(y, model(x, training=training)))
        if training:
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch):
        return strategy.reduce("SUM", strategy.run(replica_step, args=(*batch, True)), None)

    @tf.function
    def val_step(batch):
        return strategy.reduce("SUM", strategy.run(replica_step, args=(*batch, False)), None)

    train_data = strategy.experimental_distribute_dataset(train.to_tf_dataset())
    val_data = strategy.experimental_distribute_dataset(val.to_tf_dataset())
    steps, losses, val_losses = [], [], []
    for epoch in range(2):
        epoch_losses = [float(train_step(batch)) for batch in train_data]
        steps.append(len(epoch_losses))
        losses.append(sum(epoch_losses) / len(epoch_losses))
        val_losses.append(float(np.mean([float(val_step(batch)) for batch in val_data])))
    result = {
        "shard": [train.shard.index, train.shard.count, train.shard.source],
        "val_shard": [val.shard.index, val.shard.count, val.shard.source],
        "reads": reads, "steps": steps, "loss": losses, "val_loss": val_losses,
        "seed": train.seed, "stats_images": train.stats.images,
        "weights": [float(np.sum(w)) for w in model.get_weights()],
    }
    train.close(); val.close()
    print("RESULT " + json.dumps(result), flush=True)
    """
).replace("RECORDING_LOADER\n", RECORDING_LOADER)


@pytest.mark.slow
def test_two_multi_worker_mirrored_workers_read_disjoint_shards_of_s3(s3_images, s3_options):
    url, df = s3_images
    rows = df[["filename", "class"]].iloc[:20]  # 20 images: 10 per worker, batches of 4, 4, 2
    spec = {
        "workers": [f"127.0.0.1:{port}" for port in free_ports(2)],
        "rows": rows.to_dict("records"),
        "directory": url,
        "options": s3_options,
    }
    results = _run_workers(WORKER_SCRIPT, spec)
    expected = {f"{url}/{name}" for name in rows["filename"]}
    assert [r["shard"] for r in results] == [[0, 2, "TF_CONFIG"], [1, 2, "TF_CONFIG"]]
    assert [r["val_shard"] for r in results] == [[0, 2, "tf.distribute"], [1, 2, "tf.distribute"]]
    for epoch in range(2):
        per_worker = [[p for e, p in r["reads"] if e == epoch] for r in results]
        assert [len(paths) for paths in per_worker] == [10, 10]
        assert not set(per_worker[0]) & set(per_worker[1])  # no overlap
        assert set(per_worker[0]) | set(per_worker[1]) == expected  # together: the dataset
    epoch_orders = [[p for e, p in results[0]["reads"] if e == epoch] for epoch in range(2)]
    assert epoch_orders[0] != epoch_orders[1]  # reshuffled, the same way on both workers
    # Both finished both epochs in step. Global batch 4: each worker's batches of 4, 4, 2
    # are split between the 2 replicas, so every worker trains 6 steps of 2, 2, 2, 2, 1, 1.
    assert [r["steps"] for r in results] == [[6, 6], [6, 6]]
    assert results[0]["loss"] == pytest.approx(results[1]["loss"])  # all-reduced
    assert results[0]["weights"] == pytest.approx(results[1]["weights"])  # one model, in sync
    assert all(np.isfinite(r["loss"] + r["val_loss"]).all() for r in results)
    assert [r["stats_images"] for r in results] == [20, 20]  # 10 per epoch, no extra reads


JAX_WORKER_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    spec, index = json.loads(sys.argv[1]), int(sys.argv[2])
    import jax
    jax.distributed.initialize(spec["coordinator"], num_processes=2, process_id=index)
    import keras, numpy as np, pandas as pd
    import remote_keras as rk
    RECORDING_LOADER

    # Each process feeds its own shard: Keras must not try to split the iterator again.
    # Keras 3.16 shards a PyDataset's batches itself (auto_shard_dataset=True, the default):
    # then the iterator keeps every file and builds ahead only the batches Keras asks it for.
    distribution = keras.distribution.DataParallel(auto_shard_dataset=spec["auto_shard"])
    keras.distribution.set_distribution(distribution)
    loader = RecordingLoader(spec["options"])
    gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=spec["options"])
    train = gen.flow_from_dataframe(pd.DataFrame(spec["rows"]), spec["directory"],
                                    target_size=(8, 8), batch_size=4, seed=3, loader=loader)
    loader.iterator = train
    # Both processes here before the first collective: its transport (gloo) waits 30 s at most
    # for the other, and imports alone can take longer on a loaded machine.
    from jax._src import distributed
    distributed.global_state.client.wait_at_barrier("ready", 600_000)
    keras.utils.set_random_seed(0)  # the same initial weights in both processes
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile("sgd", "categorical_crossentropy")
    steps = []
    counter = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: steps.append(0),
        on_train_batch_end=lambda batch, logs: steps.__setitem__(-1, steps[-1] + 1),
    )
    history = model.fit(train, epochs=2, callbacks=[counter], verbose=0)
    result = {
        "backend": keras.backend.backend(), "processes": jax.process_count(),
        "shard": [train.shard.index, train.shard.count, train.shard.source],
        "keras_batches": train.keras_batches,
        "reads": reads, "steps": steps, "loss": history.history["loss"],
        "weights": [float(np.sum(w)) for w in model.get_weights()],
    }
    train.close()
    print("RESULT " + json.dumps(result), flush=True)
    """
).replace("RECORDING_LOADER\n", RECORDING_LOADER)


def _run_workers(script: str, spec: dict, timeout_s: float = 600) -> list[dict]:
    """Runs `script` as workers 0 and 1; stops both as soon as one fails, showing its stderr."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["PYTHONPATH"] = os.getcwd()
    logs = [tempfile.TemporaryFile(mode="w+") for _ in range(4)]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, json.dumps(spec), str(index)],
            stdout=logs[2 * index],
            stderr=logs[2 * index + 1],
            text=True,
            env=env,
        )  # fmt: skip
        for index in range(2)
    ]

    def read(log) -> str:
        log.seek(0)
        return log.read()

    try:
        deadline = time.monotonic() + timeout_s
        while any(w.poll() is None for w in workers) and time.monotonic() < deadline:
            failed = [i for i, w in enumerate(workers) if w.poll() not in (None, 0)]
            assert not failed, (
                f"worker {failed[0]} failed:\n{read(logs[2 * failed[0] + 1])[-4000:]}"
            )
            time.sleep(0.2)
        for index, worker in enumerate(workers):
            assert worker.poll() == 0, f"worker {index}:\n{read(logs[2 * index + 1])[-4000:]}"
        results = []
        for index in range(2):
            line = next(x for x in read(logs[2 * index]).splitlines() if x.startswith("RESULT "))
            results.append(json.loads(line.removeprefix("RESULT ")))
        return results
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
        for log in logs:
            log.close()


@pytest.mark.slow
@pytest.mark.skipif(
    tuple(int(p) for p in keras.__version__.split(".")[:2]) < (3, 15),
    reason="shard detection from keras.distribution needs Keras >= 3.15 (older Keras raises, "
    "tests/test_sharding_versions.py), and Keras 3.8's JAX trainer needs a jax older than the "
    "one installed",
)
@pytest.mark.parametrize("auto_shard", [False, True], ids=["files-sharded", "keras-shards"])
def test_two_jax_processes_fit_on_disjoint_shards_of_s3(s3_images, s3_options, auto_shard):
    if auto_shard and not line_for_version(keras.__version__).seeds_epochs:
        pytest.skip("Keras shards a PyDataset's batches itself from Keras 3.16")
    url, df = s3_images
    rows = df[["filename", "class"]].iloc[: 16 if auto_shard else 20]
    spec = {
        "coordinator": f"127.0.0.1:{free_ports(1)[0]}",
        "rows": rows.to_dict("records"),
        "directory": url,
        "options": s3_options,
        "auto_shard": auto_shard,
    }
    results = _run_workers(JAX_WORKER_SCRIPT, spec)
    assert [(r["backend"], r["processes"]) for r in results] == [("jax", 2), ("jax", 2)]
    if auto_shard:  # Keras asks each process for every other batch; the files are not split
        assert [r["keras_batches"] for r in results] == [[0, 2], [1, 2]]
        assert [r["shard"] for r in results] == [[0, 1, "none"], [0, 1, "none"]]
    else:
        assert [r["keras_batches"] for r in results] == [None, None]
        assert [r["shard"] for r in results] == [
            [0, 2, "keras.distribution"],
            [1, 2, "keras.distribution"],
        ]
    half = len(rows) // 2
    expected = {f"{url}/{name}" for name in rows["filename"]}
    if not auto_shard:
        # Keras 3.8-3.15 build the model from a batch of a pass they abandon (the iterator's
        # epoch 0); the shards change with the epoch, and that batch's files are carried into
        # `fit`'s first epoch (iterator epoch 1), which takes those of its own half: at most
        # one batch (4) of extra reads per process (Keras 3.16 reads it outside the pass: the
        # pass takes the batch). `fit`'s second epoch, the iterator's last, reads its half.
        for r in results:
            assert 2 * half <= len(r["reads"]) <= 2 * half + 4
        last = max(e for r in results for e, _ in r["reads"])
        per_process = [[p for e, p in r["reads"] if e == last] for r in results]
        assert [len(reads) for reads in per_process] == [half, half]
        assert not set(per_process[0]) & set(per_process[1])
        assert set(per_process[0]) | set(per_process[1]) == expected
    for epoch in range(2 if auto_shard else 0):
        per_process = [[p for e, p in r["reads"] if e == epoch] for r in results]
        if epoch == 0:
            # Keras's JAX trainer builds its state from a batch of a queue its worker threads
            # fill before the first pass from another order (Random(0)): up to this process's
            # share of that order, which may be batches of the other process's half. Stock
            # Keras reads them too.
            for reads in per_process:
                assert half <= len(reads) <= 2 * half
            assert set(per_process[0]) | set(per_process[1]) == expected
            continue
        assert [len(reads) for reads in per_process] == [half, half]
        assert not set(per_process[0]) & set(per_process[1])
        assert set(per_process[0]) | set(per_process[1]) == expected
    # `fit` takes the iterator itself: 10 images per process in batches of 4, 4, 2 (files
    # sharded), or 2 of the 4 batches of 16 images (Keras shards).
    assert [r["steps"] for r in results] == ([[2, 2], [2, 2]] if auto_shard else [[3, 3], [3, 3]])
    assert results[0]["weights"] == pytest.approx(results[1]["weights"])  # one model, in sync
    assert results[0]["loss"] == pytest.approx(results[1]["loss"])


JAX_DATASET_WORKER_SCRIPT = textwrap.dedent(
    """
    import collections, json, os, sys, warnings
    os.environ["KERAS_BACKEND"] = "jax"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    spec, index = json.loads(sys.argv[1]), int(sys.argv[2])
    import jax
    jax.distributed.initialize(spec["coordinator"], num_processes=2, process_id=index)
    import keras, numpy as np
    import remote_keras as rk
    from remote_keras.storage.loaders import FsspecLoader
    # What Keras's fit hands this process of a tf.data.Dataset (its own sharding included).
    from keras.src.trainers.data_adapters.tf_dataset_adapter import TFDatasetAdapter

    reads, phase = [], ["build"]  # the epoch `fit` is in, from its callbacks

    class RecordingLoader(FsspecLoader):
        def load_many(self, paths, executor=None):
            reads.extend((phase[0], p) for p in paths)
            return super().load_many(paths, executor=executor)

        def load_many_checked(self, paths, executor=None):
            reads.extend((phase[0], p) for p in paths)
            return super().load_many_checked(paths, executor=executor)

    distribution = keras.distribution.DataParallel(auto_shard_dataset=spec["auto_shard"])
    keras.distribution.set_distribution(distribution)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset = rk.image_dataset_from_directory(
            spec["directory"], labels=list(range(spec["count"])), image_size=(8, 8),
            batch_size=4, verbose=False, storage_options=spec["options"],
            loader=RecordingLoader(spec["options"]))  # shuffled, no seed
    from jax._src import distributed
    distributed.global_state.client.wait_at_barrier("ready", 600_000)
    keras.utils.set_random_seed(0)  # the same initial weights in both processes
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(spec["count"], activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy")
    steps = []
    counter = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: (steps.append(0), phase.__setitem__(0, epoch)),
        on_train_batch_end=lambda batch, logs: steps.__setitem__(-1, steps[-1] + 1),
    )
    history = model.fit(dataset, epochs=2, callbacks=[counter], verbose=0)
    read_in_fit = [[p, n] for p, n in collections.Counter(reads).items()]
    handed = [[int(y) for y in labels] for _, labels in
              TFDatasetAdapter(dataset, distribution=distribution).get_numpy_iterator()]
    result = {
        "processes": jax.process_count(), "reads": read_in_fit, "handed": handed,
        "steps": steps, "loss": history.history["loss"],
        "warnings": [str(w.message) for w in caught],
        "weights": [float(np.sum(w)) for w in model.get_weights()],
    }
    print("RESULT " + json.dumps(result), flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.skipif(
    tuple(int(p) for p in keras.__version__.split(".")[:2]) < (3, 15),
    reason="shard detection from keras.distribution needs Keras >= 3.15",
)
@pytest.mark.parametrize("auto_shard", [False, True], ids=["files-sharded", "keras-shards"])
def test_two_jax_processes_fit_image_dataset_from_directory_on_s3(
    tmp_path, s3_server, s3fs_direct, s3_options, auto_shard
):
    """Two JAX processes training one model on one `image_dataset_from_directory` of S3.

    With `auto_shard_dataset=False` the package reads each process's half of the files once
    per epoch. With Keras's own sharding (the default) Keras splits the batches after they are
    read: each process reads every file (as stock Keras does; the package says so) and is
    handed a disjoint half, alike in both processes although no seed was passed.
    """
    from tests.helpers import put_folder

    write_class_tree(tmp_path, per_class=4)  # 12 images
    prefix = f"data/jax-dataset-{uuid.uuid4().hex[:8]}"
    put_folder(s3fs_direct, str(tmp_path), prefix)
    url = f"s3://{prefix}"
    count = 12
    spec = {
        "coordinator": f"127.0.0.1:{free_ports(1)[0]}",
        "directory": url,
        "options": s3_options,
        "auto_shard": auto_shard,
        "count": count,
    }
    results = _run_workers(JAX_DATASET_WORKER_SCRIPT, spec)
    assert [r["processes"] for r in results] == [2, 2]
    everything = set(range(count))
    handed = [sum(r["handed"], []) for r in results]
    assert not set(handed[0]) & set(handed[1])
    assert set(handed[0]) | set(handed[1]) == everything
    said = [" ".join(r["warnings"]) for r in results]
    assert all("using seed=0 so that all workers shuffle alike" in text for text in said)
    # Per process: {phase: {file: reads}}. Keras's JAX trainer builds its state from the first
    # batch of a pass it then drops ("build"): what that pass read is carried into epoch 0
    # where the package shards the files; where Keras splits the batches, it is read again.
    reads = []
    for r in results:
        per_phase: dict = {}
        for (phase, path), n in r["reads"]:
            per_phase.setdefault(phase, {})[path] = n
        reads.append(per_phase)
    if auto_shard:
        # Keras rebatches 3 batches of 4 into 6 of 2 and hands each process every other one.
        assert [[len(b) for b in r["handed"]] for r in results] == [[2, 2, 2], [2, 2, 2]]
        assert all("pass DataParallel(auto_shard_dataset=False)" in text for text in said)
        for per_phase in reads:  # every file, once per epoch
            assert set(per_phase) == {0, 1, "build"}
            for epoch in (0, 1):
                assert len(per_phase[epoch]) == count and set(per_phase[epoch].values()) == {1}
        assert [r["steps"] for r in results] == [[3, 3], [3, 3]]
    else:
        # Each process reads its 6 files once per epoch, in batches of 4 and 2.
        assert [[len(b) for b in r["handed"]] for r in results] == [[4, 2], [4, 2]]
        assert not any("auto_shard_dataset=False" in text for text in said)
        for epoch in (0, 1):
            halves = []
            for per_phase in reads:  # the build's reads count for epoch 0, whose bytes they are
                half = dict(per_phase.get(epoch, {}))
                for path, n in per_phase.get("build", {}).items() if epoch == 0 else ():
                    half[path] = half.get(path, 0) + n
                halves.append(half)
            assert [len(h) for h in halves] == [count // 2] * 2
            assert all(set(h.values()) == {1} for h in halves)  # once each, build included
            assert not set(halves[0]) & set(halves[1])
            assert len(set(halves[0]) | set(halves[1])) == count
        assert [r["steps"] for r in results] == [[2, 2], [2, 2]]
    assert results[0]["weights"] == pytest.approx(results[1]["weights"])  # one model, in sync
    assert results[0]["loss"] == pytest.approx(results[1]["loss"])
