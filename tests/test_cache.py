"""The disk cache: entries verified and healed, only its own files touched, unwritable folders."""

from __future__ import annotations

import errno
import hashlib
import os
import time
import warnings

import numpy as np
import pytest

import remote_keras as rk
from remote_keras.storage.cache import DiskCache
from tests.helpers import assert_same_batch

DAMAGE = ("flip", "truncate", "empty", "header")
KW = dict(target_size=(12, 12), shuffle=False, validate_filenames=False)
MONTH_AGO = time.time() - 30 * 86400


def _entry_file(cache_dir, url: str) -> str:
    """The file holding `url`'s entry somewhere under `cache_dir`."""
    name = hashlib.sha256(url.encode()).hexdigest()
    for folder, _, files in os.walk(cache_dir):
        if name in files:
            return os.path.join(folder, name)
    raise AssertionError(f"no cache entry for {url}")


def _damage(path: str, how: str) -> None:
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if how == "flip":
        data[len(data) * 2 // 3] ^= 0x10
    elif how == "truncate":
        del data[len(data) // 2 :]
    elif how == "empty":
        data.clear()
    else:  # a header this version does not know
        data[:4] = b"XXXX"
    with open(path, "wb") as f:
        f.write(data)


def _cache_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "disk cache" in str(w.message)]


def _old(*paths) -> None:
    for path in paths:
        os.utime(path, (MONTH_AGO, MONTH_AGO))


def _temporaries(folder) -> list[str]:
    return [name for _, _, files in os.walk(folder) for name in files if ".tmp-" in name]


# ---------------------------------------------------------------- integrity (issue 19.3)


@pytest.mark.parametrize("how", DAMAGE)
def test_damaged_entry_is_dropped_and_stored_again(tmp_path, how):
    cache = DiskCache(tmp_path, max_bytes=10**6)
    payload = bytes(range(256)) * 40
    cache.put("s3://b/k", payload)
    _damage(cache._path("s3://b/k"), how)
    assert cache.lookup("s3://b/k") == (None, True)
    assert cache.healed == 1 and cache.hits == 0
    assert not os.path.exists(cache._path("s3://b/k"))
    assert cache.lookup("s3://b/k") == (None, False)  # gone: a plain miss
    cache.put("s3://b/k", payload)
    assert cache.lookup("s3://b/k") == (payload, False)


def test_entries_carry_a_header_and_sizes_count_it(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=10**6)
    cache.put("s3://b/k", memoryview(b"abc"))
    with open(cache._path("s3://b/k"), "rb") as f:
        stored = f.read()
    assert stored.startswith(b"RKDC") and stored.endswith(b"abc") and len(stored) == 23
    assert DiskCache(tmp_path, max_bytes=10**6)._size == 23


@pytest.mark.parametrize("how", DAMAGE[:3])
def test_damaged_entry_is_healed_through_an_iterator(
    s3_images, s3_options, s3_proxy, tmp_path, how
):
    url, df = s3_images
    jpeg = int(np.flatnonzero(df["filename"].str.endswith(".jpg"))[0])
    gen = rk.ImageDataGenerator(storage_options=s3_options, cache_dir=str(tmp_path))
    with gen.flow_from_dataframe(df, url, batch_size=len(df), **KW) as it:
        clean = it[0]
        it.on_epoch_end()
        _damage(_entry_file(tmp_path, it._filepaths[jpeg]), how)
        s3_proxy.reset()
        assert_same_batch(clean, it[0])
        assert s3_proxy.reset() == {"GET": 1}  # read again from the store
        it.on_epoch_end()
        assert_same_batch(clean, it[0])
        assert s3_proxy.reset() == {}  # and cached again
        stats = it.stats
    assert stats.cache_healed == 1 and stats.skipped == 0
    assert stats.cache_hits == 2 * len(df) - 1


# ------------------------------------------------------- only its own files (issue 25.2)


def _foreign_tree(root) -> list[str]:
    """A user's folder: old notes, an old nested source tree and look-alike names."""
    paths = {
        "my_notes/important_0.txt": b"notes",
        "my_notes/important_1.txt": b"more notes",
        "src/pkg/main.py": b"print(1)\n",
        "README.txt": b"hi",
        f"ab/ab{'0' * 62}": b"an old-layout look-alike",
        f"remote_keras_cache/ab/{'c' * 64}.txt": b"not an entry name",
        f"remote_keras_cache/ab/{'d' * 64}.tmp-": b"not a temporary name",
        f"listings/{'e' * 64}.keys": b"not a listing name",
    }
    for name, data in paths.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        _old(path)
    _old(*(os.path.join(root, d) for d in ("my_notes", "src/pkg", "src", "ab")))
    outside = os.path.join(root, "src", "pkg", "main.py")
    os.makedirs(os.path.join(root, "remote_keras_cache", "cd"), exist_ok=True)
    os.symlink(outside, os.path.join(root, "remote_keras_cache", "cd", "cd" + "f" * 62))
    os.symlink(os.path.join(root, "src"), os.path.join(root, "remote_keras_cache", "ef"))
    return sorted(paths) + ["remote_keras_cache/cd/cd" + "f" * 62, "remote_keras_cache/ef"]


def _present(root, names) -> list[str]:
    return [name for name in names if os.path.lexists(os.path.join(root, name))]


def test_eviction_touches_only_its_own_files(tmp_path):
    foreign = _foreign_tree(tmp_path)
    cache = DiskCache(tmp_path, max_bytes=5_000)
    assert cache._size == 0  # nothing foreign is counted
    for i in range(40):
        cache.put(f"s3://b/{i}", bytes(1000))
    cache.evict()
    assert _present(tmp_path, foreign) == foreign
    assert os.path.isfile(os.path.join(tmp_path, "src", "pkg", "main.py"))
    assert 0 < cache._size <= 5_000


def test_foreign_files_survive_training_with_eviction(s3_images, s3_options, tmp_path):
    url, df = s3_images
    foreign = _foreign_tree(tmp_path)
    gen = rk.ImageDataGenerator(
        storage_options=s3_options, cache_dir=str(tmp_path), cache_max_bytes=3_000
    )
    with gen.flow_from_dataframe(df, url, batch_size=5, **KW) as it:
        for _ in range(2):
            for i in range(len(it)):
                it[i]
            it.on_epoch_end()
    assert _present(tmp_path, foreign) == foreign


def test_listing_cache_files_share_the_limit(tmp_path):
    listings = tmp_path / "listings"
    listings.mkdir()
    (listings / f"{'a' * 64}.keys.gz").write_bytes(bytes(3000))
    _old(listings / f"{'a' * 64}.keys.gz")
    cache = DiskCache(tmp_path, max_bytes=5_000)
    assert cache._size == 3000
    cache.put("s3://b/k", bytes(2500))
    assert not (listings / f"{'a' * 64}.keys.gz").exists()  # the oldest went first
    assert cache.get("s3://b/k") == bytes(2500)


def test_stale_temporary_files_are_cleaned_and_others_kept(tmp_path):
    DiskCache(tmp_path, max_bytes=10**6)
    folder = tmp_path / "remote_keras_cache" / "ab"
    folder.mkdir()
    (tmp_path / "listings").mkdir()
    stale = [
        folder / f"ab{'1' * 62}.tmp-123-9f3a",
        tmp_path / "listings" / f"{'2' * 64}.keys.gz.tmp-7-8",
    ]
    fresh = folder / f"ab{'3' * 62}.tmp-456-77"  # perhaps being written now
    foreign = [folder / "notes.tmp-1-2", tmp_path / f"ab{'4' * 62}.tmp-1-2"]
    for path in [*stale, fresh, *foreign]:
        path.write_bytes(b"partial")
    _old(*stale, *foreign)
    DiskCache(tmp_path, max_bytes=10**6)  # opening cleans
    assert [p.exists() for p in stale] == [False, False]
    assert fresh.exists() and all(p.exists() for p in foreign)
    _old(fresh)
    DiskCache(tmp_path, max_bytes=10**6).evict()  # so does eviction
    assert not fresh.exists() and all(p.exists() for p in foreign)


# ----------------------------------------------- unwritable or full folders (issue 19.4)


def _enospc_for(folder, monkeypatch) -> None:
    """`os.replace` into `folder` fails as on a full disk; elsewhere it works."""
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if os.fspath(dst).startswith(os.fspath(folder)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


def test_full_disk_warns_once_and_removes_its_temporary_files(tmp_path, monkeypatch):
    cache = DiskCache(tmp_path, max_bytes=10**6)
    cache.put("s3://b/kept", b"written before the disk filled")
    _enospc_for(tmp_path, monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [cache.put(f"s3://b/{i}", b"x" * 100) for i in range(5)] == [False] * 5
    (message,) = _cache_warnings(caught)
    assert cache.root in message and "ENOSPC" in message
    assert not _temporaries(tmp_path)
    assert cache.get("s3://b/kept") == b"written before the disk filled"  # still read


def test_cache_folder_under_a_file_warns_once_and_only_misses(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = DiskCache(blocker / "cache", max_bytes=10**6)
        assert cache.put("s3://b/k", b"data") is False
        assert cache.get("s3://b/k") is None
        DiskCache(blocker / "cache", max_bytes=10**6)  # another iterator on it: no second warning
    (message,) = _cache_warnings(caught)
    assert str(blocker) in message and "ENOTDIR" in message


def _train(gen, url, df, epochs=2) -> list:
    batches = []
    with gen.flow_from_dataframe(df, url, batch_size=5, **KW) as it:
        for _ in range(epochs):
            batches += [it[i] for i in range(len(it))]
            it.on_epoch_end()
        assert it.stats.skipped == 0
    return batches


@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize("fault", ["full", "under_a_file"])
def test_unwritable_cache_degrades_to_the_store(
    s3_images, s3_options, s3_proxy, tmp_path, monkeypatch, on_error, fault
):
    url, df = s3_images
    expected = _train(rk.ImageDataGenerator(storage_options=s3_options), url, df)
    if fault == "full":
        cache_dir = tmp_path / "cache"
        _enospc_for(cache_dir, monkeypatch)
    else:
        (tmp_path / "a_file").write_text("not a folder")
        cache_dir = tmp_path / "a_file" / "cache"
    gen = rk.ImageDataGenerator(
        storage_options=s3_options, cache_dir=str(cache_dir), on_error=on_error
    )
    s3_proxy.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = _train(gen, url, df)
    for a, b in zip(expected, batches, strict=True):
        assert_same_batch(a, b)
    assert s3_proxy.reset() == {"GET": 2 * len(df)}  # every epoch from the store
    (message,) = _cache_warnings(caught)
    assert str(cache_dir) in message
    assert not _temporaries(tmp_path)


@pytest.mark.slow
def test_image_dataset_from_directory_second_pass_reads_the_disk_cache(
    s3_images, s3_options, s3_proxy, tmp_path
):
    url, df = s3_images
    kwargs = dict(image_size=(5, 7), batch_size=6, seed=4)
    dataset = rk.image_dataset_from_directory(
        url, storage_options=s3_options, cache_dir=str(tmp_path), **kwargs
    )
    s3_proxy.reset()
    first = list(dataset.as_numpy_iterator())
    assert s3_proxy.reset() == {"GET": len(df)}
    second = list(dataset.as_numpy_iterator())
    assert s3_proxy.reset() == {}  # every image from the disk cache
    uncached = rk.image_dataset_from_directory(url, storage_options=s3_options, **kwargs)
    for cached in (first, second):  # the same batches, epoch for epoch, as without a cache
        fresh = list(uncached.as_numpy_iterator())
        assert len(cached) == len(fresh)
        for a, b in zip(cached, fresh):
            assert_same_batch(a, b)
