"""`rk.image_dataset_from_directory` against `keras.utils.image_dataset_from_directory`.

Batches, file paths, class names, messages and per-epoch order must equal stock Keras's
on the same local files; through S3 and lakeFS they must equal stock Keras on the local
copy, with one GET per image per epoch.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid

import keras
import numpy as np
import pytest
import s3fs
from keras.src.utils import dataset_utils

import remote_keras as rk
from remote_keras.testing.data import smooth_image
from tests.conftest import SETUP_CLIENT, write_tree
from tests.helpers import (
    assert_same_batch,
    lakefs_repo_with,
    noise_png,
    put_folder,
    run_script,
    truncated_jpeg,
)


def epochs(dataset, count: int = 2) -> list[list]:
    """`count` passes over `dataset`, each a list of numpy batches."""
    return [list(dataset.as_numpy_iterator()) for _ in range(count)]


def assert_same_dataset(stock, ours, passes: int = 2) -> None:
    assert ours.file_paths == stock.file_paths
    assert ours.class_names == stock.class_names
    assert ours.element_spec == stock.element_spec
    assert int(ours.cardinality()) == int(stock.cardinality())
    for expected, got in zip(epochs(stock, passes), epochs(ours, passes)):
        assert len(expected) == len(got)
        for a, b in zip(expected, got):
            assert_same_batch(a, b)


def both(directory_keras, directory_ours, capsys=None, **kwargs):
    stock = keras.utils.image_dataset_from_directory(directory_keras, **kwargs)
    said = capsys.readouterr().out if capsys else None
    ours = rk.image_dataset_from_directory(directory_ours, **kwargs)
    if capsys:
        assert capsys.readouterr().out == said
    return stock, ours


PARITY = [
    dict(),
    dict(label_mode="categorical", color_mode="grayscale"),
    dict(label_mode=None, crop_to_aspect_ratio=True),
    dict(pad_to_aspect_ratio=True, interpolation="nearest"),
    dict(crop_to_aspect_ratio=True, data_format="channels_first", interpolation="bicubic"),
    dict(batch_size=None),
    dict(shuffle=False, interpolation="area"),
    dict(labels=None),
    dict(validation_split=0.3, subset="training"),
    dict(validation_split=0.3, subset="validation"),
    dict(validation_split=0.25, subset="both", label_mode="categorical"),
    dict(class_names=["dog", "cat"], label_mode="binary"),
]


@pytest.mark.slow
@pytest.mark.parametrize("kwargs", PARITY, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_local_equals_keras_over_two_epochs(image_dir, capsys, kwargs):
    local, _ = image_dir
    kwargs = dict(dict(image_size=(9, 11), batch_size=5, seed=7), **kwargs)
    stock, ours = both(local, local, capsys, **kwargs)
    if kwargs.get("subset") == "both":
        assert isinstance(ours, list) and len(ours) == 2
        for s, o in zip(stock, ours):
            assert_same_dataset(s, o)
    else:
        assert_same_dataset(stock, ours)


@pytest.mark.slow
def test_rgba_and_explicit_labels_equal_keras(tmp_path):
    rng = np.random.default_rng(1)
    for i in range(9):
        smooth_image(rng, 10 + i, 13 + i, "RGBA").save(tmp_path / f"{i:02d}.png")
    labels = [i % 3 for i in range(9)]
    kwargs = dict(label_mode="categorical", color_mode="rgba", image_size=(6, 5), seed=3)
    stock = keras.utils.image_dataset_from_directory(tmp_path, labels=list(labels), **kwargs)
    ours = rk.image_dataset_from_directory(tmp_path, labels=labels, **kwargs)
    assert_same_dataset(stock, ours)
    assert labels == [i % 3 for i in range(9)]  # Keras shuffles the list given in place


@pytest.mark.slow
def test_nested_hidden_and_linked_folders_follow_keras(tmp_path, image_dir):
    local, _ = image_dir
    root = tmp_path / "tree"
    shutil.copytree(local, root)
    shutil.copytree(os.path.join(local, "cat"), root / ".hidden")  # not a class
    (root / "dog" / "notes.txt").write_text("not an image")
    (root / "top.png").write_bytes((root / "cat" / "cat_0.png").read_bytes())  # not in a class
    os.symlink(os.path.join(local, "bird"), root / "cat" / "linked")
    # Keras 3.8 walks local folders with `tf.io.gfile.walk`, which enters linked folders
    # even with follow_links=False; this follows `os.walk`, as Keras 3.15 does.
    walks_with_os = hasattr(dataset_utils, "file_utils")
    for follow in (False, True) if walks_with_os else (True,):
        stock, ours = both(str(root), str(root), seed=2, image_size=(5, 5), follow_links=follow)
        assert_same_dataset(stock, ours, passes=1)


def test_unshuffled_order_and_seeded_shuffle_without_seed(image_dir):
    local, _ = image_dir
    np.random.seed(11)
    stock = keras.utils.image_dataset_from_directory(local, image_size=(4, 4))
    np.random.seed(11)
    ours = rk.image_dataset_from_directory(local, image_size=(4, 4))
    assert ours.file_paths == stock.file_paths  # the same seed drawn from np.random


@pytest.mark.slow
def test_s3_equals_keras_on_local_copy_with_one_get_per_image(
    image_dir, s3_images, s3_options, s3_proxy
):
    local, _ = image_dir
    url, df = s3_images
    kwargs = dict(image_size=(7, 9), batch_size=4, seed=5, validation_split=0.2, subset="training")
    stock = keras.utils.image_dataset_from_directory(local, **kwargs)
    s3_proxy.reset()
    ours = rk.image_dataset_from_directory(url, storage_options=s3_options, **kwargs)
    listed = s3_proxy.reset()
    assert listed.get("GET", 0) == 0 and listed.get("HEAD", 0) == 0, listed
    assert ours.file_paths == [url + "/" + os.path.relpath(p, local) for p in stock.file_paths]
    assert ours.class_names == stock.class_names
    for expected, got in zip(epochs(stock), epochs(ours)):
        assert len(expected) == len(got)
        for a, b in zip(expected, got):
            assert_same_batch(a, b)
    counts = s3_proxy.reset()
    assert counts == {"GET": 2 * len(ours.file_paths)}, counts


@pytest.fixture
def damaged_s3(s3_server, image_dir):
    """A copy of the image tree on S3 with one corrupt image and one that will go missing."""
    local, _ = image_dir
    fs = s3fs.S3FileSystem(**s3_server.storage_options, **SETUP_CLIENT)
    prefix = f"data/damaged-{uuid.uuid4().hex[:8]}"
    put_folder(fs, local, prefix)
    fs.pipe(f"{prefix}/dog/dog_3.jpg", b"\xff\xd8 this is not a JPEG")
    for path in glob.glob(os.path.join(local, "**", "*.*"), recursive=True):  # stored whole?
        key = f"{prefix}/{os.path.relpath(path, local)}"
        if not key.endswith("dog/dog_3.jpg"):
            with open(path, "rb") as f:
                assert fs.cat(key) == f.read(), f"the S3 test server stored {key} damaged"
    return f"s3://{prefix}", fs


@pytest.mark.slow
def test_on_error_skip_drops_names_and_records(damaged_s3, s3_options):
    url, fs = damaged_s3
    ours = rk.image_dataset_from_directory(
        url, storage_options=s3_options, image_size=(5, 5), batch_size=4, seed=1, on_error="skip"
    )
    fs.rm(f"{url[5:]}/bird/bird_1.jpg")  # listed, then gone: a failed read
    with pytest.warns(UserWarning, match="on_error='skip'") as caught:
        batches = list(ours.as_numpy_iterator())
    expected = {f"{url}/dog/dog_3.jpg", f"{url}/bird/bird_1.jpg"}
    skipped = dict(ours.skipped)
    assert set(skipped) == expected, skipped  # any other file: its reason is shown
    assert sum(len(y) for _, y in batches) == len(ours.file_paths) - 2
    assert [len(y) for _, y in batches[:-1]] == [4] * (len(batches) - 1)  # later samples fill
    assert "decode" in skipped[f"{url}/dog/dog_3.jpg"]
    assert "FileNotFoundError" in skipped[f"{url}/bird/bird_1.jpg"]
    assert any(url in str(w.message) and "dataset.skipped" in str(w.message) for w in caught)
    assert int(ours.cardinality()) == -2  # unknown: skipped samples shorten the stream
    with pytest.warns(UserWarning, match="on_error='skip'"):  # the second epoch skips them again
        list(ours.as_numpy_iterator())
    assert dict(ours.skipped).keys() == expected  # each file listed once


@pytest.mark.slow
def test_on_error_raise_names_the_file(damaged_s3, s3_options):
    url, _ = damaged_s3
    ours = rk.image_dataset_from_directory(
        url, storage_options=s3_options, image_size=(5, 5), shuffle=False
    )
    with pytest.raises(Exception, match=f"{url}/dog/dog_3.jpg"):
        list(ours.as_numpy_iterator())


def test_a_failure_in_last_place_is_accounted_for_by_the_last_batch(tmp_path):
    # The epoch's account closes with a sentinel sample after the last one: it must decode,
    # or failures after the last sample that arrived went unrecorded (with "skip") or
    # unnamed (with "raise"), depending on where the shuffle put them.
    write_tree(tmp_path)
    last = os.path.join(tmp_path, "dog", "nested", "dog_4.png")  # last in Keras's order
    with open(last, "wb") as f:
        f.write(b"\x89PNG this is not a PNG")
    kwargs = dict(image_size=(5, 5), batch_size=4, shuffle=False, verbose=False)
    skipping = rk.image_dataset_from_directory(tmp_path, on_error="skip", **kwargs)
    assert skipping.file_paths[-1] == last
    with pytest.warns(UserWarning, match="on_error='skip'"):
        batches = list(skipping.as_numpy_iterator())
    assert sum(len(y) for _, y in batches) == len(skipping.file_paths) - 1
    assert [path for path, _ in skipping.skipped] == [last]  # once the last batch is out
    raising = rk.image_dataset_from_directory(tmp_path, **kwargs)
    with pytest.raises(Exception, match="dog_4.png"):
        list(raising.as_numpy_iterator())


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_truncated_jpeg_at_its_own_size_is_named(tmp_path, on_error):
    # TensorFlow rejects it; the error (and `skipped`) names it, and says it may be truncated.
    for i in range(4):
        os.makedirs(tmp_path / "ab"[i % 2], exist_ok=True)
        (tmp_path / "ab"[i % 2] / f"{i}.png").write_bytes(noise_png(i))
    bad = str(tmp_path / "a" / "cut.jpg")
    with open(bad, "wb") as f:
        f.write(truncated_jpeg(0))
    dataset = rk.image_dataset_from_directory(
        tmp_path, image_size=(6, 6), batch_size=2, shuffle=False, on_error=on_error, verbose=False
    )
    # TensorFlow's reason, then what may be wrong with the file.
    message = f"Cannot decode image {re.escape(repr(bad))} with TensorFlow: .*corrupt, truncated"
    if on_error == "raise":
        with pytest.raises(Exception, match=message):
            list(dataset.as_numpy_iterator())
        return
    with pytest.warns(UserWarning, match="on_error='skip'"):
        batches = list(dataset.as_numpy_iterator())
    assert sum(len(y) for _, y in batches) == 4
    ((path, reason),) = dataset.skipped
    assert path == bad and re.match(f"ImageDecodeError: {message}", reason)


@pytest.mark.slow
def test_lakefs_equals_keras_and_records_the_commit(image_dir, tmp_path):
    # The oldest-pair venv installs the `test` extra only (no lakeFS clients).
    pytest.importorskip("lakefs", reason="the lakefs extra is not installed")
    local, _ = image_dir
    with lakefs_repo_with(local, "train") as (target, name, commit, fs):
        kwargs = dict(image_size=(6, 6), batch_size=8, seed=4)
        stock = keras.utils.image_dataset_from_directory(local, **kwargs)
        ours = rk.image_dataset_from_directory(
            f"lakefs://{name}/main/train", storage_options=target.storage_options, **kwargs
        )
        fs.rm(f"lakefs://{name}/main/train/cat/cat_0.png")  # staged: never seen at the commit
        assert [p.commit_id for p in ours.lakefs_pins] == [commit]
        # The paths read, at the commit: reading them again later reads the same bytes.
        assert ours.file_paths == [
            f"lakefs://{name}/{commit}/train/{os.path.relpath(p, local)}" for p in stock.file_paths
        ]
        for expected, got in zip(epochs(stock), epochs(ours)):
            for a, b in zip(expected, got):
                assert_same_batch(a, b)
        record = rk.write_data_version(ours, tmp_path / "data_version.json")
        (entry,) = record["data"]
        assert entry["commit_id"] == commit and entry["paths"] == ["train/"]
        assert json.loads((tmp_path / "data_version.json").read_text()) == record
        assert rk.pinned_urls(record) == [f"lakefs://{name}/{commit}/train/"]


@pytest.mark.slow
def test_op_determinism_logs_no_tensorflow_error_and_keeps_keras_batches(image_dir, tmp_path):
    # Under enable_op_determinism, TensorFlow rewrote the dataset's parallel map after its
    # generator into a sequential one, logging an error-level "NodeDef mentions attribute
    # use_unbounded_threadpool" line that Keras's function does not.
    local, _ = image_dir
    script = textwrap.dedent(
        f"""
        import numpy as np, tensorflow as tf, keras
        import remote_keras as rk
        tf.config.experimental.enable_op_determinism()
        kwargs = dict(image_size=(6, 6), batch_size=4, seed=3)
        stock = keras.utils.image_dataset_from_directory({local!r}, **kwargs)
        ours = rk.image_dataset_from_directory({local!r}, **kwargs)
        for (a, b), (c, d) in zip(stock, ours):
            assert np.array_equal(a, c) and np.array_equal(b, d)
        print("equal")
        """
    )
    result = run_script(script, tmp_path, TF_CPP_MIN_LOG_LEVEL="0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == "equal"
    assert "use_unbounded_threadpool" not in result.stderr
    assert not re.search(r"^E\d{4} .*node_def_util", result.stderr, re.M), result.stderr[-3000:]


@pytest.mark.slow
def test_fit_a_tiny_model(image_dir):
    local, _ = image_dir
    train, val = rk.image_dataset_from_directory(
        local, image_size=(8, 8), batch_size=4, seed=0, validation_split=0.2, subset="both"
    )
    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Rescaling(1 / 255),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(train, validation_data=val, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["val_loss"]).all()


def test_shards_are_disjoint_and_cover(image_dir):
    local, _ = image_dir
    kwargs = dict(image_size=(4, 4), seed=3, shard_remainder="drop")
    parts = [
        rk.image_dataset_from_directory(local, num_shards=2, shard_index=i, **kwargs)
        for i in range(2)
    ]
    whole = rk.image_dataset_from_directory(local, **kwargs)
    first, second = (set(p.file_paths) for p in parts)
    assert not first & second
    assert len(first) == len(second) == len(whole.file_paths) // 2
    assert first | second <= set(whole.file_paths)


def test_num_shards_is_refused_where_keras_splits_the_dataset_too(image_dir, monkeypatch):
    """Explicit shards under a distribution that splits datasets itself would split twice."""
    from remote_keras.keras_lines import distribution

    local, _ = image_dir
    monkeypatch.setattr(distribution, "keras_dataset_split", lambda: 2)
    with pytest.raises(ValueError, match="split twice.*auto_shard_dataset=False"):
        rk.image_dataset_from_directory(local, image_size=(4, 4), num_shards=2, shard_index=0)
    with pytest.warns(UserWarning, match="every process reads every file") as said:
        dataset = rk.image_dataset_from_directory(local, image_size=(4, 4), batch_size=4)
    assert any("using seed=0" in str(w.message) for w in said)
    from tensorflow.python.data.experimental.ops import distribute

    # Keras's split reads the batch size from the graph: it must be visible there.
    assert int(distribute.compute_batch_size(dataset).numpy()) == 4


@pytest.mark.skipif(
    tuple(int(p) for p in keras.__version__.split(".")[:2]) < (3, 15),
    reason="Keras 3.8's DataParallel cannot be built on the TensorFlow backend (its "
    "distribution_lib has no num_processes)",
)
def test_one_process_distribution_reads_everything(image_dir, recwarn):
    local, _ = image_dir
    keras.distribution.set_distribution(keras.distribution.DataParallel())
    try:
        dataset = rk.image_dataset_from_directory(local, image_size=(4, 4), seed=1)
    finally:
        keras.distribution.set_distribution(None)
    assert len(dataset.file_paths) == len(rk.image_dataset_from_directory(local, seed=1).file_paths)
    assert not [w for w in recwarn if "process" in str(w.message)]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(format="torch"), "format"),
        (dict(label_mode="binary"), "exactly 2"),
        (dict(use_multiprocessing=True), "use_multiprocessing"),
        (dict(jpeg_draft=True), "jpeg_draft"),
        (dict(validation_split=0.2, subset="training", seed=None), "seed"),
        (dict(labels=[0, 1]), "labels"),
        (dict(label_mode="sparse"), "label_mode"),
    ],
)
def test_clear_errors(s3_images, s3_options, kwargs, match):
    url, _ = s3_images
    with pytest.raises(ValueError, match=match):
        rk.image_dataset_from_directory(url, storage_options=s3_options, **kwargs)


# Each argument error of Keras's function, with the phrase Keras's own tests match in its message.
KERAS_ARGUMENT_ERRORS = [
    (dict(labels="other"), "`labels` argument should be"),
    (dict(label_mode="other"), "`label_mode` argument must be"),
    (dict(color_mode="other"), "`color_mode` must be one of"),
    (dict(labels=[0, 1], class_names=["a", "b"]), 'only pass `class_names` if `labels="inferred"`'),
    (dict(labels=[0, 1]), "Expected the lengths of `labels` to match the number of files"),
    (dict(class_names=["cat", "wrong"]), "`class_names` passed did not match"),
    (dict(label_mode="binary", class_names=["cat"]), "there must be exactly 2"),
    (dict(validation_split=2), "`validation_split` must be between 0 and 1"),
    (dict(validation_split=0.2, subset="other"), '`subset` must be either "training"'),
    (dict(validation_split=0.0, subset="training"), "`validation_split` must be set"),
    (dict(validation_split=0.2, subset="training"), "must provide a `seed`"),
]


@pytest.mark.parametrize(("kwargs", "phrase"), KERAS_ARGUMENT_ERRORS)
def test_argument_errors_are_keras_own_through_s3(image_dir, s3_images, s3_options, kwargs, phrase):
    local, _ = image_dir
    url, _ = s3_images
    with pytest.raises(ValueError, match=re.escape(phrase)):
        keras.utils.image_dataset_from_directory(local, verbose=False, **kwargs)
    with pytest.raises(ValueError, match=re.escape(phrase)):
        rk.image_dataset_from_directory(url, storage_options=s3_options, verbose=False, **kwargs)


@pytest.mark.slow
def test_follow_links_on_a_url_reads_what_false_reads(s3_images, s3_options):
    url, _ = s3_images
    kwargs = dict(storage_options=s3_options, image_size=(4, 4), seed=1, verbose=False)
    followed = rk.image_dataset_from_directory(url, follow_links=True, **kwargs)
    plain = rk.image_dataset_from_directory(url, follow_links=False, **kwargs)
    assert followed.file_paths == plain.file_paths and followed.file_paths
    for (a, la), (b, lb) in zip(followed, plain):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(la.numpy(), lb.numpy())


def test_missing_folder_names_it(s3_options):
    with pytest.raises(FileNotFoundError, match="s3://data/no-such-folder"):
        rk.image_dataset_from_directory("s3://data/no-such-folder", storage_options=s3_options)


def test_write_tree_copy_has_same_batches(tmp_path):
    write_tree(tmp_path, per_class=3)
    stock, ours = both(str(tmp_path), str(tmp_path), image_size=(3, 3), shuffle=False)
    assert_same_dataset(stock, ours, passes=1)


JAX_SCRIPT = """
import json, sys
import keras, numpy as np
import remote_keras as rk
local, url, options = json.loads(sys.argv[1])
kwargs = dict(image_size=(8, 8), batch_size=4, seed=0, label_mode="categorical")
stock = keras.utils.image_dataset_from_directory(local, **kwargs)
ours = rk.image_dataset_from_directory(url, storage_options=options, **kwargs)
same = all(
    np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    for a, b in zip(stock.as_numpy_iterator(), ours.as_numpy_iterator())
)
model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(3)])
model.compile("adam", keras.losses.CategoricalCrossentropy(from_logits=True))
history = model.fit(ours, epochs=2, verbose=0)
print("REPORT " + json.dumps({"backend": keras.backend.backend(), "same": same,
                              "loss": history.history["loss"]}))
"""


@pytest.mark.slow
def test_jax_backend_reads_and_fits_from_s3(image_dir, s3_images, s3_options):

    # A dev dependency; the oldest-pair venv installs the `test` extra only (no JAX).
    pytest.importorskip("jax", reason="JAX is not installed")
    local, _ = image_dir
    url, _ = s3_images
    result = subprocess.run(
        [sys.executable, "-c", JAX_SCRIPT, json.dumps([local, url, s3_options])],
        capture_output=True, text=True, timeout=300, check=False,
        env=dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=os.getcwd()),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("REPORT "))
    report = json.loads(line.split(" ", 1)[1])
    assert report["backend"] == "jax" and report["same"] is True
    assert len(report["loss"]) == 2 and np.isfinite(report["loss"]).all()


@pytest.mark.slow
def test_skip_passes_continues_the_stream_without_reading(s3_images, s3_options, s3_proxy):
    url, _ = s3_images
    kwargs = dict(storage_options=s3_options, image_size=(5, 5), batch_size=4, seed=9)
    first = epochs(rk.image_dataset_from_directory(url, **kwargs), 3)
    again = rk.image_dataset_from_directory(url, **kwargs)
    s3_proxy.reset()
    again.skip_passes(2)  # as a run resumed at epoch 2 would
    assert s3_proxy.reset() == {}  # only the order is replayed
    resumed = list(again.as_numpy_iterator())
    assert len(resumed) == len(first[2])
    for a, b in zip(first[2], resumed):
        assert_same_batch(a, b)
    assert any(not np.array_equal(a[1], b[1]) for a, b in zip(first[0], first[2]))
