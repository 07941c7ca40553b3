"""`loader="auto"`, the default: obstore where it can do what fsspec would, else fsspec."""

from __future__ import annotations

import importlib.util
import logging

import pytest

import remote_keras as rk
from remote_keras.storage.loaders import FsspecLoader, ObstoreLoader, choose_loader
from tests.helpers import assert_same_batch


def test_default_reads_s3_with_obstore_one_get_per_image_same_batches(
    s3_images, s3_options, s3_proxy, no_aws_environment, caplog
):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    kwargs = dict(target_size=(6, 6), batch_size=7, shuffle=False)
    with caplog.at_level(logging.DEBUG, logger="remote_keras"):
        auto = gen.flow_from_dataframe(df, url, **kwargs)
    forced = gen.flow_from_dataframe(df, url, loader="fsspec", **kwargs)
    with auto, forced:
        assert isinstance(auto.loader, ObstoreLoader) and isinstance(forced.loader, FsspecLoader)
        assert auto.loader_choice == "obstore for s3://" == auto.stats.loader
        assert "ObstoreLoader" in repr(auto)
        assert "loader='auto' reads s3:// with obstore" in caplog.text
        s3_proxy.reset()
        batches = [auto[i] for i in range(len(auto))]
        assert s3_proxy.reset() == {"GET": len(df)}
        for i, batch in enumerate(batches):
            assert_same_batch(forced[i], batch)


@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        ("profile", "AWS_PROFILE names an AWS profile"),
        ("no_credentials", "botocore looks further"),
        ("config", "no-config, which only botocore reads"),
        ("ca_bundle", "AWS_CA_BUNDLE"),
        ("inexpressible", "s3_additional_kwargs"),
    ],
)
def test_what_only_botocore_reads_keeps_fsspec_and_says_why(
    setting, reason, monkeypatch, no_aws_environment
):
    options: dict = {}
    if setting == "profile":
        monkeypatch.setenv("AWS_PROFILE", "research")
    elif setting == "no_credentials":
        for name in ("AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE"):
            monkeypatch.delenv(name, raising=False)
    elif setting == "config":
        (no_aws_environment / "no-config").write_text("[default]\nregion = eu-west-1\n")
    elif setting == "ca_bundle":
        monkeypatch.setenv("AWS_CA_BUNDLE", "/etc/ssl/company.pem")
        options = {"key": "k", "secret": "s", "endpoint_url": "https://minio.example:9000"}
    else:
        options = {
            "key": "k",
            "secret": "s3cr3t",
            "s3_additional_kwargs": {"SSECustomerKey": "k3y"},
        }
    loader, why = choose_loader("s3://bucket/train", options)
    assert isinstance(loader, FsspecLoader)
    assert why.startswith("fsspec: ") and reason in why
    assert "s3cr3t" not in why and "k3y" not in why  # option names, never values


def test_explicit_keys_and_http_endpoints_use_obstore(monkeypatch, no_aws_environment):
    monkeypatch.setenv("AWS_CA_BUNDLE", "/etc/ssl/company.pem")  # irrelevant over http://
    options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}
    loader, why = choose_loader("s3://bucket/x.png", options)
    assert isinstance(loader, ObstoreLoader) and why == "obstore for s3://"


def test_gcs_and_azure_need_credentials_obstore_can_read():
    assert isinstance(choose_loader("gs://b/x.png", {})[0], FsspecLoader)
    gcs = {"token": "anon", "endpoint_url": "http://127.0.0.1:9"}
    assert isinstance(choose_loader("gs://b/x.png", gcs)[0], ObstoreLoader)
    assert "azure-identity" in choose_loader("az://c/x.png", {"account_name": "a"})[1]
    azure = {"connection_string": "UseDevelopmentStorage=true"}
    assert isinstance(choose_loader("az://c/x.png", azure)[0], ObstoreLoader)


def test_other_urls_local_paths_and_missing_obstore_use_fsspec(monkeypatch, image_dir):
    local, df = image_dir
    with rk.ImageDataGenerator().flow_from_dataframe(df, local) as it:
        assert isinstance(it.loader, FsspecLoader)
        assert it.loader_choice == "fsspec: obstore does not read file:// URLs"
    assert "http://" in choose_loader("http://h/x.png", {})[1]
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "obstore" else real(n, *a)
    )
    assert "obstore is not installed" in choose_loader("s3://b/x.png", {"anon": True})[1]


def test_named_and_custom_loaders_are_kept(image_dir):
    local, df = image_dir
    gen = rk.ImageDataGenerator()
    with gen.flow_from_dataframe(df, local, loader="fsspec") as it:
        assert it.loader_choice == "fsspec"
    with gen.flow_from_dataframe(df, local, loader=lambda path: open(path, "rb").read()) as it:
        assert it.loader_choice == "given"
