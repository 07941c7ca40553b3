"""Checked reads are a registry: one reader per backend, checked before use, users' own first.

A client release that renames an internal a reader needs must leave reads working and
counted `unverified`, with one warning naming the client and its version, never a crash.
"""

from __future__ import annotations

import asyncio
import hashlib
import warnings

import pytest

import remote_keras as rk
from remote_keras.storage import integrity
from remote_keras.storage.loaders import CheckedReader, Fetched, checked_reads


class _StoreWithoutInternals:
    """An async filesystem of the `s3` protocol without s3fs's internals."""

    protocol = ("s3", "s3a")

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def _cat_file(self, path: str) -> bytes:
        return self.data


def test_a_filesystem_without_the_internals_is_read_unverified_with_one_warning():
    fs = _StoreWithoutInternals(b"body")
    with pytest.warns(UserWarning, match=r"s3fs .*_call_s3.*not verified") as caught:
        first = asyncio.run(checked_reads.read_async(fs, "bucket/key"))
    assert first == Fetched(b"body", None)
    assert len([w for w in caught if "not verified" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second read warns no more
        assert asyncio.run(checked_reads.read_async(fs, "bucket/key")) == first


def test_a_reader_of_ones_own_is_asked_first(monkeypatch):
    monkeypatch.setattr(checked_reads, "_READERS", list(checked_reads._READERS))

    class Store:
        protocol = "mystore"

        async def get(self, path):
            return b"data of " + path.encode()

    async def read(fs, path):
        data = await fs.get(path)
        md5 = integrity.Checksum("md5", hashlib.md5(data).hexdigest(), "my header")
        return Fetched(data, md5)

    rk_reader = CheckedReader(("mystore",), "mystore-client", ("get",), read)
    from remote_keras.storage.loaders import register_checked_reader

    register_checked_reader(rk_reader)
    got = asyncio.run(checked_reads.read_async(Store(), "a/b"))
    assert got.data == b"data of a/b" and got.checksum.source == "my header"
    assert checked_reads.reader_for(Store()) is rk_reader


def test_a_renamed_s3fs_internal_leaves_reads_working_and_unverified(
    monkeypatch, s3_images, s3_options
):
    url, _ = s3_images
    renamed = CheckedReader(
        ("s3", "s3a"), "s3fs", ("_call_s3_renamed",), checked_reads.checked_s3.read
    )
    monkeypatch.setattr(checked_reads, "_READERS", [renamed])
    monkeypatch.setattr(checked_reads, "_USABLE", {})
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with pytest.warns(UserWarning, match=r"_call_s3_renamed"):
        with gen.flow_from_directory(url, loader="fsspec", target_size=(4, 4)) as it:
            it[0]
            stats = it.stats
    assert stats.verified == 0 and stats.unverified >= len(it[0][0]) > 0
