"""Pickling, fork safety and `use_multiprocessing=True` under fork, spawn and forkserver."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

import remote_keras as rk
from tests.test_parity import assert_same_batch


def test_iterator_pickles_and_reads_the_same_batches(s3_images, s3_options):
    url, df = s3_images
    gen = rk.ImageDataGenerator(rotation_range=10, storage_options=s3_options)
    with gen.flow_from_dataframe(df, url, target_size=(8, 8), batch_size=5, seed=3) as it:
        expected = [it[i] for i in range(len(it))]
        clone = pickle.loads(pickle.dumps(it))
    with clone:
        assert clone.lock is not it.lock
        for i, batch in enumerate(expected):
            assert_same_batch(batch, clone[i])
    assert s3_options["secret"] not in repr(clone)


def _read_in_child(it, queue) -> None:
    queue.put([it[i][1].tolist() for i in range(len(it))])


def test_forked_child_does_not_wait_on_the_parents_look_ahead(image_dir):
    directory, df = image_dir
    it = rk.ImageDataGenerator().flow_from_dataframe(
        df, directory, target_size=(4, 4), batch_size=3, shuffle=False, class_mode="sparse"
    )
    with it:
        it[0]  # the parent now has batches 1-4 in flight on its own threads
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_read_in_child, args=(it, queue))
        child.start()
        labels = queue.get(timeout=60)
        child.join(30)
    assert child.exitcode == 0
    assert sum(labels, []) == [float(c) for c in it.classes]


FIT_SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    multiprocessing.set_start_method(sys.argv[1], force=True)
    import keras, numpy as np, pandas as pd
    import remote_keras as rk

    spec = json.loads(sys.argv[2])
    df = pd.DataFrame(spec["rows"])
    gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=spec["options"])
    it = gen.flow_from_dataframe(df, spec["directory"], target_size=(8, 8), batch_size=4,
                                 workers=2, use_multiprocessing=True, seed=0)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile("sgd", "categorical_crossentropy")
    history = model.fit(it, epochs=2, verbose=0)
    it.close()
    print("LOSS", json.dumps(history.history["loss"]))
    """
)


def run_fit(start_method: str, directory: str, df: pd.DataFrame, options: dict) -> list[float]:
    import json

    spec = {"rows": df[["filename", "class"]].to_dict("records"), "directory": directory,
            "options": options}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", FIT_SCRIPT, start_method, json.dumps(spec)],
        capture_output=True, text=True, timeout=600, check=False,
        env=dict(os.environ, PYTHONPATH=os.getcwd()),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("LOSS"))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_fit_with_multiprocessing_on_s3(start_method, s3_images, s3_options):
    url, df = s3_images
    losses = run_fit(start_method, url, df, s3_options)
    assert len(losses) == 2 and all(np.isfinite(losses))


@pytest.mark.parametrize(
    "bad",
    [np.nan, "", "   ", 42, None],
    ids=["nan", "empty", "blank", "int", "none"],
)
def test_bad_path_rows_are_named_in_a_value_error(image_dir, bad):
    directory, df = image_dir
    df = df.assign(filename=df["filename"].astype(object))
    df.loc[5, "filename"] = bad
    with pytest.raises(ValueError, match=r"Received in 1 row\(s\): 5: ") as info:
        rk.ImageDataGenerator().flow_from_dataframe(df, directory)
    assert info.value.rows == [5]
    assert isinstance(info.value, TypeError)  # what Keras raises for non-string paths


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_fit_with_multiprocessing_on_lakefs(start_method, image_dir):
    import lakefs
    from lakefs.client import Client
    from lakefs_spec import LakeFSFileSystem

    from remote_keras.testing.lakefs_server import lakefs_target

    local, df = image_dir
    with lakefs_target() as target:
        client = Client(**target.storage_options)
        name = f"mp-{start_method}-{os.getpid()}"
        prefix = (
            "local://" if target.is_stand_in else client.storage_config.default_namespace_prefix
        )
        namespace = prefix + name if prefix.endswith("/") else f"{prefix}/{name}"
        lakefs.Repository(name, client=client).create(storage_namespace=namespace)
        fs = LakeFSFileSystem(**target.storage_options)
        for filename in df["filename"]:
            fs.put_file(os.path.join(local, filename), f"lakefs://{name}/main/train/{filename}")
        lakefs.Branch(name, "main", client=client).commit("images")
        losses = run_fit(start_method, f"lakefs://{name}/main/train", df, target.storage_options)
    assert len(losses) == 2 and all(np.isfinite(losses))
