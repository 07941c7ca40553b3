"""`DataFrameIterator`: Keras 3's, over images named in a dataframe, local or remote."""

from __future__ import annotations

from remote_keras.keras3.iterators.base import RemoteBatchMixin
from remote_keras.keras3.keras_src import legacy_image
from remote_keras.keras_agnostic.dataframe import DataFrameCore


class DataFrameIterator(DataFrameCore, RemoteBatchMixin, legacy_image.DataFrameIterator):
    """Iterator over images named in a pandas dataframe, local or remote.

    Takes every argument of Keras's `DataFrameIterator`, with the same
    defaults, plus remote_keras's keyword arguments (the fields of
    `remote_keras.pipeline.options.LoaderOptions`: `loader`, `storage_options`,
    `workers`, `cache_dir`, `retries`, `on_error`, `num_shards`, ...).
    `directory` may be a URL prefix (`"s3://bucket/images"`) and `x_col` may
    hold full URLs.

    `dataframe` may also be the path or URL of a CSV or Parquet table
    (`"lakefs://repo/main/labels.csv"`): it is read once, here, and a
    `lakefs://` table at the commit its ref resolves to, the same pin the
    images of that ref are read at, so a staged or later change of the
    table changes nothing. `table_url` is the URL read (pinned), and
    `write_data_version` records it with the images.

    Args:
        options: A `LoaderOptions` to start from; keyword arguments named
            like its fields override it.
    """
