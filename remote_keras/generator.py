"""`ImageDataGenerator`: Keras's, with `flow_from_*` building remote-aware iterators."""

from __future__ import annotations

import warnings
from typing import Any

from keras.src.legacy.preprocessing import image as keras_image

from remote_keras import options
from remote_keras.iterators import (
    DEFAULT_CACHE_MAX_BYTES,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_PREFETCH_BATCHES,
    DEFAULT_WORKERS,
    DataFrameIterator,
    DirectoryIterator,
)
from remote_keras.loaders import Loader
from remote_keras.retry import RetryPolicy

_DEPRECATED_DATAFRAME_KWARGS = {
    "has_ext": "`has_ext` is deprecated: filenames in the dataframe must match the stored "
    "names exactly.",
    "sort": "`sort` is deprecated: with `shuffle=False` batches follow the dataframe order.",
    "drop_duplicates": "`drop_duplicates` is deprecated: call `DataFrame.drop_duplicates` "
    "yourself.",
}


class ImageDataGenerator(keras_image.ImageDataGenerator):
    """Keras's `ImageDataGenerator` that reads images from local disk or object storage.

    Takes every argument of `keras.preprocessing.image.ImageDataGenerator`
    (augmentation, normalization, `validation_split`, ...) unchanged, plus the
    keyword-only defaults below for the iterators that `flow_from_dataframe`
    and `flow_from_directory` build; each can be overridden per call.

    Args:
        *args: Positional arguments of Keras's `ImageDataGenerator`.
        loader: Callable `path -> bytes | file-like | PIL.Image | ndarray`
            doing all reads, or `"fsspec"` (the default) or `"obstore"`.
        storage_options: Passed to fsspec (credentials, `endpoint_url`, ...).
        workers: Threads Keras's `fit` uses to request batches. Defaults to 4.
        prefetch_batches: Batches built ahead when read in order. Defaults to 4.
        max_in_flight: Requests in flight for loaders without `load_many`.
            Defaults to 128.
        decode_workers: Decoding threads; defaults to one per core.
        jpeg_draft: Decode large JPEGs at reduced scale; faster, but pixels
            differ from stock Keras's. Defaults to `False`.
        cache_dir: Local folder caching fetched files for later epochs; off
            when `None` (the default).
        cache_max_bytes: Size limit of `cache_dir`. Defaults to 10 GiB.
        retries: `RetryPolicy` or attempts per file for transient failures.
        on_error: `"raise"` (default) or `"skip"` unreadable samples.
        progress: Progress bars for listings and checks over 2 seconds.
            Defaults to `True`; `TQDM_DISABLE=1` also turns them off.
        **kwargs: Keyword arguments of Keras's `ImageDataGenerator`.

    Example:

    ```python
    from remote_keras import ImageDataGenerator  # the only changed line

    gen = ImageDataGenerator(rescale=1 / 255, validation_split=0.2)
    train = gen.flow_from_directory("s3://bucket/train", subset="training")
    model.fit(train, epochs=10)
    ```
    """

    def __init__(
        self,
        *args: Any,
        loader: Loader | str | None = None,
        storage_options: dict[str, Any] | None = None,
        workers: int = DEFAULT_WORKERS,
        prefetch_batches: int = DEFAULT_PREFETCH_BATCHES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        decode_workers: int | None = None,
        jpeg_draft: bool = False,
        cache_dir: str | None = None,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
        retries: RetryPolicy | int | None = None,
        on_error: str = "raise",
        progress: bool = True,
        **kwargs: Any,
    ) -> None:
        options.check(
            loader=loader,
            storage_options=storage_options,
            workers=workers,
            prefetch_batches=prefetch_batches,
            max_in_flight=max_in_flight,
            decode_workers=decode_workers,
            cache_dir=cache_dir,
            cache_max_bytes=cache_max_bytes,
            retries=retries,
            on_error=on_error,
        )
        super().__init__(*args, **kwargs)
        self.loader = loader
        self.storage_options = storage_options
        self._iterator_defaults = dict(
            workers=workers,
            prefetch_batches=prefetch_batches,
            max_in_flight=max_in_flight,
            decode_workers=decode_workers,
            jpeg_draft=jpeg_draft,
            cache_dir=cache_dir,
            cache_max_bytes=cache_max_bytes,
            retries=retries,
            on_error=on_error,
            progress=progress,
        )

    def __repr__(self) -> str:  # storage options hold secrets: never shown
        return f"<{type(self).__name__} loader={self.loader or 'fsspec'!r}>"

    def _iterator_options(self, **overrides: Any) -> dict[str, Any]:
        options: dict[str, Any] = dict(
            self._iterator_defaults, loader=self.loader, storage_options=self.storage_options
        )
        options.update({k: v for k, v in overrides.items() if v is not None})
        return options

    def flow_from_directory(
        self,
        directory,
        target_size=(256, 256),
        color_mode="rgb",
        classes=None,
        class_mode="categorical",
        batch_size=32,
        shuffle=True,
        seed=None,
        save_to_dir=None,
        save_prefix="",
        save_format="png",
        follow_links=False,
        subset=None,
        interpolation="nearest",
        keep_aspect_ratio=False,
        *,
        loader: Loader | str | None = None,
        storage_options: dict[str, Any] | None = None,
        workers: int | None = None,
        use_multiprocessing: bool = False,
        max_queue_size: int = 10,
        prefetch_batches: int | None = None,
        max_in_flight: int | None = None,
        decode_workers: int | None = None,
        jpeg_draft: bool | None = None,
        cache_dir: str | None = None,
        cache_max_bytes: int | None = None,
        retries: RetryPolicy | int | None = None,
        on_error: str | None = None,
        progress: bool | None = None,
        num_shards: int | None = None,
        shard_index: int | None = None,
        shard_remainder: str = "pad",
    ) -> DirectoryIterator:
        """Iterates over a folder with one sub-folder per class, local or remote.

        Args are those of Keras's `flow_from_directory`; `directory` may be a
        URL such as `"s3://bucket/train"` or `"lakefs://repo/main/train"`.
        The keyword-only arguments override the generator's defaults;
        `num_shards`, `shard_index` and `shard_remainder` split the data
        between training workers (see `remote_keras.DataFrameIterator`).

        Returns:
            A `remote_keras.DirectoryIterator` yielding `(x, y)` batches.
        """
        return DirectoryIterator(
            directory,
            self,
            target_size=target_size,
            color_mode=color_mode,
            keep_aspect_ratio=keep_aspect_ratio,
            classes=classes,
            class_mode=class_mode,
            data_format=self.data_format,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            save_to_dir=save_to_dir,
            save_prefix=save_prefix,
            save_format=save_format,
            follow_links=follow_links,
            subset=subset,
            interpolation=interpolation,
            dtype=self.dtype,
            use_multiprocessing=use_multiprocessing,
            max_queue_size=max_queue_size,
            num_shards=num_shards,
            shard_index=shard_index,
            shard_remainder=shard_remainder,
            **self._iterator_options(
                loader=loader,
                storage_options=storage_options,
                workers=workers,
                prefetch_batches=prefetch_batches,
                max_in_flight=max_in_flight,
                decode_workers=decode_workers,
                jpeg_draft=jpeg_draft,
                cache_dir=cache_dir,
                cache_max_bytes=cache_max_bytes,
                retries=retries,
                on_error=on_error,
                progress=progress,
            ),
        )

    def flow_from_dataframe(
        self,
        dataframe,
        directory=None,
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
        save_to_dir=None,
        save_prefix="",
        save_format="png",
        subset=None,
        interpolation="nearest",
        validate_filenames=True,
        *,
        loader: Loader | str | None = None,
        storage_options: dict[str, Any] | None = None,
        workers: int | None = None,
        use_multiprocessing: bool = False,
        max_queue_size: int = 10,
        prefetch_batches: int | None = None,
        max_in_flight: int | None = None,
        decode_workers: int | None = None,
        jpeg_draft: bool | None = None,
        cache_dir: str | None = None,
        cache_max_bytes: int | None = None,
        retries: RetryPolicy | int | None = None,
        on_error: str | None = None,
        progress: bool | None = None,
        num_shards: int | None = None,
        shard_index: int | None = None,
        shard_remainder: str = "pad",
        **kwargs: Any,
    ) -> DataFrameIterator:
        """Iterates over images named in a dataframe, local or remote.

        Args are those of Keras's `flow_from_dataframe`; `directory` may be a
        URL prefix and `x_col` may hold full URLs (`s3://`, `gs://`, `az://`,
        `http(s)://`, `lakefs://`, `memory://`, chained `simplecache::s3://`).
        As in Keras, other keyword arguments are ignored (with a warning
        here), `keep_aspect_ratio` included. `num_shards`, `shard_index` and
        `shard_remainder` split the data between training workers (see
        `remote_keras.DataFrameIterator`).

        Returns:
            A `remote_keras.DataFrameIterator`.
        """
        for name, message in _DEPRECATED_DATAFRAME_KWARGS.items():
            if name in kwargs:
                warnings.warn(message, DeprecationWarning, stacklevel=2)
        unknown = sorted(set(kwargs) - set(_DEPRECATED_DATAFRAME_KWARGS))
        if unknown:
            warnings.warn(
                f"flow_from_dataframe ignores these arguments, as Keras does: {unknown}",
                UserWarning,
                stacklevel=2,
            )
        if class_mode == "other":
            warnings.warn(
                '`class_mode="other"` is deprecated; use `class_mode="raw"`.',
                DeprecationWarning,
                stacklevel=2,
            )
            class_mode = "raw"
        return DataFrameIterator(
            dataframe,
            directory,
            self,
            x_col=x_col,
            y_col=y_col,
            weight_col=weight_col,
            target_size=target_size,
            color_mode=color_mode,
            classes=classes,
            class_mode=class_mode,
            data_format=self.data_format,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            save_to_dir=save_to_dir,
            save_prefix=save_prefix,
            save_format=save_format,
            subset=subset,
            interpolation=interpolation,
            validate_filenames=validate_filenames,
            dtype=self.dtype,
            use_multiprocessing=use_multiprocessing,
            max_queue_size=max_queue_size,
            num_shards=num_shards,
            shard_index=shard_index,
            shard_remainder=shard_remainder,
            **self._iterator_options(
                loader=loader,
                storage_options=storage_options,
                workers=workers,
                prefetch_batches=prefetch_batches,
                max_in_flight=max_in_flight,
                decode_workers=decode_workers,
                jpeg_draft=jpeg_draft,
                cache_dir=cache_dir,
                cache_max_bytes=cache_max_bytes,
                retries=retries,
                on_error=on_error,
                progress=progress,
            ),
        )
