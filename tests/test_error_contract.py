"""Errors as documented: the same builtin (or public) types from every loader, naming the URL."""

from __future__ import annotations

import pickle
import socket

import pytest

import remote_keras as rk
from remote_keras.testing.proxy import FaultPlan

LOADERS = ("fsspec", "obstore")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_endpoint(options, endpoint):
    return dict(options, client_kwargs=dict(options["client_kwargs"], endpoint_url=endpoint))


def public(error: BaseException) -> None:
    """Every type in the chain is a builtin or a public remote_keras class."""
    seen = error
    while seen is not None:
        name = type(seen).__name__
        assert not name.startswith("_"), repr(seen)
        assert "_Obstore" not in str(seen), str(seen)
        seen = seen.__cause__


@pytest.mark.slow
@pytest.mark.parametrize("loader", LOADERS)
def test_a_wrong_port_at_construction_is_a_connection_error_naming_it(
    s3_images, s3_options, loader
):
    url, _ = s3_images
    endpoint = f"http://127.0.0.1:{free_port()}"
    gen = rk.ImageDataGenerator(storage_options=with_endpoint(s3_options, endpoint), loader=loader)
    with pytest.raises(ConnectionError) as info:
        gen.flow_from_directory(url)
    assert type(info.value) is ConnectionError, repr(info.value)
    message = str(info.value)
    assert message.startswith(f"Cannot reach the server for {url!r} at {endpoint} ("), message
    assert "did not resolve" not in message
    public(info.value)
    assert str(pickle.loads(pickle.dumps(info.value))) == message


@pytest.mark.slow
@pytest.mark.parametrize("loader", LOADERS)
def test_an_unknown_host_at_construction_says_it_did_not_resolve(s3_images, s3_options, loader):
    url, _ = s3_images
    endpoint = "http://no-such-host.invalid:9000"
    gen = rk.ImageDataGenerator(storage_options=with_endpoint(s3_options, endpoint), loader=loader)
    with pytest.raises(ConnectionError) as info:
        gen.flow_from_directory(url)
    message = str(info.value)
    assert f"at {endpoint}: host name 'no-such-host.invalid' did not resolve" in message, message
    public(info.value)


def read_error(url, df, options, loader, attempts=1):
    gen = rk.ImageDataGenerator(storage_options=options, loader=loader, retries=attempts)
    with gen.flow_from_dataframe(
        df, url, target_size=(8, 8), batch_size=len(df), shuffle=False, validate_filenames=False
    ) as it:
        with pytest.raises(Exception) as info:
            it[0]
    return info.value


def failures(s3_images, s3_options, s3_proxy, loader):
    """What each failure raises from `loader`: the error and its cause, by scenario."""
    url, df = s3_images
    missing = df[:1].assign(filename="cat/no-such-file.png")
    found = {
        "missing": read_error(url, missing, s3_options, loader),
        "bad secret": read_error(url, df[:1], dict(s3_options, secret="wrong-0123"), loader),
        "refused": read_error(
            url, df[:1], with_endpoint(s3_options, f"http://127.0.0.1:{free_port()}"), loader
        ),
    }
    s3_proxy.set_faults(FaultPlan(rate=1.0, kinds=("reset-before",)))
    try:
        found["reset"] = read_error(url, df[:1], s3_options, loader, attempts=2)
    finally:
        s3_proxy.set_faults(None)
    return found


@pytest.mark.slow
def test_each_failure_has_the_same_types_from_every_loader(s3_images, s3_options, s3_proxy):
    by_loader = {loader: failures(s3_images, s3_options, s3_proxy, loader) for loader in LOADERS}
    for scenario in by_loader["fsspec"]:
        errors = [by_loader[loader][scenario] for loader in LOADERS]
        for error in errors:
            public(error)
        assert len({type(e) for e in errors}) == 1, (scenario, errors)
        if scenario in ("refused", "reset"):  # the cause `gave_up` reports
            assert len({type(e.__cause__) for e in errors}) == 1, (scenario, errors)
    got = by_loader["obstore"]
    assert type(got["missing"]) is FileNotFoundError
    assert type(got["bad secret"]) is PermissionError
    assert type(got["refused"]) is rk.ImageLoadError
    assert type(got["refused"].__cause__) is ConnectionError
