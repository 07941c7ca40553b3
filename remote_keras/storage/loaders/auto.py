"""`loader="auto"` (the default): obstore where it can do what fsspec would, else fsspec.

obstore's GET costs about a quarter of s3fs's client CPU, so it is chosen for
`s3://`, `gs://` and `az://` whenever it is installed and can express the
given `storage_options` and environment. What only fsspec's clients read
(AWS profiles and shared config files, gcloud's application-default
credentials, azure-identity, botocore sessions, ...) keeps the fsspec loader,
and the choice says why.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping
from typing import Any

from remote_keras.storage import locations
from remote_keras.storage.loaders.fsspec_loader import FsspecLoader
from remote_keras.storage.loaders.obstore_config import gcs_emulator, translate_options
from remote_keras.storage.loaders.obstore_loader import ObstoreLoader
from remote_keras.storage.loaders.protocol import ClientSettings, Loader

logger = logging.getLogger("remote_keras")

# Credentials only botocore reads: then s3fs must do the reading.
_AWS_PROFILE_VARIABLES = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")
_AWS_CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
)
_AWS_SHARED_FILES = (
    ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
    ("AWS_CONFIG_FILE", "~/.aws/config"),
)


def choose_loader(
    url: str, settings: ClientSettings | Mapping[str, Any] | None = None
) -> tuple[Loader, str]:
    """The loader `loader="auto"` reads `url` (and its siblings) with, and why.

    Args:
        url: A path or URL the iterator reads (its folder, or its first file).
        settings: What the loader's clients are made with (`ClientSettings`),
            or just the storage options.

    Returns:
        `(loader, reason)`: an `ObstoreLoader` or a `FsspecLoader`, and one
        line saying why (`"obstore"` or `"fsspec: <why not obstore>"`).
    """
    protocol = locations.protocol_of(url) if locations.is_url(url) else "file"
    settings = ClientSettings.of(settings)
    why_not = _why_not_obstore(url, protocol, settings.storage_options)
    if why_not is None:
        loader: Loader = ObstoreLoader.from_settings(settings)
        reason = f"obstore for {protocol}://"
    else:
        loader, reason = FsspecLoader.from_settings(settings), f"fsspec: {why_not}"
    logger.debug("loader='auto' reads %s:// with %s", protocol, reason)
    return loader, reason


def _why_not_obstore(url: str, protocol: str, options: Mapping[str, Any]) -> str | None:
    if protocol not in ObstoreLoader.PROTOCOLS or "::" in url:
        return f"obstore does not read {protocol}:// URLs"
    if importlib.util.find_spec("obstore") is None:
        return "obstore is not installed (pip install obstore)"
    own = dict(options)
    if protocol in ("s3", "s3a"):
        found = _aws_settings_only_botocore_reads(own)
        if found:
            return found
    elif protocol in ("gs", "gcs"):
        # Without a `token`, gcsfs tries gcloud's default credentials, then none; obstore would
        # stop at the metadata server. For `STORAGE_EMULATOR_HOST` alone it sends none, as
        # Google's own clients do (`translate_options`), and emulators check none.
        if "token" not in own and (own.get("endpoint_url") or not gcs_emulator()):
            return "credentials come from gcloud's default sources, which gcsfs reads"
    elif not ({"connection_string", "account_key", "sas_token", "anon"} & own.keys()):
        if not _env("AZURE_STORAGE_CONNECTION_STRING"):
            return "credentials come from azure-identity, which adlfs uses"
    bucket = url.split("://", 1)[1].partition("/")[0]
    try:
        translate_options(protocol, own, bucket)
    except ValueError as exc:
        return str(exc).splitlines()[0]
    return None


def _aws_settings_only_botocore_reads(options: Mapping[str, Any]) -> str | None:
    """Why botocore would find settings (credentials, CA, region) that obstore would not."""
    client_kwargs = options.get("client_kwargs") or {}
    endpoint = (
        options.get("endpoint_url") or client_kwargs.get("endpoint_url")
        or _env("AWS_ENDPOINT_URL_S3") or _env("AWS_ENDPOINT_URL")
    )  # fmt: skip
    if _env("AWS_CA_BUNDLE") and "verify" not in client_kwargs:
        if not str(endpoint).startswith("http://"):
            return "AWS_CA_BUNDLE names CA certificates, which only botocore reads"
    explicit = any(
        options.get(name) for name in ("key", "secret", "username", "password", "anon", "profile")
    ) or any(client_kwargs.get(name) for name in ("aws_access_key_id", "aws_secret_access_key"))
    if explicit:
        return None  # given explicitly (`profile` is refused by `translate_options`)
    for variable in _AWS_PROFILE_VARIABLES:
        if _env(variable):
            return f"{variable} names an AWS profile, which only botocore reads"
    for variable, default in _AWS_SHARED_FILES:  # credentials, region or endpoint in them
        path = os.path.expanduser(_env(variable) or default)
        if os.path.isfile(path) and os.path.getsize(path):
            return f"settings may come from {path}, which only botocore reads"
    if not any(_env(name) for name in _AWS_CREDENTIAL_VARIABLES):
        # botocore's chain goes on (instance metadata, SSO, ...) and says clearly when it
        # finds nothing; obstore would send unsigned requests.
        return "no credentials in storage_options or AWS_* variables: botocore looks further"
    return None


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()
