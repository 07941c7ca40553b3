"""One suite for every object store: S3, GCS, Azure and lakeFS, each with both loaders.

Each store is a local server (rclone's S3, fake-gcs-server, Azurite, the lakeFS stand-in)
holding the suite's image folder, reached through a `CountingProxy`, and read through
fsspec's client (s3fs, gcsfs, adlfs, lakefs-spec) and through obstore (`loader="obstore"`;
for `lakefs://` it reads through its fsspec fallback). Batches are compared with stock Keras
on the same local files, and requests are counted. Backend-specific option translation is
at the end.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pytest

import remote_keras as rk
from remote_keras.testing import CountingProxy
from tests.cloud_stores import LOADERS, azurite_folder, gcs_folder, stock_batches
from tests.helpers import assert_same_batch, fit_record


@dataclasses.dataclass
class Store:
    """A store holding the image folder, and what reading it costs there."""

    url: str  # the image folder
    df: pd.DataFrame
    proxy: CountingProxy  # counts every request the package makes
    options: dict[str, Any]  # storage options that reach the store through `proxy`
    missing: str  # a URL in a bucket (container, repository) that does not exist
    listing: dict[str, int]  # requests that `flow_from_directory` makes to list the folder
    pinning: dict[str, int]  # requests when an iterator is made, before any read
    overhead: dict[str, int]  # requests of the first epoch beyond one GET per image
    with_secret: Callable[[str], dict[str, Any]] | None  # options with another secret, if any

    def reset(self) -> dict[str, int]:
        return dict(self.proxy.reset())

    def reads(self, images: int, first: bool = True) -> dict[str, int]:
        counts = dict(self.overhead) if first else {}
        counts["GET"] = counts.get("GET", 0) + images
        return counts


# ------------------------------------------------------------------------------- the stores


@pytest.fixture(scope="module")
def s3_store(s3_server, s3_images) -> Iterator[Store]:
    url, df = s3_images
    with CountingProxy(s3_server.port) as proxy:
        options = s3_server.storage_options
        options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=proxy.endpoint_url)
        yield Store(
            url, df, proxy, options, missing="s3://no-such-bucket/x",
            listing={"LIST": 1}, pinning={}, overhead={},
            with_secret=lambda secret: dict(options, secret=secret),
        )  # fmt: skip


@pytest.fixture(scope="module")
def gcs_store(image_dir) -> Iterator[Store]:
    local, df = image_dir
    with gcs_folder(local) as (server, proxy, url):
        # fake-gcs-server accepts any credentials (or none): no wrong secret to test there.
        yield Store(
            url, df, proxy, server.storage_options_for(proxy.endpoint_url),
            missing="gs://no-such-bucket/x", listing={"GET": 1}, pinning={}, overhead={},
            with_secret=None,
        )  # fmt: skip


@pytest.fixture(scope="module")
def azure_store(image_dir) -> Iterator[Store]:
    local, df = image_dir
    with azurite_folder(local) as (server, proxy, url):

        def with_secret(secret: str) -> dict[str, Any]:
            key = base64.b64encode(secret.encode() + b"x" * 45).decode()  # a well-formed key
            return {"connection_string": server.connection_string(proxy.endpoint_url, key)}

        yield Store(
            url, df, proxy,
            {"connection_string": server.connection_string(proxy.endpoint_url)},
            missing="az://no-such-container/x",
            listing={"GET": 1, "HEAD": 1},  # one listing page and adlfs's HEAD of the prefix
            pinning={}, overhead={}, with_secret=with_secret,
        )  # fmt: skip


@pytest.fixture(scope="module")
def lakefs_store(image_dir) -> Iterator[Store]:
    import lakefs
    from lakefs.client import Client
    from lakefs_spec import LakeFSFileSystem

    from remote_keras.testing import LakeFSServer

    local, df = image_dir
    with LakeFSServer() as server, CountingProxy(server.port) as proxy:
        client = Client(**server.storage_options)
        lakefs.Repository("suite", client=client).create(storage_namespace="local://suite")
        fs = LakeFSFileSystem(**server.storage_options, skip_instance_cache=True)
        for name in df["filename"]:
            fs.put_file(os.path.join(local, name), f"lakefs://suite/main/train/{name}")
        lakefs.Branch("suite", "main", client=client).commit("images")
        options = dict(server.storage_options, host=proxy.endpoint_url)
        yield Store(
            "lakefs://suite/main/train", df, proxy, options, missing="lakefs://no-such-repo/main/x",
            listing={"GET": 1, "LIST": 1},  # the branch's commit, then one listing page
            pinning={"GET": 1},  # the branch's commit: the iterator reads at it
            overhead={"GET": 1},  # once, whether the server presigns (this one does not)
            with_secret=lambda secret: dict(options, password=secret),
        )  # fmt: skip


STORES = ["s3", "gcs", "azure", "lakefs"]


@pytest.fixture(params=STORES)
def store(request) -> Store:
    """Each store in turn, its request counts reset."""
    found: Store = request.getfixturevalue(f"{request.param}_store")
    found.reset()
    return found


# ------------------------------------------------------------------------------- the suite


@pytest.mark.slow
@pytest.mark.parametrize("loader", LOADERS)
def test_directory_listing_and_batches_equal_stock(image_dir, store, loader):
    local, df = image_dir
    stock, expected = stock_batches(local, target_size=(7, 7), batch_size=6, shuffle=False)
    gen = rk.ImageDataGenerator(storage_options=store.options, loader=loader)
    with gen.flow_from_directory(store.url, target_size=(7, 7), batch_size=6, shuffle=False) as it:
        assert store.reset() == store.listing  # no request per file
        assert it.filenames == stock.filenames
        assert it.class_indices == stock.class_indices
        assert list(it.classes) == list(stock.classes)
        assert [_relative(store, url) for url in it.filepaths] == stock.filenames
        for i, batch in enumerate(expected):
            assert_same_batch(batch, it[i])
        reads = store.reset()
    assert reads == store.reads(len(df)), reads  # one GET per image, no HEAD or metadata call


@pytest.mark.parametrize("loader", LOADERS)
def test_dataframe_batches_equal_stock_with_one_get_per_image(image_dir, store, loader):
    local, df = image_dir
    _, expected = stock_batches(local, df, target_size=(9, 9), batch_size=8, seed=3)
    gen = rk.ImageDataGenerator(storage_options=store.options, loader=loader)
    with gen.flow_from_dataframe(
        df, store.url, target_size=(9, 9), batch_size=8, seed=3, validate_filenames=False
    ) as it:
        assert store.reset() == store.pinning
        for i, batch in enumerate(expected):
            assert_same_batch(batch, it[i])
        counts = store.reset()
    assert counts == store.reads(len(df)), counts


@pytest.mark.slow
def test_model_fit_trains_on_stock_batches_with_one_get_per_image(image_dir, store):
    local, df = image_dir
    kwargs = dict(target_size=(6, 6), batch_size=5, shuffle=False)
    stock, _ = stock_batches(local, df, **kwargs)
    gen = rk.ImageDataGenerator(storage_options=store.options)  # the default loader
    with gen.flow_from_dataframe(df, store.url, validate_filenames=False, **kwargs) as it:
        store.reset()
        assert fit_record(it, 2) == fit_record(stock, 2)
    counts = store.reset()
    assert counts == store.reads(2 * len(df)), counts


@pytest.mark.parametrize("loader", LOADERS)
def test_missing_bucket_is_file_not_found_naming_the_url(store, loader):
    gen = rk.ImageDataGenerator(storage_options=store.options, loader=loader)
    with pytest.raises(FileNotFoundError, match=store.missing.rsplit("/", 1)[0]):
        gen.flow_from_directory(store.missing)
    if store.url.startswith("lakefs://"):
        return  # a missing repository is found when the iterator pins it (above)
    df = pd.DataFrame({"filename": ["cat/a.png"], "class": ["cat"]})
    with gen.flow_from_dataframe(df, store.missing, validate_filenames=False) as it:
        with pytest.raises(FileNotFoundError, match=f"{store.missing}/cat/a.png"):
            it[0]


@pytest.mark.parametrize("store", [s for s in STORES if s != "gcs"], indirect=True)
@pytest.mark.parametrize("loader", LOADERS)
def test_a_wrong_secret_is_permission_error_without_the_secret(store, loader):
    """(fake-gcs-server accepts any credentials, or none: GCS has no wrong secret here.)"""
    assert store.with_secret is not None
    options = store.with_secret("wrong-secret-value-0123456789")
    secrets = _secrets(options)
    assert secrets
    gen = rk.ImageDataGenerator(storage_options=options, loader=loader)
    if not store.url.startswith("lakefs://"):  # lakeFS refuses when the iterator pins the ref
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with gen.flow_from_dataframe(store.df, store.url, validate_filenames=False) as it:
                with pytest.raises(PermissionError) as info:
                    it[0]
        assert store.url in str(info.value)
        for secret in secrets:
            assert secret not in str(info.value) + repr(it) + repr(gen)
    with pytest.raises(PermissionError) as info:
        gen.flow_from_directory(store.url)
    assert store.url.rsplit("/", 1)[0] in str(info.value)
    for secret in secrets:
        assert secret not in str(info.value) + repr(gen)


def _secrets(options: dict[str, Any]) -> list[str]:
    """The secret values in `options` (a key, a password, an account key in a string)."""
    found = [str(options[k]) for k in ("secret", "password") if k in options]
    text = options.get("connection_string", "")
    found += [part.split("=", 1)[1] for part in text.split(";") if part.startswith("AccountKey=")]
    return found


def _relative(store: Store, url: str, pinned: bool = True) -> str:
    """`url` below the store's image folder; a `pinned` lakeFS URL names the branch's commit."""
    if store.url.startswith("lakefs://"):
        repository, _, rest = url.removeprefix("lakefs://").partition("/")
        ref, _, path = rest.partition("/")
        assert repository == "suite" and (len(ref) == 64 if pinned else ref == "main"), url
        return path.removeprefix("train/")
    assert url.startswith(store.url + "/"), url
    return url[len(store.url) + 1 :]


@pytest.mark.slow
def test_image_dataset_from_directory_equals_keras_on_the_local_copy(image_dir, store):
    import keras

    local, df = image_dir
    kwargs = dict(image_size=(7, 9), batch_size=5, seed=3)
    stock = keras.utils.image_dataset_from_directory(local, **kwargs, verbose=False)
    ours = rk.image_dataset_from_directory(
        store.url, storage_options=store.options, verbose=False, **kwargs
    )
    relative = [p[len(local) + 1 :] for p in stock.file_paths]
    # The dataset's paths name what is read: on lakeFS, the commit (also in `lakefs_pins`).
    assert [_relative(store, url, pinned=True) for url in ours.file_paths] == relative
    store.reset()
    expected, got = list(stock.as_numpy_iterator()), list(ours.as_numpy_iterator())
    assert len(expected) == len(got)
    for a, b in zip(expected, got):
        assert_same_batch(a, b)
    counts = store.reset()
    assert counts == store.reads(len(df)), counts  # one GET per image


# ------------------------------------------------------------------- backend-specific options


def test_obstore_reads_gcsfs_emulator_variable(gcs_store, monkeypatch):
    """`STORAGE_EMULATOR_HOST` (`host:port`, as gcsfs reads it) points obstore there too."""
    monkeypatch.setenv(
        "STORAGE_EMULATOR_HOST", gcs_store.proxy.endpoint_url.removeprefix("http://")
    )
    loader = rk.ObstoreLoader({"token": "anon"})
    gcs_store.reset()
    first = f"{gcs_store.url}/{gcs_store.df['filename'][0]}"
    assert loader(first)[:4] in (b"\x89PNG", b"\xff\xd8\xff\xe0", b"\xff\xd8\xff\xdb")
    assert gcs_store.reset() == {"GET": 1}


def test_obstore_settings_from_gcsfs_options(tmp_path):
    """gcsfs's option styles become obstore's GCS settings; what it cannot express fails."""
    from remote_keras.storage.loaders.obstore_config import translate_options

    settings = translate_options("gs", {"endpoint_url": "http://127.0.0.1:1/", "token": "anon"})
    assert settings.config == {"base_url": "http://127.0.0.1:1", "skip_signature": True}
    assert settings.client_options["allow_http"] is True
    from_env = translate_options("gs", {"project": "p"}, environ={"STORAGE_EMULATOR_HOST": "h:2"})
    # No token with the emulator variable: unsigned, as Google's clients send it there.
    assert from_env.config == {"base_url": "http://h:2", "skip_signature": True}
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
