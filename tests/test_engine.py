"""The speed-ups: the obstore loader, JPEG draft decoding and the disk cache."""

from __future__ import annotations

import io
import multiprocessing
import os

import numpy as np
import obstore  # noqa: F401 - a dev dependency: fail loudly if missing
import pandas as pd
import pytest
from keras.src.legacy.preprocessing import image as keras_image
from PIL import Image

import remote_keras as rk
from remote_keras.storage.cache import DiskCache
from remote_keras.testing.data import photo_like_jpeg
from tests.helpers import assert_same_batch, put_objects


def test_obstore_loader_equals_stock_with_one_get_per_image(
    image_dir, s3_images, s3_options, s3_proxy
):
    local, df = image_dir
    url, _ = s3_images
    stock = keras_image.ImageDataGenerator().flow_from_dataframe(
        df, local, target_size=(9, 9), batch_size=8, shuffle=False
    )
    gen = rk.ImageDataGenerator(storage_options=s3_options, loader="obstore")
    with gen.flow_from_dataframe(
        df, url, target_size=(9, 9), batch_size=8, shuffle=False, prefetch_batches=0
    ) as it:
        assert isinstance(it.loader, rk.ObstoreLoader)
        s3_proxy.reset()
        for i in range(len(stock)):
            assert_same_batch(stock[i], it[i])
        counts = s3_proxy.reset()
    assert counts == {"GET": len(df)}, counts


def test_obstore_loader_reads_odd_keys_literally(s3fs_direct, s3_options):
    names = ["o[1].png", "o1.png", "sp ace.png", "pct%41.png", "ünï.png", "q?.png", "h#.png"]
    payloads = {}
    for value, name in enumerate(names):
        buffer = io.BytesIO()
        Image.fromarray(np.full((3, 3, 3), 30 * value, dtype="uint8")).save(buffer, "PNG")
        payloads[f"data/oddob/{name}"] = buffer.getvalue()
    put_objects(s3fs_direct, payloads)
    loader = rk.ObstoreLoader(s3_options)
    for name in names:
        assert loader(f"s3://data/oddob/{name}") == payloads[f"data/oddob/{name}"], name


def test_obstore_loader_errors_are_builtin_families(s3_images, s3_options):
    url, _ = s3_images
    with pytest.raises(FileNotFoundError, match=f"{url}/nope.png"):
        rk.ObstoreLoader(s3_options)(f"{url}/nope.png")
    secret = "not-the-secret-0123456789"
    with pytest.raises(PermissionError, match=f"{url}/cat/cat_0.png") as info:
        rk.ObstoreLoader(dict(s3_options, secret=secret))(f"{url}/cat/cat_0.png")
    assert secret not in str(info.value)


def test_obstore_loader_falls_back_to_fsspec_for_other_urls(image_dir):
    directory, df = image_dir
    path = os.path.join(directory, df["filename"][0])
    assert rk.ObstoreLoader()(path) == open(path, "rb").read()


def test_unknown_loader_name_is_rejected():
    with pytest.raises(TypeError, match=r"one of \['auto', 'fsspec', 'obstore'\]"):
        rk.DataFrameIterator(pd.DataFrame({"filename": [], "class": []}), loader="fast")


@pytest.mark.slow
def test_jpeg_draft_is_opt_in_and_close_to_stock(tmp_path):
    rng = np.random.default_rng(3)
    (tmp_path / "a").mkdir()
    for i in range(4):
        (tmp_path / "a" / f"{i}.jpg").write_bytes(photo_like_jpeg(rng, 1200, 900))
    kwargs = dict(target_size=(112, 112), batch_size=4, shuffle=False)
    stock = keras_image.ImageDataGenerator().flow_from_directory(str(tmp_path), **kwargs)
    exact = rk.ImageDataGenerator().flow_from_directory(str(tmp_path), **kwargs)
    draft = rk.ImageDataGenerator(jpeg_draft=True).flow_from_directory(str(tmp_path), **kwargs)
    with exact, draft:
        expected, _ = stock[0]
        np.testing.assert_array_equal(exact[0][0], expected)  # the default stays exact
        approximate, _ = draft[0]
    assert approximate.shape == expected.shape
    assert not np.array_equal(approximate, expected)  # draft really decoded differently
    assert np.abs(approximate.mean() - expected.mean()) < 3  # ... the same picture


def test_jpeg_draft_leaves_png_exact(image_dir):
    directory, _ = image_dir
    kwargs = dict(target_size=(8, 8), shuffle=False, batch_size=32)
    stock = keras_image.ImageDataGenerator().flow_from_directory(directory, **kwargs)
    with rk.ImageDataGenerator(jpeg_draft=True).flow_from_directory(directory, **kwargs) as it:
        x, _ = it[0]
    png = [i for i, name in enumerate(stock.filenames) if name.endswith(".png")]
    np.testing.assert_array_equal(x[png], stock[0][0][png])


@pytest.mark.slow
def test_cache_makes_later_epochs_request_free(s3_images, s3_options, s3_proxy, tmp_path):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options, cache_dir=str(tmp_path / "cache"))
    kwargs = dict(target_size=(6, 6), batch_size=7, validate_filenames=False, shuffle=False)
    with gen.flow_from_dataframe(df, url, **kwargs) as it:
        s3_proxy.reset()
        first = [it[i] for i in range(len(it))]
        assert s3_proxy.reset() == {"GET": len(df)}
        it.on_epoch_end()  # the next epoch: nothing of this one is handed out again
        second = [it[i] for i in range(len(it))]
        assert s3_proxy.reset() == {}
        assert it.cache.hits == len(df)
    for a, b in zip(first, second):
        assert_same_batch(a, b)


def test_cache_stays_under_its_limit_and_evicts_least_recent(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=10_000)
    for i in range(30):
        cache.put(f"s3://b/{i}", bytes(1000))
        if i == 5:
            cache.get("s3://b/0")  # recently used: survives
    sizes = [e.stat().st_size for d in os.scandir(cache.root) if d.is_dir() for e in os.scandir(d)]
    assert sum(sizes) <= 10_000
    assert cache.get("s3://b/29") is not None
    assert cache.get("s3://b/1") is None


def test_cache_ignores_half_written_files(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=10**6)
    final = cache._path("s3://b/k")
    os.makedirs(os.path.dirname(final))
    with open(final + DiskCache.TMP_MARKER + "999-1", "wb") as f:
        f.write(b"partial")  # what a killed writer leaves behind
    assert cache.get("s3://b/k") is None
    cache.put("s3://b/k", b"whole")
    assert cache.get("s3://b/k") == b"whole"


def _fill(directory: str, start: int) -> None:
    cache = DiskCache(directory, max_bytes=50_000)
    for i in range(start, start + 40):
        cache.put(f"s3://b/{i % 50}", bytes([i % 256]) * 2000)
        data = cache.get(f"s3://b/{i % 50}")
        assert data is None or (len(data) == 2000 and len(set(data)) == 1)  # never torn


def test_cache_is_shared_safely_by_processes(tmp_path):
    context = multiprocessing.get_context("fork")  # the cache code needs no fresh interpreter
    workers = [context.Process(target=_fill, args=(str(tmp_path), s)) for s in (0, 20, 40)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    cache = DiskCache(tmp_path, max_bytes=50_000)
    cache.evict()
    entries = [e for d in os.scandir(cache.root) if d.is_dir() for e in os.scandir(d)]
    assert entries and not [e.name for e in entries if ".tmp-" in e.name]
    for i in range(50):
        data = cache.get(f"s3://b/{i}")
        assert data is None or (len(data) == 2000 and len(set(data)) == 1)
