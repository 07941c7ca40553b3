"""`ReadEngine`: the read machinery of one dataset, assembled in this one place.

Every way in (the Keras 3 and Keras 2 iterators, `image_dataset_from_directory`
and `BatchReader`) reads through one: it owns the filesystems, the loader (and
why it was chosen), the disk cache, the `Fetcher` with its retry policy and
checksum checks, the lakeFS pins, the running statistics and the record of
skipped samples, all built from one `LoaderOptions`. Keras-free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

from remote_keras.pipeline.fetching import Fetcher
from remote_keras.pipeline.options import LoaderOptions
from remote_keras.pipeline.skips import SkipLog
from remote_keras.pipeline.stats import StatsRecorder
from remote_keras.storage import locations
from remote_keras.storage.cache import DiskCache
from remote_keras.storage.lakefs import Pinner, presign
from remote_keras.storage.listing import IMAGE_FORMATS, ListingScope
from remote_keras.storage.loaders import ClientSettings, Loader, choose_loader, make_loader


class ReadEngine:
    """Reads one dataset's files: loader, cache, retries, checksums, pins, stats and skips.

    Args:
        options: The package's options (already merged with a front's
            keyword arguments).
        first_path: A path or URL the dataset reads, from which
            `loader="auto"` chooses; `None` when not known yet (call
            `choose_loader` once it is).
    """

    def __init__(self, options: LoaderOptions, first_path: str | None = None) -> None:
        self.options = options
        self.filesystems = locations.FileSystems(options.storage_options)
        self.pinner = Pinner(self.filesystems)
        # What every built-in loader's clients are made with, as one object.
        self.client_settings = ClientSettings(
            options.storage_options or {}, options.retry_policy.timeout_s, options.pre_sign
        )
        self.loader: Loader = make_loader(options.loader, self.client_settings)
        self.loader_choice = "given" if callable(options.loader) else str(options.loader)
        cache = options.cache_dir
        self.cache = DiskCache(cache, options.cache_max_bytes) if cache is not None else None
        self.stats = StatsRecorder()
        self.fetcher = Fetcher(
            self.loader, options.retry_policy, self.cache, self.stats, options.verify_checksums
        )
        self.skips = SkipLog()
        if first_path is not None:
            self.choose_loader(first_path)

    def choose_loader(self, first_path: str) -> None:
        """With `loader="auto"`, picks the loader for what `first_path` names (else nothing)."""
        if self.options.loader != "auto":
            return
        self.loader, self.loader_choice = choose_loader(first_path, self.client_settings)
        self.fetcher.loader = self.loader

    def pin(self, url: str) -> str:
        """`url` at its lakeFS commit (other URLs and paths unchanged)."""
        return self.pinner.pin(url)

    def listing_scope(
        self,
        directory: Any = None,
        generator: Any = None,
        subset: str | None = None,
        formats: Sequence[str] = IMAGE_FORMATS,
        checks: Callable[[], Executor] | None = None,
    ) -> ListingScope:
        """What this dataset's listings read through (see `storage.listing.ListingScope`).

        Args:
            directory: The folder dataframe rows are relative to.
            generator: The `ImageDataGenerator` whose other subset may reuse
                a listing, or `None`.
            subset: `"training"`, `"validation"` or `None`.
            formats: The file extensions kept.
            checks: Gives the threads for a custom loader's `exists`.
        """
        return ListingScope(
            self.options,
            self.filesystems,
            self.pin,
            self.loader,
            tuple(formats),
            generator,
            subset,
            directory,
            checks,
        )

    @property
    def lakefs_pins(self) -> list[Any]:
        """The lakeFS commits the files are read at, in the order first pinned."""
        return list(self.pinner.pins.values())

    def expect(self, urls: Sequence[str]) -> None:
        """Names the URLs that will be read (lakeFS presigning lists their addresses ahead)."""
        presign.expect(self.loader, urls)

    def rest(self) -> None:
        """Stops lakeFS's background listing between passes (the next read restarts it)."""
        presign.close(self.loader)

    def release_clients(self) -> None:
        """Closes the loader's connections (a later read opens new ones), unless it was given."""
        close = getattr(self.loader, "close", None)
        if self.loader_choice != "given" and callable(close):
            close()

    def close(self) -> None:
        """Ends lakeFS's background listing and closes the loader's connections."""
        self.rest()
        self.release_clients()

    def __repr__(self) -> str:
        return f"<ReadEngine loader={self.loader!r}>"


# What the engine's parts are, for the attributes of what reads through it.
_ENGINE_ATTRIBUTES = {
    "loader": "The loader reading the files (`loader_choice` says which and why).",
    "loader_choice": 'Which loader reads the files and why (`"given"`: a callable of your own).',
    "cache": "The disk cache of fetched bytes (a `DiskCache`), or `None`.",
}


def engine_attribute(name: str) -> Any:
    """A read-only property that is the engine's part `name` (for iterators and `BatchReader`).

    Args:
        name: `"loader"`, `"loader_choice"` or `"cache"`.

    Returns:
        A `property` reading `self.engine.<name>`, documented.
    """
    return property(lambda self: getattr(self.engine, name), doc=_ENGINE_ATTRIBUTES[name])
