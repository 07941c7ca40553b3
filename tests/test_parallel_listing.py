"""`storage.listing.parallel_listing`: whole trees and folders listed from pages in parallel.

Most tests list an in-memory bucket (`MemoryBucket`) that follows the `Lister`/`Page` protocol of
`remote_keras.storage.listing.listing_pages` (and S3's rules: keys in order, common prefixes
rolled up with a delimiter, opaque continuation tokens), counting and recording every request;
one lists the real S3 server and compares with `s3fs`'s own `find`.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
import uuid
from typing import NamedTuple

import pytest
import s3fs
from hypothesis import example, given, settings
from hypothesis import strategies as st

from remote_keras.storage.listing import parallel_listing
from remote_keras.storage.listing.listing_pages import Page
from remote_keras.storage.listing.parallel_listing import (
    LakeFSLister,
    list_folders,
    list_tree,
    lister_for,
    split_point,
)
from tests.conftest import SETUP_CLIENT
from tests.helpers import put_objects


class Request(NamedTuple):
    prefix: str
    delimiter: str
    after: str
    token: str | None


class MemoryBucket:
    """Sorted keys listed `size` entries (keys and common prefixes) a page, as S3 lists them.

    Tokens are opaque and single-use: a page asked for twice, or with a token of another
    listing, fails the test. `delay` makes each request take that long (so that requests
    overlap); `fail(request)` may return an exception for the request to raise.
    """

    scope = ("memory",)

    def __init__(self, keys, size=1000, delay=0.0, fail=None) -> None:
        self.keys = sorted(set(keys))
        self.size = size
        self.delay = delay
        self.fail = fail
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self._tokens: dict[str, tuple[str, str, str]] = {}
        self._ids = itertools.count()

    def page(self, prefix, delimiter, after, token, root) -> Page:
        assert prefix.startswith(root), (prefix, root)
        request = Request(prefix, delimiter, after, token)
        with self.lock:
            self.requests.append(request)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay:
                time.sleep(self.delay)
            failure = self.fail(request) if self.fail else None
            if failure is not None:
                raise failure
            start = after
            if token is not None:
                with self.lock:
                    listed = self._tokens.pop(token, None)
                assert listed is not None, f"token {token!r} unknown or used twice"
                assert listed[:2] == (prefix, delimiter), "a token of another listing"
                start = listed[2]
            entries = self._entries(prefix, delimiter, start, self.size + 1)
            more = len(entries) > self.size
            entries = entries[: self.size]
            last = entries[-1][0] if entries else ""
            next_token = None
            if more:
                next_token = f"opaque-{next(self._ids)}"
                with self.lock:
                    self._tokens[next_token] = (prefix, delimiter, last)
            keys = [name[len(root) :] for name, rolled_up in entries if not rolled_up]
            prefixes = [name for name, rolled_up in entries if rolled_up]
            return Page(keys, prefixes, last, next_token)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _entries(self, prefix, delimiter, start, count):
        """Up to `count` `(key or common prefix, rolled up)` entries after `start`, in order."""
        i = max(bisect.bisect_left(self.keys, prefix), bisect.bisect_right(self.keys, start))
        found: list[tuple[str, bool]] = []
        while i < len(self.keys) and len(found) < count:
            key = self.keys[i]
            if not key.startswith(prefix):
                break
            rest = key[len(prefix) :]
            cut = rest.find(delimiter) if delimiter else -1
            if cut < 0:
                found.append((key, False))
                i += 1
                continue
            common = prefix + rest[: cut + len(delimiter)]
            if common > start:
                found.append((common, True))
            while i < len(self.keys) and self.keys[i].startswith(common):
                i += 1
        return found

    def first_requests(self, prefix):
        """The requests that started a listing of `prefix` (no token)."""
        return [r for r in self.requests if r.prefix == prefix and r.token is None]


class Bar:
    """Stands for a `tqdm` bar: adds up what it is told."""

    def __init__(self) -> None:
        self.n = 0

    def update(self, n) -> None:
        self.n += n


def serial_listing(bucket, root):
    """What one listing, page after page, gives for `root` (relative keys)."""
    keys, token = [], None
    while True:
        page = bucket.page(root, "", "", token, root)
        keys += page.keys
        token = page.token
        if token is None:
            return keys


def relative(keys, root):
    return sorted(key[len(root) :] for key in set(keys) if key.startswith(root))


# --------------------------------------------------------------------------- list_tree


@pytest.mark.parametrize("root", ["", "train/"])
def test_a_root_that_fits_on_one_page_is_one_request(root):
    keys = [f"{root}{c}/{i}.png" for c in "ab" for i in range(20)] + ["train0", "other/x.png"]
    bucket = MemoryBucket(keys, size=40 if root else 42)
    bar = Bar()
    assert list_tree(bucket, root, bar) == relative(keys, root)
    assert bucket.requests == [Request(root, "", "", None)]
    assert bar.n == len(relative(keys, root))


@pytest.mark.parametrize("root", ["", "data/"])
def test_folders_are_listed_after_a_delimiter_listing_each_from_what_page_one_left(root):
    inside = (
        [f"a/{i}" for i in range(4)]  # wholly on page one: never listed again
        + [f"b/{i:02d}" for i in range(12)]  # partly on page one: listed from its last key on
        + [f"c/{i}" for i in range(8)]  # not on page one: listed from its start
        + ["m.txt", "z.txt"]  # loose objects after page one, from the delimiter listing
    )
    outside = ["dat", "data0/x", "datb/y"] if root else []  # near "data/", not in it
    keys = [root + key for key in inside] + outside
    bucket = MemoryBucket(keys, size=10)
    bar = Bar()
    listed = list_tree(bucket, root, bar)
    assert listed == sorted(inside)
    first, top, *folders = bucket.requests
    assert first == Request(root, "", "", None)
    assert top == Request(root, "/", "", None)
    assert sorted(folders) == [
        Request(f"{root}b/", "", f"{root}b/05", None),  # the last key of page one
        Request(f"{root}c/", "", "", None),
    ]
    assert bar.n == len(inside)  # each key counted once


def test_many_small_folders_are_listed_in_a_few_ranges_not_one_request_each():
    # 60 folders of 20 objects; loose objects on a range's bound and just past one.
    keys = [f"r/c{k:02d}/{j:02d}.jpg" for k in range(60) for j in range(20)]
    keys += ["r/c18", "r/c33.txt", "r/zz"]
    bucket = MemoryBucket(keys, size=70)
    assert list_tree(bucket, "r/", concurrency=4) == relative(keys, "r/")
    assert [r for r in bucket.requests if r.delimiter] == [Request("r/", "/", "", None)]
    assert {r.prefix for r in bucket.requests} == {"r/"}  # ranges of the root, not folders
    starts = {r.after for r in bucket.first_requests("r/")}
    # Page one ends in c03/; the 57 folders after it: 4 groups of 15 (the last of 12).
    assert {"r/c03/09.jpg", "r/c18", "r/c33", "r/c48"} <= starts
    assert len(bucket.requests) < 60  # one request per folder would be at least 60


def test_one_huge_folder_is_split_into_ranges_listed_in_parallel():
    keys = [f"big/img_{i:06d}.jpg" for i in range(20_000)] + ["a.txt"]
    bucket = MemoryBucket(keys, size=100, delay=0.001)
    bar = Bar()
    listed = list_tree(bucket, "", bar)
    expected = serial_listing(MemoryBucket(keys, size=100), "")
    assert listed == expected == sorted(keys)
    assert len(set(listed)) == len(listed) and bar.n == len(keys)  # no key twice, none lost
    starts = bucket.first_requests("big/")
    assert len(starts) >= parallel_listing.MIN_PARALLEL  # the first range and its splits
    assert bucket.most_in_flight >= 2
    assert bucket.most_in_flight <= parallel_listing.CONCURRENCY
    # Each split costs at most one page that is not full: about one request per page.
    assert len(bucket.requests) <= 20_000 / 100 + len(starts) + 2
    # A split starts within the folder, after the first range's first pages.
    first_split = bucket.requests.index(starts[1])
    assert first_split >= 2 + parallel_listing.SPLIT_AFTER_PAGES
    assert all(r.after > starts[0].after and r.after.startswith("big/") for r in starts[1:])


@pytest.mark.parametrize(
    "setting", [("SPLIT_AFTER_PAGES", 10**9), ("MIN_PARALLEL", 1)], ids=lambda s: s[0]
)
def test_no_split_before_split_after_pages_nor_with_min_parallel_ranges(monkeypatch, setting):
    monkeypatch.setattr(parallel_listing, *setting)
    keys = [f"big/{i:05d}" for i in range(3000)]
    bucket = MemoryBucket(keys, size=100)
    assert list_tree(bucket, "") == keys
    assert len(bucket.first_requests("big/")) == 1  # one range, listed page after page
    assert len(bucket.requests) == 2 + (3000 - 100) // 100  # page one, delimiter page, rest


@pytest.mark.parametrize("concurrency", [1, 3])
def test_requests_in_flight_never_exceed_concurrency(concurrency):
    keys = [f"big/{i:05d}" for i in range(4000)] + [
        f"small{k}/{i}" for k in range(5) for i in (0, 1)
    ]
    bucket = MemoryBucket(keys, size=50, delay=0.001)
    assert list_tree(bucket, "", concurrency=concurrency) == sorted(keys)
    assert bucket.most_in_flight <= concurrency


# --------------------------------------------------------------------------- list_folders


def test_list_folders_lists_each_folders_own_objects_and_missing_ones_as_empty():
    keys = [f"a/{i:04d}.png" for i in range(450)] + ["a/", "a/sub/x.png", "a/sub/y.png"]
    keys += ["b/1.png", "b/2.png", "bb/3.png"]
    bucket = MemoryBucket(keys, size=20, fail=missing("gone/"))
    bar = Bar()
    listed = list_folders(bucket, ["b/", "a/", "gone/", "nothing/", "b/"], bar, concurrency=4)
    assert listed == {
        "a/": [""] + [f"{i:04d}.png" for i in range(450)],  # the folder marker: ""
        "b/": ["1.png", "2.png"],
        "gone/": [],
        "nothing/": [],
    }
    assert bar.n == 453
    assert {r.delimiter for r in bucket.requests} == {"/"}
    assert len(bucket.first_requests("a/")) >= 2  # a big folder is split here too


def missing(prefix):
    """`fail` for a `MemoryBucket` whose listings of `prefix` are not found."""
    return lambda r: FileNotFoundError(r.prefix) if r.prefix == prefix else None


# --------------------------------------------------------------------------- errors


class Stop(BaseException):
    """Not an `Exception`: must reach the caller all the same."""


def test_an_error_on_the_first_page_is_raised():
    boom = PermissionError("denied")
    with pytest.raises(PermissionError) as raised:
        list_tree(MemoryBucket(["a"], fail=lambda r: boom), "")
    assert raised.value is boom


@pytest.mark.timeout(60)
@pytest.mark.parametrize("split", [True, False], ids=["split", "serial"])
@pytest.mark.parametrize("error", [OSError("connection reset"), Stop(), FileNotFoundError("c/")])
def test_an_error_in_a_range_is_raised_and_stops_the_other_ranges(monkeypatch, error, split):
    if not split:  # one long range: it must stop between its pages
        monkeypatch.setattr(parallel_listing, "SPLIT_AFTER_PAGES", 10**9)
    keys = [f"big/{i:05d}" for i in range(20_000)] + [f"c/{i}" for i in range(3)]
    bucket = MemoryBucket(keys, size=100, delay=0.005)
    bucket.fail = lambda r: error if r.prefix == "c/" else None
    with pytest.raises(type(error)) as raised:
        list_tree(bucket, "")
    assert raised.value is error
    assert len(bucket.requests) < 100  # 200 pages of "big/" were not all listed first


@pytest.mark.timeout(60)
@pytest.mark.parametrize("later_page", [False, True], ids=["first page", "later page"])
def test_an_error_in_a_range_split_off_is_raised(later_page):
    keys = [f"big/{i:05d}" for i in range(5000)]

    def fail(r):  # a range split off: one that starts past page one (big/00000 to big/00049)
        split_off = r.after > "big/00049"
        return OSError("slow down") if split_off and (r.token is not None) == later_page else None

    for listing in (lambda b: list_tree(b, ""), lambda b: list_folders(b, ["big/"])):
        bucket = MemoryBucket(keys, size=50, delay=0.001, fail=fail)
        with pytest.raises(OSError, match="slow down"):
            listing(bucket)
        assert len(bucket.requests) < 100  # of 100 pages: the others stopped


def test_no_split_point_when_nothing_lies_between():
    for low, high in [("a/b", "a/b"), ("a/b", "a/b\x00"), ("a/c", "a/b"), ("a/b", "a/a~~~~")]:
        assert split_point(low, high, "a/") is None
        assert split_point(low, high, "a/", "a/") is None


# --------------------------------------------------------------------------- properties

segment = st.text(alphabet="09azAZ-. ~!_", max_size=4)
key_text = st.lists(segment, min_size=1, max_size=3).map("/".join).filter(bool)  # S3: no ""
rooted = st.tuples(st.booleans(), key_text).map(lambda t: "r/" + t[1] if t[0] else t[1])


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(rooted, max_size=80),
    size=st.integers(1, 8),
    root=st.sampled_from(["", "r/"]),
    concurrency=st.integers(1, 6),
)
@example(keys=["r/", "r/a/", "r/a/b", "r/a-", "r/a"], size=1, root="r/", concurrency=2)
def test_list_tree_is_one_sorted_serial_listing(keys, size, root, concurrency):
    bucket = MemoryBucket(keys, size)
    bar = Bar()
    listed = list_tree(bucket, root, bar, concurrency=concurrency)
    assert listed == relative(keys, root) == serial_listing(MemoryBucket(keys, size), root)
    assert bar.n == len(listed)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(
    numbers=st.sets(st.integers(0, 99_999), min_size=300, max_size=1000),
    width=st.integers(5, 7),
    name=st.sampled_from(["img_", "", "A-", "z "]),
    size=st.integers(5, 30),
)
def test_list_tree_of_a_split_folder_is_one_sorted_serial_listing(numbers, width, name, size):
    keys = [f"f/{name}{n:0{width}d}.jpg" for n in numbers] + ["g/1"]
    assert list_tree(MemoryBucket(keys, size), "") == sorted(keys)
    assert list_folders(MemoryBucket(keys, size), ["f/"])["f/"] == [
        k[2:] for k in sorted(keys)[:-1]
    ]


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(key_text, max_size=60), size=st.integers(1, 7))
def test_list_folders_gives_the_direct_objects_of_each_folder(keys, size):
    folders = ["", "a/", "a/b/", "0/", "zz/"]
    listed = list_folders(MemoryBucket(keys, size), folders, concurrency=3)
    for folder in folders:
        direct = [k for k in relative(keys, folder) if "/" not in k]
        assert listed[folder] == direct


prefixes = st.sampled_from(["", "p/", "img_00", "a/b c/"])
tails = st.text(alphabet="09azAZ !/-~\x7f", max_size=7)


@settings(max_examples=250, deadline=None)
@given(
    prefix=prefixes,
    low=tails,
    high=st.one_of(st.none(), tails, tails.map(lambda t: "\x00" + t)),
    anchor=tails,
)
def test_a_split_point_lies_strictly_between_under_the_prefix(prefix, low, high, anchor):
    low, anchor = prefix + low, prefix + min(anchor, low)  # the range's first key: not after low
    if high is not None:  # an end within the prefix, or (with "\x00") anywhere
        high = high[1:] if high.startswith("\x00") else prefix + high
    point = split_point(low, high, prefix, anchor)
    if point is not None:
        assert low < point and (high is None or point < high)
        assert point.startswith(prefix)
    if high is not None and (high <= low or high == low + "\x00"):
        assert point is None  # no string lies strictly between


letters = ["".join(t) for t in itertools.product("abcdefghijklmnopqrstuvwxyz", repeat=3)]


@pytest.mark.parametrize(
    ("keys", "prefix"),
    [
        ([f"img_{i:06d}.jpg" for i in range(2000, 8001)], ""),
        ([f"{i:06d}.png" for i in range(0, 1_000_000, 7)], ""),
        ([f"{i:06d}" for i in range(123_456, 654_322)], ""),
        ([f"p/a{i:04d}" for i in range(10_000)], "p/"),
        ([f"x/{t}" for t in letters], "x/"),
        ([f"x/{t.upper()}.JPG" for t in letters], "x/"),
    ],
    ids=["img", "sparse", "offset", "prefix", "lower", "upper"],
)
def test_a_bounded_range_is_split_near_its_middle(keys, prefix):
    point = split_point(keys[0], keys[-1], prefix)
    assert point is not None and keys[0] < point < keys[-1] and point.startswith(prefix)
    below = bisect.bisect_left(keys, point)
    assert 0.35 <= below / len(keys) <= 0.65, (point, below / len(keys))


def test_numbered_keys_far_apart_are_split_across_a_carry():
    # The middle of 092 and 100 falls on the slot below a digit class: the key ends there ("1").
    point = split_point("092000.png", "100000.png", "")
    assert point is not None and "092000.png" < point < "100000.png"


def test_an_open_range_is_split_where_its_keys_seem_to_go_on():
    # Keys img_000000 to img_001999 listed: numbers with two leading zeros are guessed to go on.
    assert split_point("img_001999.jpg", None, "", "img_000000.jpg") == "img_00599"
    assert split_point("b/img_001999.jpg", None, "b/", "b/img_000000.jpg") == "b/img_00599"


# --------------------------------------------------------------------------- listers


class LakeFSFileSystem:
    """Named as `lakefs_spec`'s filesystem: `lister_for` goes by the class name."""

    client = object()


def test_lister_for_picks_a_lister_by_filesystem_and_splits_the_path(s3_server):
    fs = s3fs.S3FileSystem(**s3_server.storage_options, skip_instance_cache=True)
    lister, prefix = lister_for(fs, "data/train/cats")
    assert lister.scope == ("s3", "data") and prefix == "train/cats"
    assert lister_for(fs, "data")[1] == ""
    assert lister_for(fs, "") is None
    versioned = s3fs.S3FileSystem(
        **s3_server.storage_options, skip_instance_cache=True, version_aware=True
    )
    assert lister_for(versioned, "data/train") is None  # versions are listed by s3fs
    lake, prefix = lister_for(LakeFSFileSystem(), "repo/c0ffee/train/cats")
    assert isinstance(lake, LakeFSLister)
    assert lake.scope == ("lakefs", "repo", "c0ffee") and prefix == "train/cats"
    assert lister_for(LakeFSFileSystem(), "repo/main")[1] == ""
    assert lister_for(LakeFSFileSystem(), "repo") is None  # no ref
    from fsspec.implementations.local import LocalFileSystem

    assert lister_for(LocalFileSystem(), "/tmp") is None


def test_lakefs_pages_keep_keys_below_the_root_and_the_greatest_entry(monkeypatch):
    from remote_keras.storage import lakefs

    asked = []

    def list_page(fs, repository, ref, prefix, after, delimiter):
        asked.append((repository, ref, prefix, after, delimiter))
        return ["t/a/1.png", "t/a/2.png"], ["t/a/b/"], "t/a/b/"

    monkeypatch.setattr(lakefs, "list_page", list_page)
    lister = LakeFSLister(fs=None, repository="repo", ref="c0ffee")
    assert lister.page("t/a/", "/", "t/a/0", None, "t/") == Page(
        ["a/1.png", "a/2.png"], ["t/a/b/"], "t/a/b/", "t/a/b/"
    )
    lister.page("t/a/", "", "t/a/0", "t/a/9", "t/")  # a token goes on from where it says
    assert asked == [
        ("repo", "c0ffee", "t/a/", "t/a/0", "/"),
        ("repo", "c0ffee", "t/a/", "t/a/9", ""),
    ]


# --------------------------------------------------------------------------- real S3


@pytest.fixture(scope="module")
def s3_tree(s3_server):
    """1,006 objects in three folders (one nested), and a loose one, under a fresh prefix."""
    fs = s3fs.S3FileSystem(**s3_server.storage_options, **SETUP_CLIENT)
    prefix = f"data/plist-{uuid.uuid4().hex[:8]}"
    names = [f"{c}/{i:04d}.bin" for c, n in (("a", 400), ("b", 400), ("c", 200)) for i in range(n)]
    names += [f"c/deep/{i}.bin" for i in range(5)] + ["readme.txt"]
    put_objects(fs, {f"{prefix}/{name}": b"x" for name in names})
    return prefix, names


@pytest.mark.slow
def test_s3_list_tree_equals_s3fs_find(s3_tree, s3_options, s3_proxy, s3fs_direct):
    prefix, names = s3_tree
    fs = s3fs.S3FileSystem(**s3_options, skip_instance_cache=True)
    lister, key_prefix = lister_for(fs, prefix)
    root = key_prefix + "/"
    s3_proxy.reset()
    listed = list_tree(lister, root)
    counts = s3_proxy.reset()
    found = s3fs_direct.find(prefix)
    assert len(found) == len(names) > 1000
    assert listed == sorted(path[len(prefix) + 1 :] for path in found) == sorted(names)
    # Page one (a/, b/, c/'s own objects), the delimiter page, then c/ after its last key
    # (c/deep/); readme.txt comes from the delimiter page.
    assert counts["LIST"] == 3, counts
    assert sum(counts.values()) == 3, counts
