"""`GeneratorCore`: Keras's `ImageDataGenerator`, `flow_from_*` building remote-aware iterators.

Each front subclasses it together with its Keras's own `ImageDataGenerator`, naming its
iterator classes (`dataframe_iterator`, `directory_iterator`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from typing_extensions import Unpack

from remote_keras.pipeline.options import LoaderOptions, LoaderOverrides, keras_arguments, split

_DEPRECATED_DATAFRAME_KWARGS = {
    "has_ext": "`has_ext` is deprecated: filenames in the dataframe must match the stored "
    "names exactly.",
    "sort": "`sort` is deprecated: with `shuffle=False` batches follow the dataframe order.",
    "drop_duplicates": "`drop_duplicates` is deprecated: call `DataFrame.drop_duplicates` "
    "yourself.",
}


class GeneratorArguments(LoaderOverrides, total=False):
    """The generator's keyword arguments: Keras's `ImageDataGenerator`'s, and `LoaderOverrides`."""

    featurewise_center: bool
    samplewise_center: bool
    featurewise_std_normalization: bool
    samplewise_std_normalization: bool
    zca_whitening: bool
    zca_epsilon: float
    rotation_range: float
    width_shift_range: float | Sequence[float]
    height_shift_range: float | Sequence[float]
    brightness_range: Sequence[float] | None
    shear_range: float
    zoom_range: float | Sequence[float]
    channel_shift_range: float
    fill_mode: str
    cval: float
    horizontal_flip: bool
    vertical_flip: bool
    rescale: float | None
    preprocessing_function: Callable[..., Any] | None
    data_format: str | None
    validation_split: float
    interpolation_order: int
    dtype: Any


class GeneratorCore:
    """What both fronts' `ImageDataGenerator` add to Keras's: options and `flow_from_*`."""

    # Set by each front: its `DataFrameIterator` and `DirectoryIterator` classes.
    dataframe_iterator: Any
    directory_iterator: Any
    data_format: str
    dtype: str

    def __init__(
        self,
        *args: Any,
        options: LoaderOptions | None = None,
        **kwargs: Unpack[GeneratorArguments],
    ) -> None:
        ours, keras_kwargs = split(dict(kwargs))
        self.options = (options or LoaderOptions()).merged(ours)
        super().__init__(*args, **keras_kwargs)

    @property
    def loader(self) -> Any:
        """The default `loader` of the iterators this generator builds."""
        return self.options.loader

    @property
    def storage_options(self) -> Any:
        """The default `storage_options` of the iterators this generator builds."""
        return self.options.storage_options

    def __repr__(self) -> str:  # storage options hold secrets: never shown
        return f"<{type(self).__name__} loader={self.options.loader!r}>"

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
        **overrides: Unpack[LoaderOverrides],
    ) -> Any:
        """Iterates over a folder with one sub-folder per class, local or remote.

        Args are those of Keras's `flow_from_directory`; `directory` may be a
        URL such as `"s3://bucket/train"` or `"lakefs://repo/main/train"`.
        Keyword arguments named like `LoaderOptions` fields override the
        generator's options for this iterator.

        Returns:
            A `remote_keras.DirectoryIterator` yielding `(x, y)` batches.
        """
        arguments = keras_arguments(locals(), "directory")
        return self.directory_iterator(
            directory,
            self,
            **arguments,
            data_format=self.data_format,
            dtype=self.dtype,
            options=self.options.merged(overrides),
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
        **overrides: Unpack[LoaderOverrides],
    ) -> Any:
        """Iterates over images named in a dataframe, local or remote.

        Args are those of Keras's `flow_from_dataframe`; `directory` may be a
        URL prefix and `x_col` may hold full URLs (`s3://`, `gs://`, `az://`,
        `http(s)://`, `lakefs://`, `memory://`, chained `simplecache::s3://`).
        Keyword arguments named like `LoaderOptions` fields override the
        generator's options for this iterator. As in Keras, other keyword
        arguments are ignored (with a warning here), `keep_aspect_ratio`
        included.

        Returns:
            A `remote_keras.DataFrameIterator`.
        """
        arguments = keras_arguments(locals(), "dataframe", "directory")
        ours, ignored = split(dict(overrides))
        for name, message in _DEPRECATED_DATAFRAME_KWARGS.items():
            if name in ignored:
                warnings.warn(message, DeprecationWarning, stacklevel=2)
        unknown = sorted(set(ignored) - set(_DEPRECATED_DATAFRAME_KWARGS))
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
            arguments["class_mode"] = "raw"
        return self.dataframe_iterator(
            dataframe,
            directory,
            self,
            **arguments,
            data_format=self.data_format,
            dtype=self.dtype,
            options=self.options.merged(ours),
        )
