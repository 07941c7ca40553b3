"""`loader="obstore"` takes s3fs's option styles and fails fast and in one line, on real servers."""

from __future__ import annotations

import pickle
import socket
import subprocess
import time

import pytest

import remote_keras as rk
from remote_keras.storage import retry
from remote_keras.storage.loaders.obstore_config import translate_options
from remote_keras.storage.loaders.obstore_errors import one_line_error
from remote_keras.testing.proxy import FaultPlan
from remote_keras.testing.s3 import free_port, rclone_binary
from tests.helpers import assert_same_batch

PAYLOAD = b"obstore option styles"
# Each test sees only the AWS settings it makes itself.
pytestmark = pytest.mark.usefixtures("no_aws_environment")


@pytest.fixture(scope="module")
def obj(s3_server):
    """`(url, bytes)` of one object on the S3 server."""
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.storage_options, skip_instance_cache=True)
    fs.pipe("data/styles/a.bin", PAYLOAD)
    return "s3://data/styles/a.bin", PAYLOAD


@pytest.fixture(scope="module")
def anonymous_s3(tmp_path_factory):
    """`rclone serve s3` without keys (`S3Server` always sets some): anonymous access only."""
    root = tmp_path_factory.mktemp("anon-s3")
    (root / "pub").mkdir()
    (root / "pub" / "a.bin").write_bytes(PAYLOAD)
    port = free_port()
    command = [rclone_binary(), "serve", "s3", str(root), "--addr", f"127.0.0.1:{port}",
               "--config", "/dev/null"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("rclone serve s3 (anonymous) did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def silent_server():
    """A TCP endpoint on 127.0.0.1 that never answers, and a count of the connections made.

    The kernel completes connections into the backlog without an `accept`, so requests are
    sent and wait; `connections()` then takes every completed connection (a retry included).
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    accepted = []

    def connections() -> int:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except BlockingIOError:
                return len(accepted)

    yield f"http://127.0.0.1:{listener.getsockname()[1]}", connections
    listener.close()
    for connection in accepted:
        connection.close()


def top_level(s3_server, endpoint_url=None):
    """s3fs's top-level style: `endpoint_url`, `key` and `secret`."""
    return {
        "endpoint_url": endpoint_url or s3_server.endpoint_url,
        "key": s3_server.access_key,
        "secret": s3_server.secret_key,
    }


def read_failure(loader, url):
    """What reading `url` raised."""
    with pytest.raises(Exception) as info:
        loader(url)
    return info.value


def assert_one_short_line(error, url):
    message = str(error)
    assert "\n" not in message and len(message) < 300, message
    assert url in message, message
    assert "Debug source" not in message and "RetryError" not in message, message


# --------------------------------------------------------------------------- option styles


def test_client_kwargs_endpoint(s3_server, obj):
    url, payload = obj
    assert rk.ObstoreLoader(s3_server.storage_options)(url) == payload


def test_top_level_endpoint_url(s3_server, obj):
    url, payload = obj
    assert rk.ObstoreLoader(top_level(s3_server))(url) == payload


@pytest.mark.slow
@pytest.mark.parametrize("endpoint_variable", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"])
@pytest.mark.parametrize("region_variable", ["AWS_REGION", "AWS_DEFAULT_REGION", None])
def test_environment_only(s3_server, obj, monkeypatch, endpoint_variable, region_variable):
    url, payload = obj
    monkeypatch.setenv(endpoint_variable, s3_server.endpoint_url)  # http://: allowed
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    if region_variable:
        monkeypatch.setenv(region_variable, "eu-west-1")
    assert rk.ObstoreLoader()(url) == payload
    # The same environment works with s3fs (uncached: the variables are gone after the test).
    assert rk.FsspecLoader({"skip_instance_cache": True})(url) == payload


def test_service_specific_endpoint_variable_wins(s3_server, obj, monkeypatch):
    url, payload = obj
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint_url)
    assert rk.ObstoreLoader({"key": s3_server.access_key, "secret": s3_server.secret_key})(url)


def test_config_kwargs_are_understood(s3_server, obj):
    url, payload = obj
    config_kwargs = {
        "connect_timeout": 3,
        "read_timeout": 20,
        "retries": {"total_max_attempts": 2, "mode": "standard"},
        "max_pool_connections": 64,
        "response_checksum_validation": "when_required",
        "signature_version": "s3v4",
        "s3": {"addressing_style": "path"},
    }
    options = dict(top_level(s3_server), config_kwargs=config_kwargs, max_concurrency=1)
    assert rk.ObstoreLoader(options)(url) == payload
    settings = translate_options("s3", options, "data", environ={})
    assert settings.client_options["connect_timeout"].total_seconds() == 3
    assert settings.client_options["read_timeout"].total_seconds() == 20
    assert settings.retry_config["max_retries"] == 1
    assert settings.config["virtual_hosted_style_request"] is False


def test_explicit_options_beat_the_environment(s3_server, obj, monkeypatch):
    url, payload = obj
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "a-token-for-other-keys")
    monkeypatch.setenv("AWS_REGION", "ap-south-2")
    options = dict(top_level(s3_server), client_kwargs={"region_name": "us-east-1"})
    assert rk.ObstoreLoader(options)(url) == payload
    settings = translate_options("s3", options, "data")
    # As with botocore, explicit keys are used alone: no session token from the environment.
    assert settings.credentials == (s3_server.access_key, s3_server.secret_key, None)
    assert settings.config["region"] == "us-east-1"
    assert settings.config["endpoint"] == s3_server.endpoint_url


def test_anon_reads_a_public_bucket_without_signing(anonymous_s3, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unused-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unused-secret")
    assert rk.ObstoreLoader({"anon": True, "endpoint_url": anonymous_s3})("s3://pub/a.bin") == (
        PAYLOAD
    )


def test_anon_sends_no_signature(s3_server, obj):
    url, _ = obj
    options = {"anon": True, "endpoint_url": s3_server.endpoint_url}
    error = read_failure(rk.ObstoreLoader(options), url)
    # rclone refuses an unsigned request with 400 UnsupportedAlgorithm (AWS: 403 AccessDenied).
    assert isinstance(error, rk.ImageLoadError) and "HTTP 400" in str(error), error
    assert_one_short_line(error, url)
    assert not retry.is_transient(error)


def test_translation_without_a_server():
    """Styles whose effect is in the request settings, not something a local server tells apart."""
    http = translate_options("s3", {}, "bkt", environ={"AWS_ENDPOINT_URL": "http://minio:9000"})
    assert http.config == {"region": "us-east-1", "endpoint": "http://minio:9000"}
    assert http.client_options["allow_http"] is True
    assert http.retry_config["max_retries"] == 0  # remote_keras's RetryPolicy retries
    assert http.credentials is None  # obstore reads AWS_ACCESS_KEY_ID & co. itself
    virtual = translate_options(
        "s3",
        {
            "endpoint_url": "https://s3.example.com",
            "anon": True,
            "requester_pays": True,
            "client_kwargs": {"verify": False},
            "config_kwargs": {"s3": {"addressing_style": "virtual"}, "region_name": "eu-west-3"},
        },
        "bkt",
        environ={"AWS_REGION": "us-west-2"},
    )
    assert virtual.config == {
        "skip_signature": True,
        "request_payer": True,
        "region": "eu-west-3",
        "virtual_hosted_style_request": True,
        "endpoint": "https://bkt.s3.example.com",
    }
    assert virtual.client_options["allow_invalid_certificates"] is True
    assert "allow_http" not in virtual.client_options
    assert "secret" not in repr(translate_options("s3", {"key": "k", "secret": "secret"}))


@pytest.mark.parametrize(
    "options, named",
    [
        ({"profile": "dev"}, "`profile`"),
        ({"config_kwargs": {"s3": {"use_accelerate_endpoint": True}}}, "use_accelerate_endpoint"),
        ({"config_kwargs": {"signature_version": "s3"}}, "signature_version"),
        ({"s3_additional_kwargs": {"SSECustomerKey": "x"}}, "s3_additional_kwargs"),
        ({"key": "only-a-key"}, "both `key` and `secret`"),
        ({"endpoint_url": "http://a:1", "client_kwargs": {"endpoint_url": "http://b:2"}}, "two"),
    ],
)
def test_what_obstore_cannot_express_is_refused_by_name(options, named):
    with pytest.raises(ValueError, match=named):
        translate_options("s3", options, "bkt", environ={})
    with pytest.raises(rk.ImageLoadError, match="s3://bkt/a.png") as info:
        rk.ObstoreLoader(options)("s3://bkt/a.png")
    assert_one_short_line(info.value, "s3://bkt/a.png")
    assert named in str(info.value)


def test_unknown_option_is_one_line(s3_server):
    options = dict(s3_server.storage_options, no_such_option=1)
    with pytest.raises(rk.ImageLoadError, match="no_such_option") as info:
        rk.ObstoreLoader(options)("s3://data/a.png")
    assert_one_short_line(info.value, "s3://data/a.png")


# --------------------------------------------------------------------------- failures


def test_wrong_port_is_a_fast_one_line_connection_error(s3_server, obj):
    url, _ = obj
    port = free_port()
    error = read_failure(rk.ObstoreLoader(top_level(s3_server, f"http://127.0.0.1:{port}")), url)
    assert type(error) is ConnectionError, repr(error)  # the builtin, as from the fsspec loader
    assert_one_short_line(error, url)
    assert f"connection refused: 127.0.0.1:{port}" in str(error)
    assert retry.is_transient(error)
    assert isinstance(error.__cause__, ConnectionRefusedError)  # what `gave_up` reports


def test_wrong_secret_is_a_fast_one_line_permission_error(s3_server, s3_proxy, obj):
    url, _ = obj
    secret = "not-the-secret-0123456789"
    options = dict(top_level(s3_server, s3_proxy.endpoint_url), secret=secret)
    s3_proxy.reset()
    error = read_failure(rk.ObstoreLoader(options), url)
    assert s3_proxy.reset() == {"GET": 1}  # fast: refused once, not retried
    assert isinstance(error, PermissionError), error
    assert_one_short_line(error, url)
    message = str(error)
    assert secret not in message and s3_server.secret_key not in message
    assert message.count("credentials") == 1 and "SignatureDoesNotMatch" in message
    assert not retry.is_transient(error)
    assert error.__cause__ is None and error.__context__ is None


def test_missing_key_is_a_one_line_file_not_found_error(s3_server, obj):
    url = obj[0].replace("a.bin", "nope.bin")
    error = read_failure(rk.ObstoreLoader(s3_server.storage_options), url)
    assert isinstance(error, FileNotFoundError), error
    assert_one_short_line(error, url)
    assert "HTTP 404 NoSuchKey" in str(error)
    assert not retry.is_transient(error)


@pytest.mark.parametrize(
    "kind, family, words",
    [
        ("503", rk.ImageLoadError, "Server error for {url!r} (HTTP 503 SlowDown)"),
        ("500", rk.ImageLoadError, "Server error for {url!r} (HTTP 500 InternalError)"),
        ("429", rk.ImageLoadError, "Too many requests for {url!r} (HTTP 429 TooManyRequests)"),
        ("reset-before", ConnectionError, "Connection lost reading {url!r}"),
        ("reset-mid-body", ConnectionError, "Connection lost reading {url!r}"),
        ("truncate", ConnectionError, "Connection lost reading {url!r}"),
    ],
)
def test_server_faults_stay_transient_in_one_line(s3_options, s3_proxy, obj, kind, family, words):
    url, _ = obj
    loader = rk.ObstoreLoader(s3_options)
    s3_proxy.set_faults(FaultPlan(rate=1.0, seed=1, kinds=(kind,)))
    try:
        error = read_failure(loader, url)
        requests = s3_proxy.reset()
    finally:
        s3_proxy.set_faults(None)
    assert isinstance(error, family), repr(error)
    assert words.format(url=url) in str(error), error
    assert_one_short_line(error, url)
    assert retry.is_transient(error), error
    assert requests["GET"] == 1, requests  # obstore does not retry by itself
    assert loader(url) == obj[1]  # and the store still works afterwards


@pytest.mark.slow
def test_silent_server_is_a_timeout_error(silent_server, s3_server, obj):
    url, _ = obj
    endpoint, connections = silent_server
    options = dict(top_level(s3_server, endpoint), config_kwargs={"read_timeout": 0.5})
    error = read_failure(rk.ObstoreLoader(options), url)
    assert isinstance(error, TimeoutError), repr(error)
    assert connections() == 1  # one request, timed out, not retried by obstore
    assert_one_short_line(error, url)
    assert retry.is_transient(error)


class GenericError(Exception):
    """Stands in for obstore's class of that name, for failures no local server can cause."""


@pytest.mark.parametrize(
    "resolver, transient",
    [("Name or service not known", False), ("Temporary failure in name resolution", True)],
)
def test_dns_failures_keep_the_resolvers_words(resolver, transient):
    # A DNS failure needs a resolver, which tests must not reach: obstore's text, as it reads.
    text = (
        "Generic S3 error: Error performing GET http://no-such-host.example:9000/b/k in 2ms"
        " - HTTP error: error sending request\n\nDebug source:\nGeneric {\n    source: ConnectError"
        f'("dns error", Custom {{ kind: Uncategorized, error: "failed to lookup address'
        f' information: {resolver}" }})\n}}'
    )
    error = one_line_error("s3://b/k", GenericError(text))
    assert isinstance(error, ConnectionError)
    said = (
        f"DNS lookup of no-such-host.example failed: {resolver}"
        if transient
        else f"host name 'no-such-host.example' did not resolve: {resolver}"
    )
    assert str(error) == f"Cannot reach the server for 's3://b/k' ({said})"
    assert retry.is_transient(error) is transient


def test_errors_pickle(s3_server, obj):
    url, _ = obj
    for options in (top_level(s3_server, f"http://127.0.0.1:{free_port()}"),
                    dict(s3_server.storage_options, secret="wrong")):  # fmt: skip
        error = read_failure(rk.ObstoreLoader(options), url)
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error) and copy.url == url


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_flow_from_dataframe_with_top_level_options_equals_fsspec(s3_server, s3_images):
    url, df = s3_images
    options = top_level(s3_server)
    kwargs = dict(target_size=(9, 9), batch_size=8, shuffle=False, prefetch_batches=0)
    with (
        rk.ImageDataGenerator().flow_from_dataframe(
            df, directory=url, loader="obstore", storage_options=options, **kwargs
        ) as fast,
        rk.ImageDataGenerator().flow_from_dataframe(
            df, directory=url, loader="fsspec", storage_options=options, **kwargs
        ) as stock,
    ):
        assert isinstance(fast.loader, rk.ObstoreLoader)
        assert len(fast) == len(stock) > 1
        for i in range(len(stock)):
            assert_same_batch(stock[i], fast[i])


def test_flow_from_dataframe_wrong_port_fails_fast_in_one_line(s3_server, s3_images):
    url, df = s3_images
    options = top_level(s3_server, f"http://127.0.0.1:{free_port()}")
    policy = rk.RetryPolicy(attempts=3, backoff_s=0.01)
    with (
        rk.ImageDataGenerator().flow_from_dataframe(
            df[:2], url, loader="obstore", storage_options=options, retries=policy,
            validate_filenames=False, shuffle=False, prefetch_batches=0,
        ) as it,
        pytest.raises(rk.ImageLoadError) as info,
    ):  # fmt: skip
        it[0]
    assert_one_short_line(info.value, f"{url}/{df['filename'][0]}")
    assert "after 3 attempt(s)" in str(info.value)
    assert "last error: ConnectionError: Cannot reach the server for" in str(info.value)
    assert "(connection refused: 127.0.0.1:" in str(info.value)
