"""Loaders read a path into bytes; `pipeline.decoding.decode_image` makes them an image.

A loader is any callable `path -> bytes | file-like | PIL.Image.Image | numpy.ndarray`
(`protocol`). The default `FsspecLoader` also offers `load_many`, so that an
async backend (s3fs, gcsfs, adlfs, HTTP) keeps a batch's requests in flight
together on fsspec's event loop; `ObstoreLoader` reads S3, GCS and Azure
through the Rust `obstore` client, one blocking call per file.
"""

from __future__ import annotations

from remote_keras.storage.loaders.auto import choose_loader
from remote_keras.storage.loaders.checked_reads import register_checked_reader
from remote_keras.storage.loaders.fetched import CheckedReader, Fetched
from remote_keras.storage.loaders.fsspec_loader import FsspecLoader
from remote_keras.storage.loaders.obstore_loader import ObstoreLoader
from remote_keras.storage.loaders.protocol import (
    BatchLoader,
    CheckedBatchLoader,
    CheckedLoader,
    ClientSettings,
    Loader,
    LoaderOutput,
)

__all__ = [
    "LOADERS",
    "LOADER_NAMES",
    "BatchLoader",
    "CheckedBatchLoader",
    "CheckedLoader",
    "CheckedReader",
    "ClientSettings",
    "Fetched",
    "FsspecLoader",
    "Loader",
    "LoaderOutput",
    "ObstoreLoader",
    "choose_loader",
    "make_loader",
    "register_checked_reader",
]

LOADERS: dict[str, type[FsspecLoader] | type[ObstoreLoader]] = {
    "fsspec": FsspecLoader,
    "obstore": ObstoreLoader,
}
# Names `loader=` accepts: the loaders above, and "auto" (the default), which picks one per
# iterator from what it reads (`choose_loader`).
LOADER_NAMES = ("auto", *LOADERS)


def make_loader(loader: Loader | str | None, settings: ClientSettings) -> Loader:
    """Returns `loader` itself, or builds the named one (`"fsspec"`, `"obstore"`).

    `"auto"` builds the fsspec loader here; iterators then call
    `choose_loader` once they know what they read.

    Args:
        loader: A callable, a name in `LOADER_NAMES`, or `None` (`"auto"`).
        settings: What a named loader's clients are made with (`ClientSettings`).

    Raises:
        TypeError: `loader` is neither callable nor a known name.
    """
    if loader is None or loader == "auto":
        return FsspecLoader.from_settings(settings)
    if isinstance(loader, str) and loader in LOADERS:
        return LOADERS[loader].from_settings(settings)
    if callable(loader):
        return loader
    raise TypeError(
        "`loader` must be a callable taking a path and returning bytes, a file-like object, "
        f"a PIL image or a numpy array, or one of {sorted(LOADER_NAMES)}. "
        f"Received: loader={loader!r}"
    )
