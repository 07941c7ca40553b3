"""Against a real S3 server (`rclone serve s3`) through the real s3fs client."""

from __future__ import annotations

import shutil
import threading
import uuid
import warnings

import numpy as np
import pandas as pd
import pytest
from keras.src.legacy.preprocessing import image as keras_image

import remote_keras as rk
from remote_keras.testing import CountingProxy
from remote_keras.testing.proxy import FaultPlan
from tests.helpers import assert_same_batch, png_bytes, put_objects


def stock_batches(directory, df=None, **kwargs):
    gen = keras_image.ImageDataGenerator()
    it = (
        gen.flow_from_dataframe(df, directory, **kwargs)
        if df is not None
        else gen.flow_from_directory(directory, **kwargs)
    )
    return it, [it[i] for i in range(len(it))]


@pytest.mark.slow
def test_dataframe_with_s3_directory_equals_stock_on_local_copy(image_dir, s3_images, s3_options):
    local, df = image_dir
    url, _ = s3_images
    stock, expected = stock_batches(local, df, target_size=(10, 10), batch_size=8, shuffle=False)
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_dataframe(df, url, target_size=(10, 10), batch_size=8, shuffle=False) as it:
        assert it.filenames == stock.filenames
        assert it.filepaths == [f"{url}/{name}" for name in stock.filenames]
        for i, batch in enumerate(expected):
            assert_same_batch(batch, it[i])


def test_dataframe_of_full_urls(image_dir, s3_images, s3_options):
    local, df = image_dir
    url, _ = s3_images
    _, expected = stock_batches(local, df, target_size=(9, 9), batch_size=32, shuffle=False)
    urls = df.assign(filename=url + "/" + df["filename"])
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_dataframe(urls, target_size=(9, 9), batch_size=32, shuffle=False) as it:
        assert_same_batch(expected[0], it[0])


def test_directory_listing_equals_stock_on_local_copy(image_dir, s3_images, s3_options, s3_proxy):
    local, _ = image_dir
    url, _ = s3_images
    stock, expected = stock_batches(local, target_size=(7, 7), batch_size=6, shuffle=False)
    s3_proxy.reset()
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_directory(url, target_size=(7, 7), batch_size=6, shuffle=False) as it:
        counts = s3_proxy.reset()
        assert counts["LIST"] == 1 and counts["HEAD"] == 0 and counts["GET"] == 0, counts
        assert it.filenames == stock.filenames
        assert it.class_indices == stock.class_indices
        np.testing.assert_array_equal(it.classes, stock.classes)
        for i, batch in enumerate(expected):
            assert_same_batch(batch, it[i])


@pytest.mark.parametrize("subset", ["training", "validation"])
def test_directory_split_equals_stock(image_dir, s3_images, s3_options, subset):
    local, _ = image_dir
    url, _ = s3_images
    stock = keras_image.ImageDataGenerator(validation_split=0.4).flow_from_directory(
        local, subset=subset
    )
    gen = rk.ImageDataGenerator(validation_split=0.4, storage_options=s3_options)
    with gen.flow_from_directory(url, subset=subset) as it:
        assert it.filenames == stock.filenames


def test_one_get_and_no_head_per_image(s3_images, s3_options, s3_proxy):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    it = gen.flow_from_dataframe(
        df, url, target_size=(8, 8), batch_size=5, shuffle=True, validate_filenames=False
    )
    with it:
        s3_proxy.reset()
        for i in range(len(it)):
            it[i]
        counts = s3_proxy.reset()
    assert counts == {"GET": len(df)}, counts


@pytest.mark.slow
def test_validation_lists_instead_of_one_request_per_row(
    s3_server, s3fs_direct, s3_options, s3_proxy
):
    prefix = "data/many"
    png = _tiny_png()
    put_objects(s3fs_direct, {f"{prefix}/{c}/{i}.png": png for c in "ab" for i in range(150)})
    rows = [{"filename": f"{c}/{i}.png", "class": c} for c in "ab" for i in range(150)]
    rows.append({"filename": "a/missing.png", "class": "a"})
    s3_proxy.reset()
    with pytest.warns(UserWarning, match="Found 1 invalid image filename"):
        it = rk.ImageDataGenerator(storage_options=s3_options).flow_from_dataframe(
            pd.DataFrame(rows), f"s3://{prefix}"
        )
    counts = s3_proxy.reset()
    with it:
        assert it.samples == 300
    assert counts.get("HEAD", 0) + counts.get("GET", 0) <= 1, counts
    assert counts["LIST"] <= 3, counts


def test_odd_keys_are_read_literally(s3fs_direct, s3_options, s3_proxy):
    names = ["x[1].png", "x1.png", "star*.png", "what?.png", "hash#tag.png", "sp ace.png",
             "ünï©ødé.png", "pct%20.png"]  # fmt: skip
    rng = np.random.default_rng(1)
    payloads = {}
    for value, name in enumerate(names):
        pixels = np.full((4, 4, 3), value * 20 + int(rng.integers(5)), dtype="uint8")
        payloads[f"data/odd/{name}"] = png_bytes(pixels)
    put_objects(s3fs_direct, payloads)
    df = pd.DataFrame({"filename": names, "class": ["a"] * len(names)})
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_dataframe(
        df, "s3://data/odd", target_size=(4, 4), shuffle=False, batch_size=len(names)
    ) as it:
        assert it.samples == len(names)
        x, _ = it[0]
    for i, name in enumerate(names):
        expected = np.asarray(
            rk.decode_image(payloads[f"data/odd/{name}"], name, target_size=(4, 4)), "float32"
        )
        np.testing.assert_array_equal(x[i], expected, err_msg=name)


def test_missing_directory_is_file_not_found(s3_options):
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with pytest.raises(FileNotFoundError, match="s3://data/no-such-prefix"):
        gen.flow_from_directory("s3://data/no-such-prefix")
    with pytest.raises(FileNotFoundError, match="s3://data/no-such-prefix"):
        gen.flow_from_dataframe(
            pd.DataFrame({"filename": ["a.png"], "class": ["a"]}), "s3://data/no-such-prefix"
        )


def test_missing_object_names_the_url(s3_images, s3_options):
    url, df = s3_images
    df = pd.DataFrame({"filename": ["cat/nope.png"], "class": ["cat"]})
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_dataframe(df, url, validate_filenames=False) as it:
        with pytest.raises(FileNotFoundError, match=f"{url}/cat/nope.png"):
            it[0]


def test_bad_credentials_are_permission_error_without_the_secret(s3_images, s3_options):
    url, df = s3_images
    secret = "wrong-secret-value-123456"
    bad = dict(s3_options, secret=secret)
    gen = rk.ImageDataGenerator(storage_options=bad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gen.flow_from_dataframe(df, url, validate_filenames=False) as it:
            with pytest.raises(PermissionError) as info:
                it[0]
    assert url in str(info.value)
    assert secret not in str(info.value) and secret not in repr(it) and secret not in repr(gen)
    with pytest.raises(PermissionError) as info:
        gen.flow_from_directory(url)
    assert secret not in str(info.value)


@pytest.mark.slow
def test_save_to_dir_accepts_a_url(s3_images, s3_options, s3fs_direct):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_dataframe(
        df, url, target_size=(6, 6), batch_size=3, save_to_dir="s3://data/saved", save_prefix="p"
    ) as it:
        it[0]
    saved = s3fs_direct.ls("data/saved")
    assert len(saved) == 3 and all(name.split("/")[-1].startswith("p_") for name in saved)


def test_chained_simplecache_url(image_dir, s3_images, s3_options, tmp_path):
    local, df = image_dir
    url, _ = s3_images
    _, expected = stock_batches(local, df, target_size=(5, 5), batch_size=32, shuffle=False)
    urls = df.assign(filename="simplecache::" + url + "/" + df["filename"])
    options = {"s3": s3_options, "simplecache": {"cache_storage": str(tmp_path)}}
    gen = rk.ImageDataGenerator(storage_options=options)
    with gen.flow_from_dataframe(
        urls, target_size=(5, 5), batch_size=32, shuffle=False, validate_filenames=False
    ) as it:
        assert_same_batch(expected[0], it[0])


@pytest.mark.slow
def test_model_fit_one_epoch_on_s3(s3_images, s3_options, image_dir):
    import keras

    url, df = s3_images
    local, _ = image_dir

    def fit(directory, options):
        keras.utils.set_random_seed(0)  # the same weights, and the same shuffle, for both
        gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=options)
        kwargs = dict(target_size=(16, 16), batch_size=4, seed=0)
        with gen.flow_from_dataframe(df, directory, **kwargs) as it:
            model = keras.Sequential(
                [
                    keras.Input((16, 16, 3)),
                    keras.layers.Conv2D(4, 3, activation="relu"),
                    keras.layers.GlobalAveragePooling2D(),
                    keras.layers.Dense(3, activation="softmax"),
                ]
            )
            model.compile("adam", "categorical_crossentropy")
            return model.fit(it, epochs=1, verbose=0).history["loss"], it.stats.images

    losses, images = fit(url, s3_options)
    # Trained on the very batches that the same images on local disk give.
    assert losses == pytest.approx(fit(local, None)[0], rel=1e-5) and len(losses) == 1
    assert images >= len(df)


def _tiny_png() -> bytes:
    return png_bytes(np.zeros((2, 2, 3), dtype="uint8"))


def test_rows_that_leave_the_directory_are_dropped_as_stock_drops_missing_files(
    image_dir, s3_images, s3_options
):
    """`..` is resolved; a row that leaves `directory` (or names a folder) is an invalid row."""
    local, df = image_dir
    url, _ = s3_images
    label, name = df["class"][0], df["filename"][0].rsplit("/", 1)[-1]

    def frame(directory: str) -> pd.DataFrame:
        rows = [
            "../../secret/x.png",  # leaves the directory, and the bucket
            f"{label}/../../{df['filename'][1]}",  # leaves the directory
            f"{label}/nested/../{name}",  # stays inside: kept
            f"../{directory.rsplit('/', 1)[-1]}/{df['filename'][2]}",  # out and back in: kept
            f"{label}/",  # a folder
        ]
        extra = pd.DataFrame({"filename": rows, "class": label})
        return pd.concat([df[["filename", "class"]], extra], ignore_index=True)

    kw = dict(target_size=(6, 6), batch_size=8, shuffle=False)
    with pytest.warns(UserWarning, match="Found 3 invalid image filename"):
        stock, expected = stock_batches(local, frame(local), **kw)
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with pytest.warns(UserWarning, match="Found 3 invalid image filename"):
        it = gen.flow_from_dataframe(frame(url), url, **kw)
    with it:
        assert it.filenames[:-1] == stock.filenames[:-1]
        assert it.filepaths[-2:] == [f"{url}/{label}/{name}", f"{url}/{df['filename'][2]}"]
        for i, batch in enumerate(expected):
            assert_same_batch(batch, it[i])


def test_full_url_rows_resolve_dot_segments_inside_their_bucket(s3_images, s3_options):
    url, df = s3_images
    first = df["filename"][0]
    rows = [f"{url}/{first}", f"{url}/x/../{first}", "s3://data/../secret/x.png"]
    frame = pd.DataFrame({"filename": rows, "class": "a"})
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with pytest.warns(UserWarning, match="Found 1 invalid image filename"):
        it = gen.flow_from_dataframe(frame, target_size=(5, 5), batch_size=2, shuffle=False)
    with it:
        assert it.filepaths == [f"{url}/{first}"] * 2
        x, _ = it[0]
        np.testing.assert_array_equal(x[0], x[1])


@pytest.fixture
def secret_bucket(s3fs_direct):
    """An empty bucket `secret`, which a save_prefix must never reach."""
    if not s3fs_direct.exists("secret"):
        s3fs_direct.mkdir("secret")
    yield
    assert not s3fs_direct.find("secret", refresh=True), "something was written to `secret`"


@pytest.mark.parametrize("prefix", ["s3://secret/evil", "../evil", "sub/p", "a\\b", "a::b"])
def test_save_prefix_cannot_leave_a_url_save_to_dir(s3_images, s3_options, secret_bucket, prefix):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with pytest.raises(ValueError, match="save_prefix"):
        gen.flow_from_dataframe(df, url, save_to_dir="s3://data/aug-refused", save_prefix=prefix)
    with pytest.raises(ValueError, match="save_prefix"):
        gen.flow_from_directory(url, save_to_dir="s3://data/aug-refused", save_prefix=prefix)


def test_save_prefix_with_a_url_under_a_local_save_to_dir_is_as_stock(
    s3_images, s3_options, secret_bucket, tmp_path
):
    """Stock joins with `os.path.join`: no such local folder, and nothing written to S3."""
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options, retries=1)
    kw = dict(target_size=(6, 6), batch_size=2, save_to_dir=str(tmp_path))
    with gen.flow_from_dataframe(df, url, save_prefix="s3://secret/evil", **kw) as it:
        with pytest.raises(FileNotFoundError):
            it[0]


@pytest.mark.slow
def test_a_stalled_save_is_cancelled_and_retried(s3_server, s3_images, s3fs_direct):
    """The first PUT hangs: it is cut at `timeout_s` and sent again, not waited on for minutes."""
    url, df = s3_images
    stall = FaultPlan(1.0, kinds=("stall",), methods=("PUT",), max_faults_per_key=1, stall_s=120)
    with CountingProxy(s3_server.port, faults=stall) as proxy:
        options = s3_server.storage_options
        options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=proxy.endpoint_url)
        retries = rk.RetryPolicy(timeout_s=1, backoff_s=0.01, deadline_s=60)
        gen = rk.ImageDataGenerator(storage_options=options, retries=retries, prefetch_batches=0)
        target = f"data/aug-{uuid.uuid4().hex[:6]}"
        kw = dict(target_size=(6, 6), batch_size=1, shuffle=False, save_prefix="p")
        with gen.flow_from_dataframe(df, url, save_to_dir=f"s3://{target}", **kw) as it:
            done = threading.Thread(target=it.__getitem__, args=(0,), daemon=True)
            done.start()
            done.join(30)  # the stall lasts 120 s; s3fs would wait 60 s (its read timeout)
            assert not done.is_alive(), "the save waited for the stalled PUT"
        assert proxy.faults_injected["stall"] == 1
        assert len(s3fs_direct.ls(target, refresh=True)) == 1


def test_an_empty_class_folder_without_a_marker_needs_classes(
    image_dir, s3_images, s3_options, tmp_path
):
    """S3 keeps no empty folder: `classes=[...]` gives stock's classes and labels."""
    local, _ = image_dir
    url, _ = s3_images
    copy = tmp_path / "train"
    shutil.copytree(local, copy)
    (copy / "aaa-empty").mkdir()  # sorts first: every label moves by one if it is missed
    stock = keras_image.ImageDataGenerator().flow_from_directory(str(copy), shuffle=False)
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_directory(url, shuffle=False) as missed:
        assert missed.num_classes == stock.num_classes - 1  # what the store cannot show
    classes = list(stock.class_indices)
    with gen.flow_from_directory(url, shuffle=False, classes=classes) as it:
        assert it.class_indices == stock.class_indices
        np.testing.assert_array_equal(it.classes, stock.classes)
