"""`az://` against a real Azure Blob endpoint (Azurite), through adlfs and through obstore."""

from __future__ import annotations

import base64
import uuid
import warnings

import pandas as pd
import pytest

import remote_keras as rk
from remote_keras.testing import AzuriteServer, CountingProxy
from remote_keras.testing.azurite import azurite_binary
from tests.cloud_stores import LOADERS, emulator_or_skip, fit_record, stock_batches
from tests.helpers import assert_same_batch


@pytest.fixture(scope="module")
def azurite():
    emulator_or_skip(azurite_binary, "Azurite (npm package `azurite`)")
    with AzuriteServer(containers=("data",)) as server:
        yield server


@pytest.fixture(scope="module")
def azure_proxy(azurite):
    with CountingProxy(azurite.port) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def azure_images(azurite, image_dir):
    """The local image folder uploaded to `az://data/<unique>/`; returns (url, df)."""
    import adlfs

    local, df = image_dir
    fs = adlfs.AzureBlobFileSystem(**azurite.storage_options, skip_instance_cache=True)
    prefix = f"data/{uuid.uuid4().hex[:8]}"
    fs.put(local + "/", prefix + "/", recursive=True)
    return f"az://{prefix}", df


@pytest.fixture
def azure_options(azurite, azure_proxy):
    """adlfs-style options reaching Azurite through the counting proxy (counts reset)."""
    azure_proxy.reset()
    return {"connection_string": azurite.connection_string(azure_proxy.endpoint_url)}


@pytest.mark.parametrize("loader", LOADERS)
def test_directory_listing_and_batches_equal_stock(
    image_dir, azure_images, azure_options, azure_proxy, loader
):
    local, df = image_dir
    url, _ = azure_images
    stock, expected = stock_batches(local, target_size=(7, 7), batch_size=6, shuffle=False)
    gen = rk.ImageDataGenerator(storage_options=azure_options, loader=loader)
    with gen.flow_from_directory(url, target_size=(7, 7), batch_size=6, shuffle=False) as it:
        listing = azure_proxy.reset()
        # One listing page and adlfs's one HEAD of the prefix: no request per file.
        assert listing == {"GET": 1, "HEAD": 1}, listing
        assert it.filenames == stock.filenames
        assert it.class_indices == stock.class_indices
        assert it.filepaths == [f"{url}/{name}" for name in stock.filenames]
        for i, batch in enumerate(expected):
            assert_same_batch(batch, it[i])
        reads = azure_proxy.reset()
    assert reads == {"GET": len(df)}, reads  # one GET per image, no HEAD or properties call


@pytest.mark.parametrize("loader", LOADERS)
def test_dataframe_batches_equal_stock_with_one_get_per_image(
    image_dir, azure_images, azure_options, azure_proxy, loader
):
    local, df = image_dir
    url, _ = azure_images
    _, expected = stock_batches(local, df, target_size=(9, 9), batch_size=8, seed=3)
    gen = rk.ImageDataGenerator(storage_options=azure_options, loader=loader)
    with gen.flow_from_dataframe(
        df, url, target_size=(9, 9), batch_size=8, seed=3, validate_filenames=False
    ) as it:
        assert azure_proxy.reset() == {}
        for i, batch in enumerate(expected):
            assert_same_batch(batch, it[i])
        counts = azure_proxy.reset()
    assert counts == {"GET": len(df)}, counts


@pytest.mark.slow
def test_model_fit_trains_on_stock_batches_with_one_get_per_image(
    image_dir, azure_images, azure_options, azure_proxy
):
    local, df = image_dir
    url, _ = azure_images
    kwargs = dict(target_size=(6, 6), batch_size=5, shuffle=False)
    stock, _ = stock_batches(local, df, **kwargs)
    gen = rk.ImageDataGenerator(storage_options=azure_options, loader="obstore")
    with gen.flow_from_dataframe(df, url, validate_filenames=False, **kwargs) as it:
        azure_proxy.reset()
        assert fit_record(it, 2) == fit_record(stock, 2)
    assert azure_proxy.reset() == {"GET": 2 * len(df)}


@pytest.mark.parametrize("loader", LOADERS)
def test_missing_container_is_file_not_found_naming_the_url(azure_options, loader):
    gen = rk.ImageDataGenerator(storage_options=azure_options, loader=loader)
    with pytest.raises(FileNotFoundError, match="az://no-such-container/train"):
        gen.flow_from_directory("az://no-such-container/train")
    df = pd.DataFrame({"filename": ["cat/a.png"], "class": ["cat"]})
    with gen.flow_from_dataframe(df, "az://no-such-container/x", validate_filenames=False) as it:
        with pytest.raises(FileNotFoundError, match="az://no-such-container/x/cat/a.png"):
            it[0]


@pytest.mark.parametrize("loader", LOADERS)
def test_bad_key_is_permission_error_without_the_secret(azurite, azure_images, azure_proxy, loader):
    url, df = azure_images
    secret = base64.b64encode(b"wrong-secret-value-" + b"x" * 45).decode()
    options = {"connection_string": azurite.connection_string(azure_proxy.endpoint_url, secret)}
    gen = rk.ImageDataGenerator(storage_options=options, loader=loader)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gen.flow_from_dataframe(df, url, validate_filenames=False) as it:
            with pytest.raises(PermissionError) as info:
                it[0]
    assert url in str(info.value)
    assert secret not in str(info.value) and secret not in repr(it) and secret not in repr(gen)
    with pytest.raises(PermissionError) as info:
        gen.flow_from_directory(url)
    assert url in str(info.value) and secret not in str(info.value)


def test_obstore_settings_from_an_adlfs_connection_string():
    """adlfs's option styles become obstore's Azure settings; what it cannot express fails."""
    from remote_keras.storage.loaders.obstore_config import translate_options

    key = "a2V5LWZvci10ZXN0cw=="
    text = f"AccountName=acct;AccountKey={key};BlobEndpoint=http://127.0.0.1:1/acct/;"
    settings = translate_options("az", {"connection_string": text, "blocksize": 1})
    assert settings.config == {
        "account_name": "acct", "account_key": key, "endpoint": "http://127.0.0.1:1/acct"
    }  # fmt: skip
    assert settings.client_options["allow_http"] is True
    assert key not in repr(settings)
    cloud = "DefaultEndpointsProtocol=https;AccountName=acct;EndpointSuffix=core.chinacloudapi.cn"
    settings = translate_options("az", {"connection_string": cloud, "sas_token": "?sv=1&sig=2"})
    assert settings.config["endpoint"] == "https://acct.blob.core.chinacloudapi.cn"
    assert settings.config["sas_key"] == "sv=1&sig=2"
    assert "allow_http" not in settings.client_options
    assert translate_options("az", {"connection_string": "UseDevelopmentStorage=true"}).config == {
        "use_emulator": True
    }
    with pytest.raises(ValueError, match="credential.*use loader='fsspec'"):
        translate_options("az", {"credential": object()})


def test_image_dataset_from_directory_equals_keras_on_the_local_copy(
    image_dir, azure_images, azure_options, azure_proxy
):
    import keras

    local, df = image_dir
    url, _ = azure_images
    kwargs = dict(image_size=(7, 9), batch_size=5, seed=3)
    stock = keras.utils.image_dataset_from_directory(local, **kwargs)
    ours = rk.image_dataset_from_directory(url, storage_options=azure_options, **kwargs)
    assert ours.file_paths == [f"{url}/{p[len(local) + 1 :]}" for p in stock.file_paths]
    azure_proxy.reset()
    expected, got = list(stock.as_numpy_iterator()), list(ours.as_numpy_iterator())
    assert len(expected) == len(got)
    for a, b in zip(expected, got):
        assert_same_batch(a, b)
    assert azure_proxy.reset() == {"GET": len(df)}  # one GET per image
