"""Timeouts and connection limits come from `storage.connections`' option objects only."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from remote_keras.storage import connections, lakefs, locations
from remote_keras.storage.connections import API_TIMEOUTS, LIMITS, OBSTORE_TIMEOUTS
from remote_keras.storage.loaders.obstore_config import translate_options


def test_s3fs_gets_the_pool_and_timeouts_of_the_option_objects():
    config = locations.PROTOCOL_DEFAULTS["s3"]["config_kwargs"]
    assert config["max_pool_connections"] == LIMITS.per_host
    assert (config["connect_timeout"], config["read_timeout"]) == API_TIMEOUTS.pair()


def test_lakefs_requests_use_the_api_timeouts():
    assert lakefs.REQUEST_TIMEOUT_S == API_TIMEOUTS.pair()


@pytest.mark.parametrize("timeout_s", [None, 2.0, 30.0])
def test_obstore_requests_are_bounded_by_the_read_timeout_and_its_own_connect_limit(timeout_s):
    client = translate_options("s3", {"anon": True}, timeout_s=timeout_s).client_options
    whole = OBSTORE_TIMEOUTS.read_s if timeout_s is None else timeout_s
    assert client["timeout"] == timedelta(seconds=whole)
    assert client["connect_timeout"] == timedelta(seconds=min(whole, OBSTORE_TIMEOUTS.connect_s))


def test_the_option_objects_are_values():
    with pytest.raises(dataclasses.FrozenInstanceError):
        LIMITS.per_host = 1  # type: ignore[misc]
    assert connections.Timeouts(1, 2).pair() == (1, 2)
