"""fsspec-style storage options (s3fs, gcsfs, adlfs) and `AWS_*` variables as obstore's settings."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from remote_keras.storage import connections
from remote_keras.storage.loaders.obstore_errors import first_line

# s3fs options that tune caching, listing, uploads or concurrency: no GET changes.
_S3FS_IGNORED = frozenset(
    {
        "max_concurrency", "default_block_size", "default_fill_cache", "default_cache_type",
        "cache_regions", "skip_instance_cache", "use_listings_cache", "listings_expiry_time",
        "max_paths", "version_aware", "fixed_upload_size", "asynchronous", "loop",
    }
)  # fmt: skip
_S3FS_INEXPRESSIBLE = ("profile", "session")
# gcsfs and adlfs options that tune caching, listing, uploads or concurrency: no GET changes.
_GCSFS_IGNORED = frozenset(
    {
        "project", "access", "consistency", "cache_timeout", "secure_serialize",
        "check_connection", "requests_timeout", "block_size", "session_kwargs", "version_aware",
        "skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths",
        "asynchronous", "loop", "default_location", "timeout",
    }
)  # fmt: skip
_ADLFS_IGNORED = frozenset(
    {
        "blocksize", "default_fill_cache", "default_cache_type", "version_aware",
        "assume_container_exists", "max_concurrency", "skip_instance_cache",
        "use_listings_cache", "listings_expiry_time", "max_paths", "asynchronous", "loop",
        "location_mode", "socket_timeout", "timeout", "connection_timeout", "read_timeout",
    }
)  # fmt: skip
# botocore `Config` fields that only tune pooling, checksums, validation or telemetry.
_CONFIG_KWARGS_IGNORED = frozenset(
    {
        "max_pool_connections", "response_checksum_validation", "request_checksum_calculation",
        "tcp_keepalive", "parameter_validation", "user_agent_extra", "user_agent_appid",
        "inject_host_prefix", "endpoint_discovery_enabled", "disable_request_compression",
        "request_min_compression_size_bytes", "defaults_mode", "account_id_endpoint_mode",
    }
)  # fmt: skip
_S3_CONFIG_IGNORED = frozenset({"payload_signing_enabled", "us_east_1_regional_endpoint"})
_SIGV4 = (None, "s3v4", "v4")


class _S3Arguments(NamedTuple):
    """s3fs's arguments, consumed (popped) as each is turned into obstore's."""

    options: dict[str, Any]
    client_kwargs: dict[str, Any]
    config_kwargs: dict[str, Any]


@dataclasses.dataclass
class _ObstoreSettings:
    """What `obstore.store.from_url` gets for one bucket; `credentials` are explicit ones."""

    config: dict[str, Any] = dataclasses.field(repr=False)
    client_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    retry_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    credentials: tuple[str, str, str | None] | None = dataclasses.field(default=None, repr=False)


class _StaticCredentials:
    """Explicit S3 credentials: no `AWS_SESSION_TOKEN` from the environment is mixed in."""

    def __init__(self, key: str, secret: str, token: str | None) -> None:
        self._credential = {
            "access_key_id": key,
            "secret_access_key": secret,
            "token": token,
            "expires_at": None,
        }

    def __repr__(self) -> str:
        return "_StaticCredentials()"

    def __call__(self) -> dict[str, Any]:
        return self._credential


def open_store(url: str, settings: _ObstoreSettings) -> Any:
    """Builds the obstore store for a bucket URL; bad options raise a one-line ValueError."""
    from obstore.store import from_url

    extra = {}
    if settings.credentials is not None:
        extra["credential_provider"] = _StaticCredentials(*settings.credentials)
    try:
        open_url: Any = from_url  # its overloads are per store type; the URL decides here
        return open_url(
            url,
            config=settings.config,
            client_options=settings.client_options,
            retry_config=settings.retry_config,
            **extra,
        )
    except Exception as exc:  # obstore's message cut to its first line
        problem = first_line(exc)
    raise ValueError(f"Invalid storage_options for loader='obstore': {problem}")


def translate_options(
    protocol: str,
    options: Mapping[str, Any],
    bucket: str = "",
    environ: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> _ObstoreSettings:
    """Translates fsspec-style storage options into obstore's settings for one bucket.

    Args:
        protocol: The URL's protocol: `"s3"`, `"gs"`, `"az"`, ...
        options: fsspec-style storage options.
        bucket: The bucket, for virtual-hosted requests to a custom endpoint.
        environ: Where `AWS_*` variables, `STORAGE_EMULATOR_HOST` and
            `AZURE_STORAGE_CONNECTION_STRING` are read; `os.environ` by default.
        timeout_s: Seconds one request (connection and whole body) may take;
            `config_kwargs` `connect_timeout` / `read_timeout` win.

    Returns:
        obstore's config, client options, retry config and explicit credentials.

    Raises:
        ValueError: an option obstore cannot express, or conflicting values.
    """
    options = dict(options)
    settings = _ObstoreSettings(
        {}, connections.obstore_client_options(timeout_s), dict(connections.OBSTORE_RETRY)
    )
    environ = os.environ if environ is None else environ
    if protocol in ("gs", "gcs"):
        _gcs_options(options, settings, environ)
    elif protocol in ("az", "abfs", "abfss"):
        _azure_options(options, settings, environ)
    if protocol not in ("s3", "s3a"):
        options.pop("client_kwargs", None)
        settings.config.update(options)
        return settings
    client_kwargs = dict(options.pop("client_kwargs", None) or {})
    config_kwargs = dict(options.pop("config_kwargs", None) or {})
    for name in _S3FS_INEXPRESSIBLE:
        if options.pop(name, None) is not None:
            raise ValueError(_inexpressible(f"`{name}`"))
    if client_kwargs.pop("config", None) is not None:
        raise ValueError(_inexpressible("`client_kwargs['config']` (a botocore Config)"))
    client_kwargs.pop("api_version", None)
    given = _S3Arguments(options, client_kwargs, config_kwargs)
    _s3_credentials(given, settings)
    endpoint = _s3_endpoint(given, settings, environ)
    _s3_transport(given, settings)
    style = _s3_addressing(config_kwargs, settings)
    unknown = sorted(set(config_kwargs) - _CONFIG_KWARGS_IGNORED)
    if unknown:
        raise ValueError(_inexpressible(f"`config_kwargs` {unknown}"))
    if client_kwargs:
        raise ValueError(_inexpressible(f"`client_kwargs` {sorted(client_kwargs)}"))
    if endpoint:
        if style == "virtual" and bucket:  # botocore puts the bucket before the host
            parts = urlsplit(endpoint)
            endpoint = urlunsplit(parts._replace(netloc=f"{bucket}.{parts.netloc}"))
        settings.config["endpoint"] = endpoint
    for name in _S3FS_IGNORED:
        options.pop(name, None)
    settings.config.update(options)  # obstore's own S3 keys, as given
    return settings


def _s3_credentials(given: _S3Arguments, settings: _ObstoreSettings) -> None:
    """Explicit keys (as `settings.credentials`), `anon` and `requester_pays`."""
    options, client_kwargs, config_kwargs = given
    key = _one_of(
        "the access key",
        options.pop("key", None),
        options.pop("username", None),
        client_kwargs.pop("aws_access_key_id", None),
    )
    secret = _one_of(
        "the secret key",
        options.pop("secret", None),
        options.pop("password", None),
        client_kwargs.pop("aws_secret_access_key", None),
    )
    token = _one_of(
        "the session token",
        options.pop("token", None),
        client_kwargs.pop("aws_session_token", None),
    )
    signature = config_kwargs.pop("signature_version", None)
    unsigned = type(signature).__name__ == "UNSIGNED"  # botocore.UNSIGNED
    if not unsigned and signature not in _SIGV4:
        raise ValueError(_inexpressible(f"`signature_version={signature!r}` (only SigV4)"))
    if options.pop("anon", False) or unsigned:
        settings.config["skip_signature"] = True
    elif (key is None) != (secret is None) or (token is not None and key is None):
        raise ValueError("storage_options need both `key` and `secret`, or neither")
    elif key is not None:
        settings.credentials = (key, secret, token)
    if options.pop("requester_pays", False):
        settings.config["request_payer"] = True
    additional = dict(options.pop("s3_additional_kwargs", None) or {})
    if str(additional.pop("RequestPayer", "")).lower() == "requester":
        settings.config["request_payer"] = True
    if additional:
        raise ValueError(_inexpressible(f"`s3_additional_kwargs` {sorted(additional)}"))


def _s3_endpoint(
    given: _S3Arguments, settings: _ObstoreSettings, environ: Mapping[str, str]
) -> str | None:
    """The endpoint and region, from the options first, then botocore's variables."""
    options, client_kwargs, config_kwargs = given
    region = _first_given(
        client_kwargs.pop("region_name", None),
        config_kwargs.pop("region_name", None),
        options.pop("region", None),
        environ.get("AWS_REGION"),
        environ.get("AWS_DEFAULT_REGION"),
        "us-east-1",  # what botocore signs with for a custom endpoint and no region
    )
    settings.config["region"] = region
    endpoint = _one_of(
        "the endpoint",
        options.pop("endpoint_url", None),
        client_kwargs.pop("endpoint_url", None),
        options.pop("endpoint", None),
    )
    ignore_env = config_kwargs.pop("ignore_configured_endpoint_urls", None)
    if ignore_env is None:
        ignore_env = environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() == "true"
    if not endpoint:
        from_env = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
        if from_env and ignore_env:  # obstore would read it: name AWS's own endpoint instead
            endpoint = f"https://s3.{region}.amazonaws.com"
        else:
            endpoint = from_env or None
    if endpoint and endpoint.lower().startswith("http://"):
        settings.client_options["allow_http"] = True
    return endpoint


def _s3_transport(given: _S3Arguments, settings: _ObstoreSettings) -> None:
    """TLS, timeouts, retries, proxy and user agent."""
    options, client_kwargs, config_kwargs = given
    client_options = settings.client_options
    is_http = bool(client_options.get("allow_http"))
    use_ssl = _one_of("use_ssl", options.pop("use_ssl", None), client_kwargs.pop("use_ssl", None))
    if use_ssl is False and not is_http:
        raise ValueError(_inexpressible("`use_ssl=False` without an http:// `endpoint_url`"))
    verify = client_kwargs.pop("verify", None)
    if verify is False:
        client_options["allow_invalid_certificates"] = True
    elif isinstance(verify, (str, os.PathLike)):
        try:
            with open(verify, encoding="ascii") as f:
                client_options["root_certificate"] = f.read()
        except OSError as exc:
            raise ValueError(f"Cannot read the CA bundle `verify={str(verify)!r}`: {exc}") from None
    connect_timeout = config_kwargs.pop("connect_timeout", None)
    if connect_timeout is not None:
        client_options["connect_timeout"] = timedelta(seconds=connect_timeout)
    read_timeout = config_kwargs.pop("read_timeout", None)
    if read_timeout is not None:
        client_options["read_timeout"] = timedelta(seconds=read_timeout)
        client_options["timeout"] = max(client_options["timeout"], timedelta(seconds=read_timeout))
    retries = dict(config_kwargs.pop("retries", None) or {})
    if retries.get("total_max_attempts") is not None:  # counts the first request
        settings.retry_config["max_retries"] = max(0, int(retries["total_max_attempts"]) - 1)
    elif retries.get("max_attempts") is not None:  # botocore: retries only
        settings.retry_config["max_retries"] = max(0, int(retries["max_attempts"]))
    proxy = (config_kwargs.pop("proxies", None) or {}).get("http" if is_http else "https")
    if proxy:
        client_options["proxy_url"] = proxy
    user_agent = config_kwargs.pop("user_agent", None)
    if user_agent:
        client_options["user_agent"] = user_agent


def _s3_addressing(config_kwargs: dict[str, Any], settings: _ObstoreSettings) -> str | None:
    """`config_kwargs["s3"]`: path- or virtual-hosted-style requests; returns the style."""
    s3_config = dict(config_kwargs.pop("s3", None) or {})
    style = s3_config.pop("addressing_style", None)
    if style in ("path", "virtual"):
        settings.config["virtual_hosted_style_request"] = style == "virtual"
    elif style not in (None, "auto"):
        raise ValueError(f"Unknown `addressing_style`: {style!r}; expected 'path' or 'virtual'")
    unknown = [name for name, value in sorted(s3_config.items()) if value]
    unknown = [name for name in unknown if name not in _S3_CONFIG_IGNORED]
    if unknown:
        raise ValueError(_inexpressible(f"`config_kwargs['s3']` {unknown}"))
    return style


def _gcs_options(
    options: dict[str, Any], settings: _ObstoreSettings, environ: Mapping[str, str]
) -> None:
    """gcsfs's `endpoint_url` (else `STORAGE_EMULATOR_HOST`), `token` and tuning knobs; the
    emulator variable without a `token` means unsigned requests, as in Google's clients."""
    given = options.pop("endpoint_url", None)
    emulator = gcs_emulator(environ)
    endpoint = given or emulator
    if endpoint:
        if "://" not in endpoint:  # gcsfs takes `host:port` from STORAGE_EMULATOR_HOST
            endpoint = f"http://{endpoint}"
        settings.config["base_url"] = endpoint.rstrip("/")
        if endpoint.lower().startswith("http://"):
            settings.client_options["allow_http"] = True
    token = options.pop("token", None)
    if token == "anon" or (token is None and emulator and not given):  # noqa: S105 (gcsfs's word)
        settings.config["skip_signature"] = True
    elif isinstance(token, dict):  # a service account key's fields
        settings.config["service_account_key"] = json.dumps(token)
    elif isinstance(token, (str, os.PathLike)) and os.path.isfile(token):
        settings.config["service_account"] = os.fspath(token)
    elif token not in (None, "google_default", "cloud"):
        raise ValueError(_inexpressible("`token` (only 'anon', a key file or its dict)"))
    for name in _GCSFS_IGNORED:
        options.pop(name, None)


def gcs_emulator(environ: Mapping[str, str] | None = None) -> str | None:
    """`STORAGE_EMULATOR_HOST` as gcsfs reads it: `None` when unset, empty or `"default"`."""
    value = (os.environ if environ is None else environ).get("STORAGE_EMULATOR_HOST", "").strip()
    return value if value not in ("", "default") else None


def _azure_options(
    options: dict[str, Any], settings: _ObstoreSettings, environ: Mapping[str, str]
) -> None:
    """adlfs's `connection_string` (else its variable), `account_host`, `sas_token`, `anon`, ...

    `AZURE_STORAGE_USE_EMULATOR`, which obstore reads and adlfs (the lister) not, is overridden."""
    if options.pop("credential", None) is not None:
        raise ValueError(_inexpressible("`credential` (an azure-identity object)"))
    text = options.pop("connection_string", None) or environ.get("AZURE_STORAGE_CONNECTION_STRING")
    fields = _connection_string_fields(text or "")
    if fields.get("usedevelopmentstorage", "").lower() == "true":
        settings.config["use_emulator"] = True
    elif environ.get("AZURE_STORAGE_USE_EMULATOR", "").strip():
        settings.config["use_emulator"] = False
    for field, key in (("accountname", "account_name"), ("accountkey", "account_key")):
        if field in fields:
            options.setdefault(key, fields[field])
    sas = options.pop("sas_token", None) or fields.get("sharedaccesssignature")
    if sas:
        options.setdefault("sas_key", sas.lstrip("?"))
    endpoint = fields.get("blobendpoint") or options.pop("endpoint", None)
    host = options.pop("account_host", None)
    if not endpoint and host:
        endpoint = f"https://{host}"
    elif not endpoint and "endpointsuffix" in fields and "account_name" in options:
        scheme = fields.get("defaultendpointsprotocol", "https")
        endpoint = f"{scheme}://{options['account_name']}.blob.{fields['endpointsuffix']}"
    options.pop("endpoint", None)
    if endpoint:
        settings.config["endpoint"] = endpoint.rstrip("/")
        if endpoint.lower().startswith("http://"):
            settings.client_options["allow_http"] = True
    if options.pop("anon", False):
        settings.config["skip_signature"] = True
    for name in _ADLFS_IGNORED:
        options.pop(name, None)


def _connection_string_fields(text: str) -> dict[str, str]:
    """An Azure connection string's `Name=value;` fields, names lowercased."""
    fields = {}
    for part in text.split(";"):
        name, sep, value = part.partition("=")
        if sep and name.strip():
            fields[name.strip().lower()] = value.strip()
    return fields


def _one_of(what: str, *values: Any) -> Any:
    """The value of synonymous options (`None` if none is given); ValueError if they differ."""
    given = [value for value in values if value is not None]
    if any(value != given[0] for value in given[1:]):
        raise ValueError(f"storage_options give two different values for {what}")
    return given[0] if given else None


def _first_given(*values: Any) -> Any:
    """The first value that is neither `None` nor empty."""
    return next(value for value in values if value)


def _inexpressible(what: str) -> str:
    """The message for an option that obstore has no equivalent of."""
    return f"loader='obstore' cannot express the storage option {what}; use loader='fsspec'"
