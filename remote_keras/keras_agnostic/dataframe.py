"""`DataFrameCore`: Keras's `DataFrameIterator`, over images named in a dataframe, local or remote.

Each front subclasses it together with its Keras's own `DataFrameIterator`.
"""

from __future__ import annotations

import os
from typing import Any, cast

from typing_extensions import Unpack

from remote_keras import errors
from remote_keras.keras_agnostic import files, iterator_setup
from remote_keras.keras_agnostic.batch_core import RemoteBatchCore
from remote_keras.pipeline.options import LoaderOptions, LoaderOverrides, keras_arguments
from remote_keras.storage import data_versions, listing, locations, saving
from remote_keras.storage.packed_paths import PrefixedPaths


class DataFrameCore(RemoteBatchCore):
    """What both fronts' `DataFrameIterator` add to Keras's: URLs, tables, remote validation."""

    table_url: str | None = None

    def __init__(
        self,
        dataframe,
        directory=None,
        image_data_generator=None,
        x_col="filename",
        y_col="class",
        weight_col=None,
        target_size=(256, 256),
        color_mode="rgb",
        classes=None,
        class_mode="categorical",
        batch_size=32,
        shuffle=True,
        seed=None,
        data_format="channels_last",
        save_to_dir=None,
        save_prefix="",
        save_format="png",
        subset=None,
        interpolation="nearest",
        keep_aspect_ratio=False,
        dtype="float32",
        validate_filenames=True,
        *,
        options: LoaderOptions | None = None,
        **overrides: Unpack[LoaderOverrides],
    ):
        arguments = keras_arguments(locals(), "dataframe")
        saving.check_save_prefix(save_to_dir, save_prefix)
        iterator_setup.start(self, options, overrides)
        if isinstance(dataframe, (str, os.PathLike)):
            dataframe = self._read_table(os.fspath(dataframe))
        check_path_column(dataframe, x_col)
        # Keras's `DataFrameIterator`, next in the MRO
        cast(Any, super()).__init__(dataframe, **arguments)
        self._finish_init()

    def _read_table(self, url: str):
        """Reads the table at `url`, a `lakefs://` one at its ref's pinned commit."""
        self.table_url = self.engine.pin(url)
        self._ensure_process()
        with errors.reading(self.table_url):
            data = self.engine.fetcher.fetch([self.table_url], self._local.pools.get("fetch"))[0]
        if isinstance(data, BaseException):
            raise data
        return data_versions.read_table_bytes(self.table_url, bytes(data))

    def _path_of(self, filename: str) -> str:
        """The path or URL read for a row: `..` resolved (`listing.row_url`), lakeFS pinned."""
        path = self._known_paths.get(filename)
        if path is None:
            url = listing.row_url(self.directory, filename)
            path = self.engine.pin(url or locations.join(self.directory, filename))
        return path

    def _filter_valid_filepaths(self, df, x_col):
        """Keeps rows whose file exists, listing remote prefixes instead of one request per row.

        Rows that leave a URL `directory` (`..`), climb above their bucket or
        name a folder are invalid, like rows whose file does not exist.
        """
        names = df[x_col].tolist()
        urls = (listing.row_url(self.directory, name) for name in names)
        if not any(locations.is_url(url or "://") for url in urls):
            return cast(Any, super())._filter_valid_filepaths(df, x_col)
        paths = listing.row_urls(self.directory, names, self.engine.pin)
        if isinstance(paths, PrefixedPaths):  # every row in `directory`, as a listed folder's
            self._path_prefix = paths.prefix
        else:
            self._known_paths = {n: p for n, p in zip(names, paths) if p is not None}
        return df[listing.valid_rows(files.listing_scope(self), paths, x_col)]


def check_path_column(df: Any, x_col: str) -> None:
    """Raises `InvalidRowsError` naming rows whose path is NaN, empty or not a string."""
    if x_col not in df.columns:
        return  # Keras raises its own KeyError
    bad = [(i, v) for i, v in df[x_col].items() if not isinstance(v, str) or not v.strip()]
    if bad:
        shown = ", ".join(f"{i!r}: {v!r}" for i, v in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise errors.InvalidRowsError(
            f'Column x_col="{x_col}" must hold non-empty strings (paths or URLs). '
            f"Received in {len(bad)} row(s): {shown}{more}",
            [i for i, _ in bad],
        )
