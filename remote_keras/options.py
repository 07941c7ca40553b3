"""Checks of remote_keras's own arguments, shared by `ImageDataGenerator` and the iterators.

Bad values are rejected where they are given (`ImageDataGenerator(...)` or
`flow_from_*`), with Keras-style messages that name the argument and the
value received, instead of failing later inside a batch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from remote_keras.loaders import LOADERS
from remote_keras.retry import as_policy

ON_ERROR = ("raise", "skip")
# Integer arguments and the least value each accepts.
_AT_LEAST = {
    "workers": 1,
    "max_queue_size": 1,
    "prefetch_batches": 0,
    "max_in_flight": 1,
    "decode_workers": 1,
    "cache_max_bytes": 1,
}


def check(**options: Any) -> None:
    """Raises for any of `options` (remote_keras's keyword arguments) that is invalid.

    `None` is accepted for every option: it means "the default".

    Raises:
        TypeError: a value of the wrong type (`loader`, `storage_options`,
            `retries`, `cache_dir`).
        ValueError: a value out of range (`on_error`, the integer options).
    """
    for name, value in options.items():
        if value is None:
            continue
        if name == "loader":
            if not callable(value) and not (isinstance(value, str) and value in LOADERS):
                raise TypeError(
                    "`loader` must be a callable taking a path and returning bytes, a file-like "
                    f"object, a PIL image or a numpy array, or one of {sorted(LOADERS)}. "
                    f"Received: loader={value!r}"
                )
        elif name == "storage_options":
            if not isinstance(value, Mapping):
                raise TypeError(
                    "`storage_options` must be a dict of fsspec options (credentials, endpoint, "
                    f"...). Received: storage_options of type {type(value).__name__}"
                )
        elif name == "on_error":
            if value not in ON_ERROR:
                raise ValueError(f'`on_error` must be "raise" or "skip". Received: {value!r}')
        elif name == "retries":
            as_policy(value)
        elif name == "cache_dir":
            if not isinstance(value, (str, os.PathLike)):
                raise TypeError(
                    f"`cache_dir` must be a local folder path or None. Received: {value!r}"
                )
        elif name in _AT_LEAST:
            least = _AT_LEAST[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(
                    f"`{name}` must be an integer >= {least}. Received: {name}={value!r}"
                )
