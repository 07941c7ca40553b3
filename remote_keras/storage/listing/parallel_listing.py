"""Listing large prefixes fast: key strings only, many pages in flight.

A listing here keeps nothing per object but its key, relative to the
listed root (never an info dict, never fsspec's directory cache), and asks
for many pages at once instead of one after another:

1. One page of the whole root. If it is the only one (1,000 keys or fewer),
   that is the listing: one request.
2. Otherwise one delimiter listing of the root finds its folders (the
   classes of `flow_from_directory`), and each folder is listed on its own,
   `CONCURRENCY` requests in flight. A folder partly on the first page is
   listed from its last key on (`StartAfter` on S3, `after` on lakeFS).
3. While fewer than `MIN_PARALLEL` ranges are being listed (one huge
   folder), a range that is still going is split in two at a key between
   its position and its end, and the upper half is listed alongside.

The result is sorted as one serial listing would be (lexicographic order
of the keys, as S3 and lakeFS list them). `S3Lister` asks through the
s3fs filesystem's own aiobotocore client and `LakeFSLister` through the
lakeFS SDK client of the `lakefs_spec` filesystem (`lakefs.list_page`).

S3 pages skip botocore's per-object parsing (`remote_keras.storage.listing.s3_listing_pages`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from remote_keras.storage.listing.listing_pages import Lister, Page

# Listing requests in flight at once.
CONCURRENCY = 32
# Fewer ranges than this in flight: big ones are split (one huge folder).
MIN_PARALLEL = 8
# A range is split only after this many full pages (it is big, not just unlucky).
SPLIT_AFTER_PAGES = 2


class LakeFSLister:
    """Lists lakeFS pages of 1,000 through a `lakefs_spec` filesystem's client.

    Args:
        fs: A `lakefs_spec.LakeFSFileSystem`.
        repository: Repository name.
        ref: The ref listed (a commit id, for a listing that never changes).
    """

    def __init__(self, fs: Any, repository: str, ref: str) -> None:
        self.fs = fs
        self.repository = repository
        self.ref = ref
        self.scope: tuple[str, ...] = ("lakefs", repository, ref)

    def page(self, prefix: str, delimiter: str, after: str, token: str | None, root: str) -> Page:
        """Lists one page (see `Lister.page`)."""
        from remote_keras.storage import lakefs

        paths, prefixes, offset = lakefs.list_page(
            self.fs, self.repository, self.ref, prefix, token or after, delimiter
        )
        last = max(paths[-1] if paths else "", prefixes[-1] if prefixes else "")
        cut = len(root)
        return Page([path[cut:] for path in paths], prefixes, last, offset)


def lister_for(fs: Any, path: str) -> tuple[Lister, str] | None:
    """A fast lister for `fs` and the prefix `path` names in it, if this module has one.

    Args:
        fs: An fsspec filesystem.
        path: A path within `fs`, as `fs._strip_protocol` gives it.

    Returns:
        `(lister, prefix)`, the prefix within the lister's namespace (key
        prefix in the bucket, path in the lakeFS ref), or `None`.
    """
    kind = type(fs).__name__
    if kind == "S3FileSystem" and hasattr(fs, "_call_s3") and getattr(fs, "loop", None):
        from remote_keras.storage.listing.s3_listing_pages import S3Lister

        bucket, _, prefix = path.partition("/")
        if bucket and not getattr(fs, "version_aware", False):
            return S3Lister(fs, bucket), prefix
    if kind == "LakeFSFileSystem" and hasattr(fs, "client"):
        repository, _, rest = path.partition("/")
        ref, _, prefix = rest.partition("/")
        if repository and ref:
            return LakeFSLister(fs, repository, ref), prefix
    return None


# --------------------------------------------------------------------------- listings


class _Counter:
    """Adds listed keys to a `tqdm` bar from several threads."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        if self.bar is not None and n:
            with self.lock:
                self.bar.update(n)


def list_tree(
    lister: Lister, root: str, bar: Any = None, concurrency: int = CONCURRENCY
) -> list[str]:
    """Lists every key below `root`, relative to it, in parallel where it pays.

    Args:
        lister: Lists pages (`S3Lister`, `LakeFSLister`).
        root: Prefix listed, ending with `/` (or `""` for everything).
        bar: Optional `tqdm` bar counting the keys as pages arrive.
        concurrency: Requests in flight at most.

    Returns:
        The keys without `root`, sorted; folder markers keep their `/`.
    """
    counter = _Counter(bar)
    first = lister.page(root, "", "", None, root)
    counter.add(len(first.keys))
    if first.token is None:
        return first.keys
    seen = first.last  # every key up to this one is on the first page
    # The folders directly in `root`, from one delimiter page; with more than one page of
    # them (or of loose objects), the rest is listed as one range, split as it goes.
    top = lister.page(root, "/", "", None, root)
    loose = [] if top.token else [key for key in top.keys if root + key > seen]
    if top.token:
        ranges = [_Range(root, seen, None)]
    else:
        ranges = [_Range(p, seen if seen.startswith(p) else "", None) for p in top.prefixes]
        ranges = [r for r in ranges if r.after or r.prefix > seen]  # the rest were on page 1
        grouped = _grouped(first.keys, [r.prefix for r in ranges], root, seen, concurrency)
        if grouped:
            ranges, loose = grouped, []  # the groups cover the loose objects too
    counter.add(len(loose))
    keys = first.keys
    for chunk in _Ranges(lister, root, "", counter, concurrency).run(ranges).values():
        keys += chunk
    if loose:
        keys += loose
        keys.sort()
    return keys


def _grouped(
    first: list[str], folders: list[str], root: str, seen: str, concurrency: int
) -> list[_Range]:
    """Many small folders: `concurrency` ranges of consecutive folders, else `[]`.

    One range per folder costs at least a request per folder, however few objects it holds
    (a thousand folders of 400 images: 1,000 requests for 400 pages). When the first page
    shows folders of at most half a page, everything after `seen` is cut into `concurrency`
    contiguous ranges at folder boundaries instead (each key in exactly one), which costs
    about one request per page plus one per range.
    """
    touched = len({key.partition("/")[0] for key in first})  # folders on the first page
    if len(folders) <= concurrency or touched < 2:
        return []  # few folders, or folders of more than half a page: one range each
    per = -(-len(folders) // concurrency)
    bounds = [seen]
    for folder in folders[per::per]:
        bounds.append(max(folder[:-1], bounds[-1]))  # below the folder's keys and its marker
    ends: list[str | None] = [*bounds[1:], None]
    return [_Range(root, low, high) for low, high in zip(bounds, ends) if low != high]


def list_folders(
    lister: Lister, folders: Iterable[str], bar: Any = None, concurrency: int = CONCURRENCY
) -> dict[str, list[str]]:
    """Lists the objects directly in each of `folders` (not in their sub-folders), in parallel.

    Args:
        lister: Lists pages (`S3Lister`, `LakeFSLister`).
        folders: Prefixes, each ending with `/`.
        bar: Optional `tqdm` bar counting the keys as pages arrive.
        concurrency: Requests in flight at most.

    Returns:
        `{folder: [name, ...]}`, names relative to their folder; a folder
        that does not exist (or a bucket that does not) lists as empty.
    """
    ranges = [_Range(folder, "", None) for folder in sorted(set(folders))]
    found = _Ranges(lister, None, "/", _Counter(bar), concurrency, missing_ok=True).run(ranges)
    listed: dict[str, list[str]] = {r.prefix: [] for r in ranges}
    for (folder, _), keys in found.items():
        listed[folder] += keys
    return listed


class _Range(NamedTuple):
    """Keys starting with `prefix`, after `after`, up to `until` (inclusive; `None`: no end)."""

    prefix: str
    after: str
    until: str | None


class _Ranges:
    """Lists ranges of keys on a thread pool, splitting big ones while few are in flight.

    Keys lose `root` from their start (`None`: each range's own prefix).
    """

    def __init__(
        self,
        lister: Lister,
        root: str | None,
        delimiter: str,
        counter: _Counter,
        concurrency: int,
        missing_ok: bool = False,
    ) -> None:
        self.lister = lister
        self.root = root
        self.delimiter = delimiter
        self.counter = counter
        self.concurrency = max(1, concurrency)
        self.missing_ok = missing_ok
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.pending = 0
        self.error: BaseException | None = None
        self.results: dict[tuple[str, str], list[str]] = {}
        self.pool: ThreadPoolExecutor | None = None

    def run(self, ranges: list[_Range]) -> dict[tuple[str, str], list[str]]:
        """Lists `ranges`; returns `{(prefix, start): keys}` in key order."""
        if not ranges:
            return {}
        workers = min(self.concurrency, max(len(ranges), MIN_PARALLEL))
        with ThreadPoolExecutor(workers, thread_name_prefix="remote_keras-list") as pool:
            self.pool = pool
            self.pending = 1  # held while submitting: the first ranges may end meanwhile
            for r in ranges:
                self._submit(r)
            self._release()
            self.done.wait()
        self.pool = None
        if self.error is not None:
            raise self.error
        return dict(sorted(self.results.items()))

    def _submit(self, r: _Range) -> None:
        keys: list[str] = []
        with self.lock:
            self.pending += 1
            self.results[(r.prefix, max(r.after, r.prefix))] = keys
        if self.pool is None:
            raise RuntimeError("ranges are submitted only while `run` runs")
        self.pool.submit(self._guarded, r, keys)

    def _guarded(self, r: _Range, keys: list[str]) -> None:
        try:
            if self.error is None:
                self._list(r, keys)
        except FileNotFoundError:
            if not self.missing_ok:
                self._fail()
        except BaseException:  # handed to the caller of `run`
            self._fail()
        finally:
            self._release()

    def _release(self) -> None:
        """One range (or the submitting caller) is done; the last one ends `run`."""
        with self.lock:
            self.pending -= 1
            if self.pending == 0:
                self.done.set()

    def _fail(self) -> None:
        import sys

        with self.lock:
            if self.error is None:
                self.error = sys.exc_info()[1]

    def _list(self, r: _Range, keys: list[str]) -> None:
        root = r.prefix if self.root is None else self.root  # None: each range's own prefix
        token: str | None = None
        pages, anchor = 0, ""  # anchor: the first key this range listed
        while self.error is None:
            page = self.lister.page(r.prefix, self.delimiter, r.after, token, root)
            got, ended = page.keys, page.token is None
            if r.until is not None and page.last > r.until:
                until = r.until[len(root) :]
                got, ended = [key for key in got if key <= until], True
            keys += got
            self.counter.add(len(got))
            if ended:
                return
            anchor = anchor or (root + got[0] if got else "")
            token, pages = page.token, pages + 1
            if pages >= SPLIT_AFTER_PAGES and self.pending < MIN_PARALLEL:
                middle = split_point(page.last, r.until, r.prefix, anchor)
                if middle is not None:
                    self._submit(_Range(r.prefix, middle, r.until))
                    r = r._replace(until=middle)


# Split points are three characters long past what the keys share; each character is drawn
# from the class of the key's character there (digits, lower or upper case letters, else
# printable ASCII), so that names like `img_001999` split at `img_00599`, not at `img_00X`.
_DIGITS = 3
_CLASSES = (("0", "9"), ("a", "z"), ("A", "Z"))
_PRINTABLE = (" ", "~")


def _alphabet(*chars: str | None) -> tuple[str, str]:
    """The character class holding all of `chars` (`None`s ignored)."""
    found = {next((c for c in _CLASSES if c[0] <= ch <= c[1]), _PRINTABLE) for ch in chars if ch}
    return found.pop() if len(found) == 1 else _PRINTABLE


def split_point(low: str, high: str | None, prefix: str, anchor: str = "") -> str | None:
    """A string strictly between `low` and `high` near the middle, or `None` if none is found.

    The three characters past what `low` and the end share are read as a
    number, each in its character class. With no `high` (a range to the
    end of `prefix`), the end is guessed from the keys seen so far: what
    `anchor` and `low` have in common is taken to go on (`img_00` from
    `img_000000` and `img_001999`, so the split lands at `img_00599`); keys
    beyond stay in the upper, unbounded half, so a wrong guess costs
    requests, never keys.

    Args:
        low: The last key listed so far.
        high: The range's end (exclusive of what is split off), or `None`.
        prefix: The range's prefix.
        anchor: The first key the range listed, if any.
    """
    if high is None:
        start = len(prefix)
        while start < min(len(anchor), len(low)) and anchor[start] == low[start]:
            start += 1
    else:
        start = 0
        while start < min(len(low), len(high)) and low[start] == high[start]:
            start += 1
    positions = range(start, start + _DIGITS)
    classes = [
        _alphabet(low[i] if i < len(low) else None, high[i] if high and i < len(high) else None)
        for i in positions
    ]

    def value(text: str) -> int:
        total = 0
        for i, (first, last) in zip(positions, classes):
            code = ord(text[i]) if i < len(text) else ord(first) - 1  # shorter: below all
            total = total * (ord(last) - ord(first) + 2) + min(
                max(code - ord(first) + 1, 0), ord(last) - ord(first) + 1
            )
        return total

    a = value(low)
    b = value(high) if high is not None else value("\x7f" * (start + _DIGITS))  # past the last
    if b - a < 2:
        return None
    middle, slots = (a + b) // 2, []
    for first, last in reversed(classes):
        middle, slot = divmod(middle, ord(last) - ord(first) + 2)
        slots.append(slot)
    chars = []
    for (first, last), slot in zip(classes, reversed(slots)):
        if slot == 0:  # below the class: the string ends here (`092` < `1` < `100`)
            break
        chars.append(chr(ord(first) + min(slot - 1, ord(last) - ord(first))))
    candidate = low[:start] + "".join(chars)
    if not low < candidate or (high is not None and not candidate < high):
        return None
    return candidate if candidate.startswith(prefix) else None
