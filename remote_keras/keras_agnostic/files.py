"""The files an iterator reads: their paths, what lists them, and moving to other lakeFS commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from remote_keras.storage import packed_paths
from remote_keras.storage.lakefs import LakeFSPin
from remote_keras.storage.listing import IMAGE_FORMATS, ListingScope
from remote_keras.storage.packed_paths import PrefixedPaths


def read_paths(it: Any) -> Sequence[str]:
    """The paths `it` reads, by index: a shared prefix and `filenames` when they are that.

    Args:
        it: The iterator, with `filenames` set (Keras's `__init__` or a listing).

    Returns:
        One path or URL per file; lakeFS refs pinned (`it._path_of`).
    """
    prefix = it._path_prefix
    if prefix is not None:
        paths: Sequence[str] = PrefixedPaths(prefix, it._filenames)
    else:
        paths = [it._path_of(name) for name in it._filenames]
        prefix = packed_paths.common_prefix(paths, it._filenames)
        if prefix is not None:
            paths = PrefixedPaths(prefix, it._filenames)
    it._known_paths = {}
    return paths


def listing_scope(it: Any) -> ListingScope:
    """What `it`'s listings and row checks read through, and share.

    Args:
        it: The iterator (Keras's `image_data_generator`, `subset` and
            `white_list_formats` where set).

    Returns:
        The engine's `ListingScope` for the iterator's folder.
    """
    pools = it._local.pools
    return it.engine.listing_scope(
        directory=it.directory,
        generator=getattr(it, "image_data_generator", None),
        subset=getattr(it, "subset", None),
        formats=getattr(it, "white_list_formats", IMAGE_FORMATS),
        checks=lambda: pools.get("fetch"),
    )


def repin(it: Any, pins: list[LakeFSPin]) -> None:
    """Makes `it` read at `pins`' commits where it pinned the same refs elsewhere.

    Args:
        it: The iterator.
        pins: The commits to read at (a backup's).
    """
    pinner = it.engine.pinner
    moved = [
        pin for pin in pins
        if (found := pinner.pins.get((pin.repository, pin.ref))) is not None
        and found.commit_id != pin.commit_id
    ]  # fmt: skip
    if not moved:
        return
    for pin in moved:
        pinner.repin(pin)
    with it.lock:
        it._clock.kept.clear()  # read at the other commit
        it._local.prefetcher.clear()
    it._reread_at_pins()
    with it.lock:
        it._planner.forget()  # the orders of the other commit's file list
