"""`FilesMixin`: the files an iterator reads, their paths and lakeFS pins, and what reads them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from remote_keras.pipeline.engine import EngineAttributes, ReadEngine
from remote_keras.pipeline.epochs import EpochPlanner
from remote_keras.pipeline.prefetch import Prefetcher
from remote_keras.storage import locations, packed_paths
from remote_keras.storage.lakefs import LakeFSPin
from remote_keras.storage.listing import IMAGE_FORMATS, ListingScope
from remote_keras.storage.packed_paths import PrefixedPaths


class FilesMixin(EngineAttributes):
    """Keras's `filenames` and `filepaths`, the paths read, and the `ReadEngine`'s parts."""

    # Set by `RemoteBatchCore` and Keras's `__init__`.
    engine: ReadEngine
    directory: Any
    lock: Any
    _clock: Any
    _planner: EpochPlanner
    _prefetcher: Prefetcher
    _filenames: Sequence[str]
    _filepaths: Sequence[str]
    _known_paths: dict[str, str]
    _path_prefix: str | None

    def _listing_scope(self) -> ListingScope:
        """What this iterator's listings and row checks read through, and share."""
        pools: Any = getattr(self, "_pools", None)
        return self.engine.listing_scope(
            directory=self.directory,
            generator=getattr(self, "image_data_generator", None),
            subset=getattr(self, "subset", None),
            formats=getattr(self, "white_list_formats", IMAGE_FORMATS),
            checks=(lambda: pools.get("fetch")) if pools is not None else None,
        )

    @property
    def filesystems(self) -> locations.FileSystems:
        """The fsspec filesystems listings and writes go through."""
        return self.engine.filesystems

    @property
    def filenames(self) -> list[str]:
        """Every file's name relative to `directory`, as Keras's attribute (a list).

        A listed folder's names are held packed (`packed_paths.PackedNames`); this
        list is made at the first access and kept.
        """
        names = self._filenames
        if not isinstance(names, list):
            names = self._filenames = list(names)
        return names

    @filenames.setter
    def filenames(self, names: Sequence[str]) -> None:
        self._filenames = names

    @property
    def filepaths(self) -> list[str]:
        """Every file's full path or URL, as Keras's attribute: a new list on each access.

        The iterator holds them compactly (a shared prefix and `filenames`).
        """
        return list(self._filepaths)

    def _read_paths(self) -> Sequence[str]:
        """The paths read, by index: a shared prefix and `filenames` when they are that."""
        prefix = self._path_prefix
        if prefix is not None:
            paths: Sequence[str] = PrefixedPaths(prefix, self._filenames)
        else:
            paths = [self._path_of(name) for name in self._filenames]
            prefix = packed_paths.common_prefix(paths, self._filenames)
            if prefix is not None:
                paths = PrefixedPaths(prefix, self._filenames)
        self._known_paths = {}
        return paths

    def _path_of(self, filename: str) -> str:
        """The path or URL read for `filename`; lakeFS refs pinned to their commit."""
        path = self._known_paths.get(filename)
        if path is None:
            path = self.engine.pin(locations.join(self.directory, filename))
        return path

    def _repin(self, pins: list[LakeFSPin]) -> None:
        """Reads at `pins`' commits where this iterator pinned the same refs elsewhere."""
        moved = [
            pin for pin in pins
            if (found := self.engine.pinner.pins.get((pin.repository, pin.ref))) is not None
            and found.commit_id != pin.commit_id
        ]  # fmt: skip
        if not moved:
            return
        for pin in moved:
            self.engine.pinner.repin(pin)
        with self.lock:
            self._clock.kept.clear()  # read at the other commit
            self._prefetcher.clear()
        self._reread_at_pins()
        with self.lock:
            self._planner.forget()  # the orders of the other commit's file list

    def _reread_at_pins(self) -> None:
        """Recomputes the paths read after the engine's pins changed (subclasses may list again)."""
        self._known_paths = {}
        self._path_prefix = None
        self._filepaths = self._read_paths()
