"""`rk.image_dataset_from_directory(format="grain")` against Keras's own grain path.

Keras 3.13 and later return a `grain.IterDataset` for `format="grain"`: the package's must
give the same files, class names and tensors over two passes on local folders, the same
tensors from S3 and lakeFS (one GET per image per pass), skip or name a bad file, and run
without TensorFlow (a JAX `fit` in a process where TensorFlow cannot be imported).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import grain
import keras
import numpy as np
import pytest
from packaging.version import Version

import remote_keras as rk
from remote_keras.errors import ImageDecodeError
from remote_keras.testing.proxy import FaultPlan
from tests.helpers import lakefs_repo_with, run_script, truncated_jpeg

KERAS_HAS_GRAIN = Version(keras.__version__) >= Version("3.13")
needs_keras_grain = pytest.mark.skipif(
    not KERAS_HAS_GRAIN, reason="Keras's format='grain' arrived in Keras 3.13"
)


def passes(dataset, count: int = 2) -> list[list]:
    """`count` passes over `dataset`, each a list of elements as numpy structures."""
    return [
        [keras.tree.map_structure(keras.ops.convert_to_numpy, element) for element in dataset]
        for _ in range(count)
    ]


def assert_same_elements(stock, ours, count: int = 2) -> None:
    expected_passes, got_passes = passes(stock, count), passes(ours, count)
    for expected, got in zip(expected_passes, got_passes):
        assert len(expected) == len(got)
        for a, b in zip(expected, got):
            a, b = keras.tree.flatten(a), keras.tree.flatten(b)
            assert len(a) == len(b)
            for x, y in zip(a, b):
                assert x.dtype == y.dtype and x.shape == y.shape
                np.testing.assert_array_equal(x, y)


PARITY = [
    dict(),
    dict(label_mode="categorical", color_mode="grayscale"),
    dict(label_mode="binary", class_names=["dog", "cat"], crop_to_aspect_ratio=True),
    dict(label_mode=None, pad_to_aspect_ratio=True, interpolation="nearest"),
    dict(color_mode="rgba", data_format="channels_first", interpolation="bicubic"),
    dict(batch_size=None, shuffle=False),
    dict(labels=None),
    dict(validation_split=0.3, subset="training"),
]


@needs_keras_grain
@pytest.mark.slow
@pytest.mark.parametrize("kwargs", PARITY, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_local_equals_keras_grain_over_two_passes(image_dir, capsys, kwargs):
    local, _ = image_dir
    kwargs = dict(dict(image_size=(9, 11), batch_size=5, seed=7, format="grain"), **kwargs)
    stock = keras.utils.image_dataset_from_directory(local, **kwargs)
    said = capsys.readouterr().out
    ours = rk.image_dataset_from_directory(local, **kwargs)
    assert capsys.readouterr().out == said
    assert isinstance(ours, grain.IterDataset)
    assert ours.file_paths == stock.file_paths and ours.class_names == stock.class_names
    assert_same_elements(stock, ours)


@needs_keras_grain
@pytest.mark.slow
def test_both_subsets_equal_keras_grain(image_dir):
    local, _ = image_dir
    kwargs = dict(image_size=(6, 7), batch_size=4, seed=3, format="grain")
    kwargs.update(validation_split=0.25, subset="both", label_mode="categorical")
    stock = keras.utils.image_dataset_from_directory(local, **kwargs)
    ours = rk.image_dataset_from_directory(local, **kwargs)
    for s, o in zip(stock, ours):
        assert o.file_paths == s.file_paths
        assert_same_elements(s, o)


@needs_keras_grain
@pytest.mark.slow
def test_s3_equals_keras_grain_on_the_local_copy_with_one_get_per_image(
    image_dir, s3_images, s3_options, s3_proxy
):
    local, _ = image_dir
    url, _ = s3_images
    kwargs = dict(image_size=(7, 9), batch_size=4, seed=5, format="grain")
    stock = keras.utils.image_dataset_from_directory(local, **kwargs)
    s3_proxy.reset()
    ours = rk.image_dataset_from_directory(url, storage_options=s3_options, **kwargs)
    assert ours.file_paths == [url + "/" + os.path.relpath(p, local) for p in stock.file_paths]
    assert_same_elements(stock, ours)
    counts = s3_proxy.reset()
    assert counts.get("GET") == 2 * len(ours.file_paths) and not counts.get("HEAD"), counts


@needs_keras_grain
@pytest.mark.slow
def test_failed_and_flipped_bodies_are_read_again_and_the_cache_serves_the_next_pass(
    image_dir, s3_images, s3_options, s3_proxy, tmp_path
):
    local, _ = image_dir
    url, _ = s3_images
    kwargs = dict(image_size=(7, 9), batch_size=4, seed=5, format="grain")
    stock = keras.utils.image_dataset_from_directory(local, **kwargs)
    ours = rk.image_dataset_from_directory(
        url, storage_options=s3_options, cache_dir=str(tmp_path / "cache"), **kwargs
    )
    faults = FaultPlan(rate=0.3, seed=1, kinds=("503", "flip"), max_faults_per_key=1)
    s3_proxy.set_faults(faults)
    try:
        assert_same_elements(stock, ours, count=1)  # every 503 and flipped body read again
        injected = {k: v for k, v in s3_proxy.reset().items() if k.startswith("fault:")}
    finally:
        s3_proxy.set_faults(None)
    assert injected.get("fault:503") and injected.get("fault:flip"), injected
    assert_same_elements(stock, ours, count=1)
    assert s3_proxy.reset().get("GET", 0) == 0  # the second pass reads the disk cache


@needs_keras_grain
@pytest.mark.slow
def test_lakefs_reads_the_pinned_commit_and_records_it(image_dir, tmp_path):
    pytest.importorskip("lakefs", reason="the lakefs extra is not installed")
    local, _ = image_dir
    with lakefs_repo_with(local, "") as (target, name, commit, fs):
        kwargs = dict(image_size=(6, 6), batch_size=8, seed=4, format="grain")
        stock = keras.utils.image_dataset_from_directory(local, **kwargs)
        ours = rk.image_dataset_from_directory(
            f"lakefs://{name}/main", storage_options=target.storage_options, **kwargs
        )
        fs.rm(f"lakefs://{name}/main/cat/cat_0.png")  # staged: never seen at the commit
        assert [p.commit_id for p in ours.lakefs_pins] == [commit]
        assert ours.file_paths[0].startswith(f"lakefs://{name}/{commit}/")
        assert_same_elements(stock, ours, count=1)
        record = rk.write_data_version(ours, tmp_path / "data_version.json")
        assert rk.pinned_urls(record) == [f"lakefs://{name}/{commit}/"]


def _folder_with_one_bad_file(root: Path) -> Path:
    from remote_keras.testing.data import smooth_image

    rng = np.random.default_rng(2)
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(5):
            smooth_image(rng, 8 + i, 9 + i).save(root / name / f"{i}.png")
    (root / "b" / "2.jpg").write_bytes(truncated_jpeg(1, size=16))
    return root


def test_a_bad_file_is_named_or_skipped(tmp_path):
    root = _folder_with_one_bad_file(tmp_path / "images")
    kwargs = dict(image_size=(4, 4), batch_size=4, shuffle=False, format="grain")
    raising = rk.image_dataset_from_directory(root, **kwargs)
    with pytest.raises(ImageDecodeError, match="2.jpg"):
        list(raising)
    with pytest.warns(UserWarning, match="2.jpg"):
        skipping = rk.image_dataset_from_directory(root, on_error="skip", **kwargs)
        batches = [keras.ops.convert_to_numpy(x) for x, _ in skipping]
    assert [len(b) for b in batches] == [4, 4, 2]  # 10 good files, the bad one left out
    assert [path for path, _ in skipping.skipped] == [str(root / "b" / "2.jpg")]


@pytest.mark.slow
def test_reads_s3_and_fits_on_jax_without_tensorflow(s3_images, s3_options, tmp_path):
    url, _ = s3_images
    (tmp_path / "job.json").write_text(json.dumps(dict(url=url, options=s3_options)))
    script = textwrap.dedent(
        """
        import json, os, sys

        class _Blocked:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "tensorflow":
                    raise ImportError(f"{name} is blocked in this test")
                return None

        sys.meta_path.insert(0, _Blocked())
        os.environ["KERAS_BACKEND"] = "jax"
        import keras
        import remote_keras as rk

        job = json.load(open("job.json"))
        dataset = rk.image_dataset_from_directory(
            job["url"], storage_options=job["options"], format="grain", image_size=(8, 8),
            batch_size=4, seed=1,
        )
        model = keras.Sequential([
            keras.Input((8, 8, 3)), keras.layers.Flatten(),
            keras.layers.Dense(len(dataset.class_names), activation="softmax"),
        ])
        model.compile("sgd", "sparse_categorical_crossentropy")
        history = model.fit(dataset, epochs=2, verbose=0)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow")
        print(json.dumps(dict(
            backend=keras.backend.backend(), loaded=loaded, epochs=len(history.history["loss"]),
        )))
        """
    )
    result = run_script(script, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report == {"backend": "jax", "loaded": [], "epochs": 2}


def test_format_is_checked_with_keras_message(image_dir):
    local, _ = image_dir
    with pytest.raises(ValueError, match='`format` should be either "tf" or "grain"'):
        rk.image_dataset_from_directory(local, format="torch")


def test_pass_start_keeps_an_abandoned_passs_first_reads_for_the_next_pass_only():
    from remote_keras.image_dataset.grain_dataset import PassStart

    start = PassStart(frozenset({0, 1}), window=2)
    for index in (0, 1):  # a pass abandoned after its first elements
        assert start.take(index) is None
        start.keep(index, b"%d" % index)
    assert start.take(0) == b"0" and start.take(1) == b"1"  # the next pass takes them
    for index in (2, 3, 4):  # ... and goes on past the window: they are dropped
        assert start.take(index) is None
    assert start.take(0) is None  # a later pass reads them again
