"""Listings: parallel and keys only (`parallel_listing`), cached (`listing_cache`).

The cache is shared by subsets and kept on disk.
"""

from __future__ import annotations

import gzip
import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import lakefs
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lakefs.client import Client

import remote_keras as rk
from remote_keras.pipeline.options import LoaderOptions
from remote_keras.storage.listing import (
    listing_cache,
    listing_pages,
    parallel_listing,
    s3_listing_pages,
)
from remote_keras.testing import LakeFSServer
from tests.helpers import noise_png

# --------------------------------------------------------------------------- the engine


class FakeLister:
    """S3's listing semantics over a sorted list of keys, `size` items a page."""

    scope = ("fake",)

    def __init__(self, keys, size: int) -> None:
        self.keys = sorted(set(keys))
        self.size = size
        self.requests = 0

    def page(self, prefix, delimiter, after, token, root):
        self.requests += 1
        start = token or after
        items: list[tuple[str, bool]] = []  # (key or common prefix, is a common prefix)
        for key in self.keys:
            if not key.startswith(prefix) or (start and key <= start):
                continue
            rest = key[len(prefix) :]
            rolled_up = bool(delimiter) and delimiter in rest
            if rolled_up:
                key = prefix + rest[: rest.index(delimiter) + 1]
                if (start and key <= start) or (items and items[-1][0] == key):
                    continue
            items.append((key, rolled_up))
            if len(items) == self.size + 1:
                break
        more = len(items) > self.size
        items = items[: self.size]
        # An object named like its prefix ("a/" under "a/") is a key, not a common prefix.
        keys = [k[len(root) :] for k, rolled_up in items if not rolled_up]
        prefixes = [k for k, rolled_up in items if rolled_up]
        last = items[-1][0] if items else ""
        return listing_pages.Page(keys, prefixes, last, last if more else None)


key_text = st.text(alphabet="ab0z/._ ~", min_size=1, max_size=9)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(key_text, max_size=60), size=st.integers(1, 7), root=st.sampled_from(["", "a/"])
)
@pytest.mark.slow
def test_list_tree_equals_one_serial_listing(keys, size, root):
    lister = FakeLister(keys, size)
    expected = [k[len(root) :] for k in lister.keys if k.startswith(root)]
    assert parallel_listing.list_tree(lister, root, concurrency=4) == expected


@settings(max_examples=40, deadline=None)
@given(keys=st.lists(key_text, max_size=60), size=st.integers(1, 7))
@example(keys=["a/"], size=1)  # a folder marker object: listed as "", dropped by extension later
def test_list_folders_lists_each_folders_own_objects(keys, size):
    lister = FakeLister(keys, size)
    folders = ["", "a/", "b/", "a/b/", "zz/"]
    listed = parallel_listing.list_folders(lister, folders, concurrency=3)
    for folder in folders:
        direct = [k[len(folder) :] for k in lister.keys if k.startswith(folder)]
        assert listed[folder] == [name for name in direct if "/" not in name]


def test_one_huge_folder_is_split_into_ranges_listed_together():
    keys = [f"img_{i:06d}.jpg" for i in range(30_000)]
    for listing in (
        lambda lister: parallel_listing.list_tree(lister, "", concurrency=8),
        lambda lister: parallel_listing.list_folders(lister, [""], concurrency=8)[""],
    ):
        lister = FakeLister(keys, 1000)
        assert listing(lister) == keys
        assert lister.requests <= 1.5 * 30 + 2  # the splits cost a few requests, not many
    ranges = parallel_listing._Ranges(
        FakeLister(keys, 1000), "", "", parallel_listing._Counter(None), 8
    )
    assert len(ranges.run([parallel_listing._Range("", "", None)])) >= parallel_listing.MIN_PARALLEL


@pytest.mark.parametrize("root", ["", "train/"])
def test_many_small_folders_cost_about_a_request_per_page_not_one_per_folder(root):
    # 1,000 class folders of 40 objects (a folder marker each), a loose object among them.
    keys = [f"{root}c{k:04d}/{j:03d}.jpg" for k in range(1000) for j in range(40)]
    keys += [f"{root}c{k:04d}/" for k in range(1000)] + [f"{root}c0500", f"{root}zz.jpg"]
    lister = FakeLister(keys, 1000)
    assert parallel_listing.list_tree(lister, root) == [k[len(root) :] for k in sorted(keys)]
    pages = len(keys) / 1000
    assert lister.requests <= pages + parallel_listing.CONCURRENCY + 2  # one per folder: 1,002
    assert lister.requests < 100


@settings(max_examples=200, deadline=None)
@given(low=key_text, high=st.one_of(st.none(), key_text), anchor=key_text)
def test_split_points_lie_strictly_between(low, high, anchor):
    point = parallel_listing.split_point(low, high, "", anchor)
    if point is not None:
        assert low < point and (high is None or point < high)


def test_small_listing_is_one_request():
    lister = FakeLister([f"c/{i}" for i in range(5)], 1000)
    assert parallel_listing.list_tree(lister, "") == [f"c/{i}" for i in range(5)]
    assert lister.requests == 1


def test_keys_come_out_of_the_xml_decoded():
    assert s3_listing_pages._unescape("a&amp;b&lt;&#233;&#x41;&quot;") == 'a&b<éA"'
    decode = s3_listing_pages._decoder(True, 2)
    assert decode(b"d/x+y%2B%25.png") == "x y+%.png"


# --------------------------------------------------------------------------- the caches


def test_disk_listings_round_trip_atomically(tmp_path):
    disk = listing_cache.DiskListings(tmp_path / "listings")
    keys = [f"c{i % 3}/{i}.jpg" for i in range(5000)] + ["ünï ©/x.png"]
    assert disk.store("k1", keys)
    assert disk.load("k1") == keys
    assert os.listdir(tmp_path / "listings") == ["k1.keys.gz"]  # no temporary file left
    header, _, body = (
        gzip.decompress((tmp_path / "listings" / "k1.keys.gz").read_bytes())
        .decode()
        .partition("\n")
    )
    assert json.loads(header)["count"] == len(keys) and body.split("\n") == keys
    assert not disk.store("k2", ["a\nb"])  # a newline in a key: not written
    assert disk.load("k2") is None
    os.utime(disk.path("k1"), (time.time() - 100, time.time() - 100))
    assert disk.load("k1", max_age_s=50) is None and disk.load("k1", max_age_s=500) == keys
    (tmp_path / "listings" / "k1.keys.gz").write_bytes(b"broken")
    assert disk.load("k1") is None


@pytest.mark.parametrize("block", [1, 5, 1 << 20])
def test_disk_listings_are_read_back_exactly_in_blocks(tmp_path, monkeypatch, block):
    # Read in blocks cut at newlines (never the whole listing at once): any block size gives
    # back the same keys, empty ones, carriage returns and multi-byte characters included.
    monkeypatch.setattr(listing_cache, "BLOCK", block)
    disk = listing_cache.DiskListings(tmp_path)
    for keys in (["a\r", "", "b"] + [f"c/{i}.jpg" for i in range(300)], ["x", ""], ["", "y"],
                 ["\udcff/ü", "é/ñ", "中/文"], ["one"]):  # fmt: skip
        assert disk.store("k", keys)
        assert disk.load("k") == keys


def test_cached_listing_writes_only_what_may_be_reused(tmp_path):
    big, made = [str(i) for i in range(listing_cache.DISK_MIN_KEYS + 1)], []

    def make(keys):
        return lambda: made.append(1) or list(keys)

    directory = str(tmp_path)
    assert listing_cache.cached_listing(make(big), "a", directory, None, True) == (big, False)
    assert listing_cache.cached_listing(make(big), "a", directory, None, True) == (big, True)
    small = big[:10]  # one page: never written
    assert listing_cache.cached_listing(make(small), "b", directory, None, True)[1] is False
    assert listing_cache.cached_listing(make(small), "b", directory, None, True)[1] is False
    # Mutable stores: only with a lifetime.
    assert listing_cache.cached_listing(make(big), "c", directory, None, False)[1] is False
    assert listing_cache.cached_listing(make(big), "c", directory, None, False)[1] is False
    assert listing_cache.cached_listing(make(big), "d", directory, 60, False)[1] is False
    assert listing_cache.cached_listing(make(big), "d", directory, 60, False)[1] is True
    assert listing_cache.cached_listing(make(big), "e", None, None, True)[1] is False
    assert len(made) == 7  # the two read from disk were not listed


class Generator:
    """Stands for an `ImageDataGenerator` (anything referenced weakly)."""


def test_subsets_share_a_listing_once_each():
    generator = Generator()
    listing_cache.share(generator, "k", "training", ["x"])
    assert listing_cache.shared(generator, "k", "training") is None  # the same subset: anew
    assert listing_cache.shared(generator, "other", "validation") is None
    assert listing_cache.shared(generator, "k", "validation") == ["x"]
    assert listing_cache.shared(generator, "k", "validation") is None  # used by both: dropped
    listing_cache.share(generator, "k", None, ["y"])  # no subset: never shared
    assert listing_cache.shared(generator, "k", "training") is None
    assert listing_cache.shared(None, "k", "training") is None
    listing_cache.share(object(), "k", "training", ["z"])  # not weakly referenced: no sharing


def test_a_shared_listing_expires(monkeypatch):
    generator = Generator()
    listing_cache.share(generator, "k", "training", ["x"])
    later = time.monotonic() + listing_cache.SHARE_S + 1
    monkeypatch.setattr(listing_cache.time, "monotonic", lambda: later)
    assert listing_cache.shared(generator, "k", "validation") is None


def test_cache_folder_and_store_identity(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert listing_cache.folder(LoaderOptions()) == str(
        tmp_path / "xdg" / "remote_keras" / "listings"
    )
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert listing_cache.folder(LoaderOptions()) == str(
        tmp_path / "home" / ".cache" / "remote_keras" / "listings"
    )
    assert listing_cache.folder(LoaderOptions(cache_dir=tmp_path / "c")) == str(
        tmp_path / "c" / "listings"
    )
    assert listing_cache.folder(LoaderOptions(listing_cache_dir=str(tmp_path / "l"))) == str(
        tmp_path / "l"
    )
    assert listing_cache.folder(LoaderOptions(listing_cache_dir=False)) is None
    where = listing_cache.where(
        {"key": "K", "secret": "S", "client_kwargs": {"endpoint_url": "http://e"}}
    )
    assert where == {"client_kwargs.endpoint_url": "http://e"}


# --------------------------------------------------------------------------- S3


ODD = ["sp ace", "plus+", "amp&", "pct%20", "ünï©ødé"]


@pytest.fixture(scope="module")
def big_s3_tree(s3_server):
    """2,600 objects in 5 classes (odd names included) and a nested folder, uploaded once."""
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.storage_options, skip_instance_cache=True)
    prefix = f"data/big-{uuid.uuid4().hex[:6]}"
    png = noise_png(0, 2)
    names = [f"{c}/{i:04d}-{ODD[i % len(ODD)]}.png" for c in "abcde" for i in range(500)]
    names += [f"c/nested/{i}.png" for i in range(100)]
    fs.pipe({f"{prefix}/{name}": png for name in names})
    return f"s3://{prefix}", names


def directory_order(names):
    """What Keras's sorted `os.walk` gives for these names."""
    return sorted(names, key=lambda n: (n.split("/")[0], os.path.dirname(n), os.path.basename(n)))


@pytest.mark.slow
def test_big_directory_lists_in_parallel_keys_only(big_s3_tree, s3_options, s3_proxy):
    url, names = big_s3_tree
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    s3_proxy.reset()
    with gen.flow_from_directory(url, shuffle=False, target_size=(2, 2)) as it:
        counts = s3_proxy.reset()
        assert it.filenames == directory_order(names)
        assert sorted(it.class_indices) == list("abcde")
        fs, root = it.filesystems.resolve(url)
        assert not [path for path in fs.dircache if path.startswith(root)]  # no info dicts kept
        # The hook is inert outside remote_keras's listings: s3fs still parses its own.
        listed = fs.ls(url + "/a", detail=True, refresh=True)
        assert len(listed) == 500 and all("LastModified" in e for e in listed)
        fs.invalidate_cache()
    assert counts["LIST"] <= len(names) / 1000 + 5 + 2, counts
    assert counts.get("HEAD", 0) == counts.get("GET", 0) == 0, counts


@pytest.mark.slow
def test_training_and_validation_subsets_list_once(big_s3_tree, s3_options, s3_proxy):
    url, names = big_s3_tree
    gen = rk.ImageDataGenerator(validation_split=0.25, storage_options=s3_options)
    s3_proxy.reset()
    train = gen.flow_from_directory(url, subset="training", shuffle=False)
    first = s3_proxy.reset()
    val = gen.flow_from_directory(url, subset="validation", shuffle=False)
    assert s3_proxy.reset().get("LIST", 0) == 0 and first["LIST"] >= 1
    with train, val:
        assert train.samples + val.samples == len(names)
        again = gen.flow_from_directory(url, subset="training", shuffle=False)  # anew
        assert s3_proxy.reset()["LIST"] == first["LIST"]
        assert again.filenames == train.filenames
        again.close()


@pytest.mark.slow
def test_validate_filenames_lists_parents_in_parallel(big_s3_tree, s3_options, s3_proxy):
    url, names = big_s3_tree
    rows = [f"{url}/{n}" for n in names] + [f"{url}/a/missing.png", f"{url}/c/nested/none.png"]
    df = pd.DataFrame({"filename": rows, "class": [r.split("/")[-2] for r in rows]})
    gen = rk.ImageDataGenerator(validation_split=0.5, storage_options=s3_options)
    s3_proxy.reset()
    with pytest.warns(UserWarning, match="Found 2 invalid image filename"):
        train = gen.flow_from_dataframe(df, subset="training")
    counts = s3_proxy.reset()
    with pytest.warns(UserWarning, match="Found 2 invalid image filename"):
        val = gen.flow_from_dataframe(df, subset="validation")  # the check is shared
    assert s3_proxy.reset().get("LIST", 0) == 0
    with train, val:
        assert train.samples + val.samples == len(names)
    assert counts["LIST"] <= len(names) / 1000 + 6 + 2, counts


@pytest.mark.slow
def test_s3_listing_cache_is_opt_in_with_a_lifetime(big_s3_tree, s3_options, s3_proxy, tmp_path):
    url, names = big_s3_tree
    off = rk.ImageDataGenerator(
        options=LoaderOptions(storage_options=s3_options, listing_cache_dir=str(tmp_path))
    )
    off.flow_from_directory(url).close()
    assert not os.listdir(tmp_path)  # never on by default for a mutable store
    options = LoaderOptions(
        storage_options=s3_options, listing_cache_dir=str(tmp_path), listing_cache_s=60
    )
    rk.ImageDataGenerator(options=options).flow_from_directory(url).close()
    s3_proxy.reset()
    with rk.ImageDataGenerator(options=options).flow_from_directory(url, shuffle=False) as it:
        assert s3_proxy.reset().get("LIST", 0) == 0
        assert it.filenames == directory_order(names)


# --------------------------------------------------------------------------- lakeFS


@pytest.fixture(scope="module")
def lakefs_commit():
    """A stand-in whose repository holds 1,500 objects in 3 classes at a commit."""
    with LakeFSServer() as server:
        client = Client(**server.storage_options)
        repo = f"rk-{uuid.uuid4().hex[:8]}"
        lakefs.Repository(repo, client=client).create(storage_namespace=f"local://{repo}")
        api, png = client.sdk_client.objects_api, noise_png(1, 2)
        names = [f"{c}/{i:04d}.png" for c in "xyz" for i in range(500)]
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda n: api.upload_object(repo, "main", f"train/{n}", content=png), names
                )
            )
        commit = lakefs.Branch(repo, "main", client=client).commit("images").get_commit().id
        yield server, repo, commit, names


def lakefs_listings(server) -> int:
    return sum(n for route, n in server.reset().items() if route.endswith("/objects/ls"))


@pytest.mark.slow
def test_lakefs_lists_pages_of_1000_and_reads_a_commit_from_disk_after(
    lakefs_commit, monkeypatch, tmp_path
):
    server, repo, commit, names = lakefs_commit
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gen = rk.ImageDataGenerator(storage_options=server.storage_options)
    server.reset()
    with gen.flow_from_directory(f"lakefs://{repo}/main/train", shuffle=False) as first:
        assert first.lakefs_pins[0].commit_id == commit
        cold = lakefs_listings(server)
        assert first.filenames == names
    assert cold <= len(names) / 1000 + 3 + 2
    assert len(os.listdir(tmp_path / "remote_keras" / "listings")) == 1
    with rk.ImageDataGenerator(storage_options=server.storage_options).flow_from_directory(
        f"lakefs://{repo}/{commit}/train", shuffle=False
    ) as warm:
        assert lakefs_listings(server) == 0
        assert warm.filenames == names
        assert warm[0][0].shape[0] == 32
    off = LoaderOptions(storage_options=server.storage_options, listing_cache_dir=False)
    rk.ImageDataGenerator(options=off).flow_from_directory(
        f"lakefs://{repo}/{commit}/train"
    ).close()
    assert lakefs_listings(server) == cold
