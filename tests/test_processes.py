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
from remote_keras import errors
from tests.helpers import assert_same_batch, put_folder, put_objects


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
                                 workers=2, use_multiprocessing=spec["processes"], seed=0)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile("sgd", "categorical_crossentropy")
    history = model.fit(it, epochs=2, verbose=0)
    it.close()
    print("LOSS", json.dumps(history.history["loss"]))
    """
)


def run_fit(
    start_method: str, directory: str, df: pd.DataFrame, options: dict | None, processes=True
) -> list[float]:
    import json

    spec = {"rows": df[["filename", "class"]].to_dict("records"), "directory": directory,
            "options": options, "processes": processes}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", FIT_SCRIPT, start_method, json.dumps(spec)],
        capture_output=True, text=True, timeout=600, check=False,
        env=dict(os.environ, PYTHONPATH=os.getcwd()),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("LOSS"))
    return json.loads(line.split(" ", 1)[1])


@pytest.fixture(scope="module")
def threaded_losses(image_dir) -> list[float]:
    """The two epochs' losses of the same fit on local disk, with threads: the reference."""
    local, df = image_dir
    return run_fit("fork", local, df, None, processes=False)


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_fit_with_multiprocessing_on_s3(start_method, s3_images, s3_options, threaded_losses):
    url, df = s3_images
    losses = run_fit(start_method, url, df, s3_options)
    # Worker processes fed the same batches, in the same order, as threads on local disk.
    assert losses == pytest.approx(threaded_losses, rel=1e-5) and len(losses) == 2


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


# forkserver hands workers a pickled iterator, as spawn does: the S3 fit above runs under it, and
# the other tests under fork and spawn only (each start method costs a Keras start-up).
@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_fit_with_multiprocessing_on_lakefs(start_method, image_dir, threaded_losses):
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
    assert losses == pytest.approx(threaded_losses, rel=1e-5) and len(losses) == 2


@pytest.mark.parametrize(
    "error",
    [
        errors.ImageLoadError("s3://b/k.png", "Could not read 's3://b/k.png': boom"),
        errors.gave_up("s3://b/k.png", 3, ConnectionResetError("reset")),
        errors.ImageDecodeError("s3://b/k.png", "Cannot decode image 's3://b/k.png'"),
        errors.InvalidRowsError("Rows 1, 2 are bad", [1, 2]),
        errors.MissingBackendError("no gcsfs"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_error_pickles_with_its_attributes(error):
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is type(error)
    assert str(clone) == str(error)
    assert clone.__dict__ == error.__dict__


CORRUPT_FIT_SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing, os, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    multiprocessing.set_start_method(sys.argv[1], force=True)
    import keras, pandas as pd
    import remote_keras as rk

    if __name__ == "__main__":
        spec = json.loads(sys.argv[2])
        gen = rk.ImageDataGenerator(storage_options=spec["options"], on_error=spec["on_error"])
        it = gen.flow_from_dataframe(pd.DataFrame(spec["rows"]), spec["directory"],
                                     target_size=(8, 8), batch_size=4, workers=2,
                                     use_multiprocessing=True, seed=0)
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(3, activation="softmax")])
        model.compile("sgd", "categorical_crossentropy")
        start = time.monotonic()
        try:
            model.fit(it, epochs=1, verbose=0)
            print("FIT", json.dumps({"ok": True, "skipped": it.skipped,
                                     "stats_skipped": it.stats.skipped}))
        except Exception as exc:
            print("FIT", json.dumps({"ok": False, "error": str(exc)[-3000:],
                                     "seconds": time.monotonic() - start}))
        it.close()
    """
)


@pytest.fixture(scope="module")
def s3_with_corrupt_image(s3_server, image_dir):
    """The image folder plus one corrupt file, in a prefix of its own (not the shared one)."""
    import uuid

    import s3fs

    from tests.conftest import SETUP_CLIENT

    local, df = image_dir
    fs = s3fs.S3FileSystem(**s3_server.storage_options, **SETUP_CLIENT)
    prefix = f"data/corrupt-{uuid.uuid4().hex[:8]}"
    put_folder(fs, local, prefix)
    put_objects(fs, {f"{prefix}/cat/corrupt.png": b"this is not an image"})
    rows = df[["filename", "class"]].to_dict("records")
    rows.insert(5, {"filename": "cat/corrupt.png", "class": "cat"})
    return f"s3://{prefix}", rows, f"s3://{prefix}/cat/corrupt.png"


def _run_corrupt_fit(start_method, url, rows, options, on_error) -> dict:
    import json

    spec = {"rows": rows, "directory": url, "options": options, "on_error": on_error}
    result = subprocess.run(
        [sys.executable, "-c", CORRUPT_FIT_SCRIPT, start_method, json.dumps(spec)],
        capture_output=True, text=True, timeout=180, check=False,
        env=dict(os.environ, PYTHONPATH=os.getcwd()),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "attached to a different loop" not in result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("FIT"))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_corrupt_image_ends_a_multiprocessing_fit_naming_it(
    start_method, s3_with_corrupt_image, s3_options
):
    url, rows, bad = s3_with_corrupt_image
    outcome = _run_corrupt_fit(start_method, url, rows, s3_options, "raise")
    assert not outcome["ok"]
    assert f"ImageDecodeError: Cannot decode image '{bad}'" in outcome["error"]
    assert outcome["seconds"] < 30


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_samples_skipped_in_worker_processes_reach_the_parent(
    start_method, s3_with_corrupt_image, s3_options
):
    url, rows, bad = s3_with_corrupt_image
    outcome = _run_corrupt_fit(start_method, url, rows, s3_options, "skip")
    assert outcome["ok"]
    assert [path for path, _ in outcome["skipped"]] == [bad]
    assert outcome["stats_skipped"] == 1


INTERRUPT_SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    multiprocessing.set_start_method(sys.argv[1], force=True)
    import keras, pandas as pd
    import remote_keras as rk

    class Started(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                print("STARTED", flush=True)

    if __name__ == "__main__":
        spec = json.loads(sys.argv[2])
        gen = rk.ImageDataGenerator(storage_options=spec["options"])
        it = gen.flow_from_dataframe(pd.DataFrame(spec["rows"]), spec["directory"],
                                     target_size=(8, 8), batch_size=2, workers=2,
                                     use_multiprocessing=True, seed=0)
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(3, activation="softmax")])
        model.compile("sgd", "categorical_crossentropy")
        model.fit(it, epochs=10_000, verbose=0, callbacks=[Started()])
    """
)


SIGINT_SCRIPT = textwrap.dedent(
    """
    import json, multiprocessing, signal, sys
    import remote_keras as rk

    def ignored():
        return signal.getsignal(signal.SIGINT) is signal.SIG_IGN

    def handler(_):
        return ignored()

    def read_then_handler(args):
        iterator, index = args
        iterator[index]
        return ignored()

    def own_process(iterator, queue):
        iterator[0]
        queue.put(ignored())

    if __name__ == "__main__":
        multiprocessing.set_start_method(sys.argv[2], force=True)
        it = rk.ImageDataGenerator().flow_from_directory(
            sys.argv[1], target_size=(8, 8), batch_size=2, use_multiprocessing=True)
        with multiprocessing.Pool(2) as pool:
            before = pool.map(handler, range(2))
            after = pool.map(read_then_handler, [(it, 0), (it, 1), (it, 2)], chunksize=1)
        queue = multiprocessing.Queue()
        child = multiprocessing.Process(target=own_process, args=(it, queue))
        child.start()
        own = queue.get(timeout=120)
        child.join()
        it[0]
        print(json.dumps({"before": before, "after": after, "own_process": own,
                          "parent": signal.getsignal(signal.SIGINT) is signal.default_int_handler}))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_pool_workers_leave_ctrl_c_to_the_parent(start_method, image_dir, tmp_path):
    """A worker killed by Ctrl-C mid-batch would lose that batch, and `fit` would wait forever.

    Once it has read through the iterator, a pool's worker ignores SIGINT; the parent and a
    process of the user's own keep theirs.
    """
    import json

    local, _ = image_dir
    script = tmp_path / "sigint.py"  # spawn re-imports the main module: it needs a file
    script.write_text(SIGINT_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(local), start_method], capture_output=True,
        text=True, timeout=300, env=dict(os.environ, PYTHONPATH=os.getcwd()),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"before": [False, False], "after": [True, True, True],
                    "own_process": False, "parent": True}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_ctrl_c_stops_a_multiprocessing_fit(start_method, s3_images, s3_options):
    import json
    import signal

    url, df = s3_images
    spec = {"rows": df[["filename", "class"]].to_dict("records"), "directory": url,
            "options": s3_options}  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-c", INTERRUPT_SCRIPT, start_method, json.dumps(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ, PYTHONPATH=os.getcwd()), start_new_session=True,
    )  # fmt: skip
    try:
        assert any(line.startswith("STARTED") for line in process.stdout)
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # A Ctrl-C that lands while Keras starts an epoch's worker processes (spawn) can be
            # swallowed by them; a user presses it again, and that one must stop the run.
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=60)
        assert process.returncode != 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
