"""`image_dataset_from_directory`: Keras's function, reading from local folders and URLs.

Same signature, defaults, messages, file order, shuffling, split and pixels as
`keras.utils.image_dataset_from_directory` (Keras 3.8 to 3.15), plus the
package's options as keywords. The folder is listed once (`dataset_index`), the
files are fetched ahead of the consumer through the package's loaders
(concurrent, retried, cached, checksummed) and decoded by TensorFlow with
Keras's ops (`dataset_pipeline`).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import keras
import numpy as np
from typing_extensions import Unpack

from remote_keras.keras3 import dataset_index, dataset_pipeline
from remote_keras.keras3.keras_src import print_msg
from remote_keras.pipeline import sharding
from remote_keras.pipeline.options import LoaderOptions, LoaderOverrides
from remote_keras.storage import locations

LABEL_MODES = ("int", "categorical", "binary", None)
COLOR_MODES = {"grayscale": 1, "rgb": 3, "rgba": 4}
INTERPOLATIONS = (
    "bilinear",
    "nearest",
    "bicubic",
    "area",
    "lanczos3",
    "lanczos5",
    "gaussian",
    "mitchellcubic",
)


def image_dataset_from_directory(
    directory: str | os.PathLike[str],
    labels: Any = "inferred",
    label_mode: str | None = "int",
    class_names: list[str] | None = None,
    color_mode: str = "rgb",
    batch_size: int | None = 32,
    image_size: int | tuple[int, int] = (256, 256),
    shuffle: bool = True,
    seed: int | None = None,
    validation_split: float | None = None,
    subset: str | None = None,
    interpolation: str = "bilinear",
    follow_links: bool = False,
    crop_to_aspect_ratio: bool = False,
    pad_to_aspect_ratio: bool = False,
    data_format: str | None = None,
    format: str = "tf",
    verbose: bool = True,
    *,
    options: LoaderOptions | None = None,
    **overrides: Unpack[LoaderOverrides],
) -> Any:
    """Generates a `tf.data.Dataset` from image files in a folder, local or remote.

    Keras's `keras.utils.image_dataset_from_directory`, also for `s3://`,
    `gs://`, `az://`, `http(s)://`, `lakefs://` and other fsspec URLs. With
    `labels="inferred"`, each sub-folder of `directory` is a class (sorted by
    name; names starting with `.` left out) and every `.bmp`, `.gif`,
    `.jpeg`, `.jpg` or `.png` below it is a sample. The files, their order,
    the shuffling for a given `seed`, the `validation_split` subsets, the
    messages and the batches are Keras's own (images decoded and resized with
    the same TensorFlow ops), also on Keras's other backends.

    Files are fetched ahead of training through the package's loader
    (`prefetch_batches` chunks of `batch_size` files, each chunk's requests
    concurrent), retried, cached (`cache_dir`) and checked (`verify_checksums`);
    `lakefs://` refs are read at the commit they point to when the dataset is
    made. With `on_error="skip"`, an unreadable or undecodable file is left
    out of the stream (later samples fill the batch), named in a warning and
    listed in `dataset.skipped`.

    Args:
        directory: Local folder or URL of the images.
        labels: `"inferred"` (from the sub-folders), `None` (images only), or
            a list or tuple of integer labels, one per image in the order of
            the sorted file paths.
        label_mode: `"int"` (`int32`), `"categorical"` (one-hot `float32`),
            `"binary"` (`float32` of shape `(1,)`; exactly 2 classes) or
            `None` (no labels).
        class_names: With `labels="inferred"`, the class sub-folders to read,
            in label order.
        color_mode: `"grayscale"`, `"rgb"` or `"rgba"` (1, 3 or 4 channels).
        batch_size: Samples per batch; `None` for single samples.
        image_size: `(height, width)` (or one integer) images are resized to.
        shuffle: Whether to shuffle (with `seed`), once over all files and
            then every epoch with a buffer of `8 * batch_size` samples.
        seed: Seed of the shuffles; `None` draws one from `np.random`.
        validation_split: Fraction of the files kept for validation.
        subset: `"training"`, `"validation"` or `"both"` (returns a list of
            the two datasets); needs `validation_split`.
        interpolation: `"bilinear"`, `"nearest"`, `"bicubic"`, `"area"`,
            `"lanczos3"`, `"lanczos5"`, `"gaussian"` or `"mitchellcubic"`.
        follow_links: Walk into symbolic links to folders. An object store has
            no links: on a URL, `True` reads what `False` reads.
        crop_to_aspect_ratio: Resize the largest central window with the
            target's aspect ratio.
        pad_to_aspect_ratio: Resize the whole image and pad it with zeros to
            the target's aspect ratio.
        data_format: `"channels_last"` or `"channels_first"`; `None` for
            `keras.config.image_data_format()`.
        format: `"tf"` (the only format supported here).
        verbose: Print how many files and classes were found.
        options: A `LoaderOptions` to start from.
        **overrides: The package's options (`storage_options`, `loader`,
            `cache_dir`, `retries`, `verify_checksums`, `on_error`,
            `prefetch_batches`, `max_in_flight`, `num_shards`/`shard_index`,
            ...; see `LoaderOptions`). With `num_shards` and `shard_index`,
            or a multi-process `keras.distribution` with
            `auto_shard_dataset=False`, each worker reads every
            `num_shards`-th file of the (shuffled, split) file list from
            `shard_index` on. `workers`, `max_queue_size` and
            `decode_workers` have no effect here (TensorFlow decodes);
            `use_multiprocessing=True` and `jpeg_draft=True` are refused.

    Returns:
        A `tf.data.Dataset` of `images` or `(images, labels)` batches, with
        `class_names`, `file_paths`, `skipped`, `subset`, `directory` and
        `lakefs_pins` attributes (`write_data_version` and
        `DataVersionCallback` accept it) and `skip_passes(count)`, which
        replays the shuffle of `count` passes without reading (a dataset made
        again with the same seed then continues the stream); a list of two
        with `subset="both"`.

    Raises:
        ValueError: an argument Keras's function refuses, no images, or an
            option this function does not support.
        FileNotFoundError: `directory` does not exist.
    """
    opts = (options or LoaderOptions()).merged(overrides)
    directory = os.fspath(directory)
    label_mode, labels, channels, size, interpolation = _checked(
        labels, label_mode, class_names, color_mode, image_size, interpolation, format
    )
    _check_split(validation_split, subset, shuffle, seed)
    shard, keras_split = _shard(opts)
    _check_options(opts)
    if keras_split > 1:
        warnings.warn(
            f"keras.distribution splits this dataset's batches among {keras_split} processes "
            f"after they are read (auto_shard_dataset=True): every process reads every file "
            f"and trains on 1/{keras_split} of them. For each process to read only its own "
            "files, pass DataParallel(auto_shard_dataset=False): the dataset then reads this "
            "process's share, in batches of `batch_size` per process.",
            stacklevel=2,
        )
    if max(shard.count, keras_split) > 1 and shuffle and seed is None:
        seed = 0  # every worker must draw the same permutation
        warnings.warn(
            f"Reading shard {shard.index} of {max(shard.count, keras_split)} with shuffle=True "
            "and no seed: using seed=0 so that all workers shuffle alike. Pass `seed=` to "
            "choose another.",
            stacklevel=2,
        )
    if seed is None:
        seed = int(np.random.randint(1_000_000))  # as Keras draws it, even without shuffling
    files = dataset_pipeline.RemoteFiles(directory, opts)
    read_from = files.pin(directory) if locations.is_url(directory) else directory
    paths, labels, names = _indexed(read_from, labels, class_names, follow_links, files, verbose)
    if label_mode == "binary" and len(names or ()) != 2:
        raise ValueError(
            'With label_mode="binary", there must be exactly 2 classes. '
            f"Received: class_names={names}"
        )
    data_format = _data_format(data_format)
    if shuffle:
        order = np.arange(len(paths))
        np.random.RandomState(seed).shuffle(order)  # the permutation Keras applies
        paths = [paths[i] for i in order]
        labels = None if labels is None else labels[order]
    decode_args = (
        size,
        channels,
        interpolation,
        data_format,
        crop_to_aspect_ratio,
        pad_to_aspect_ratio,
    )
    buffer = (batch_size * 8 if batch_size is not None else 1024) if shuffle else None
    made = []
    for part in ("training", "validation") if subset == "both" else (subset,):
        part_paths, part_labels = _split(paths, labels, validation_split, part)
        if not part_paths:
            what = f"{part} images" if subset == "both" else "images"
            raise ValueError(
                f"No {what} found in directory {directory!r}. "
                f"Allowed formats: {dataset_index.FORMATS}"
            )
        chosen = shard.select(np.arange(len(part_paths)))
        part_paths = [part_paths[i] for i in chosen]
        part_labels = None if part_labels is None else part_labels[chosen]
        shown = [_join(directory, rel) for rel in part_paths]
        urls = [_join(read_from, rel) for rel in part_paths]
        files.expect(urls)
        reader = dataset_pipeline.EpochReader(files, urls, shown, batch_size or 32)
        dataset = dataset_pipeline.build(
            reader,
            part_labels,
            label_mode,
            len(names) if names else 0,
            decode_args,
            batch_size,
            buffer if part != "validation" or subset != "both" else None,
            seed,
            batch_size_visible=keras_split > 1,
        )
        _describe(dataset, names, urls, files, reader, directory, part)
        made.append(dataset)
    return made if subset == "both" else made[0]


def _checked(
    labels: Any,
    label_mode: str | None,
    class_names: Any,
    color_mode: str,
    image_size: Any,
    interpolation: str,
    format: str,
) -> tuple[Any, ...]:
    """Keras's argument checks, in its order; returns the normalized arguments."""
    if labels not in ("inferred", None):
        if not isinstance(labels, (list, tuple)):
            raise ValueError(
                '`labels` argument should be "inferred" (from the sub-folders), None (images '
                "only), or a list/tuple of integer labels, one per image file in the folder. "
                f"Received: labels={labels!r}"
            )
        if class_names:
            raise ValueError(
                'You can only pass `class_names` if `labels="inferred"`. '
                f"Received: labels={labels!r}, class_names={class_names!r}"
            )
    if label_mode not in LABEL_MODES:
        raise ValueError(
            f"`label_mode` argument must be one of {LABEL_MODES}. "
            f"Received: label_mode={label_mode!r}"
        )
    if labels is None or label_mode is None:
        labels = label_mode = None
    if color_mode not in COLOR_MODES:
        raise ValueError(
            f"`color_mode` must be one of {sorted(COLOR_MODES)}. "
            f"Received: color_mode={color_mode!r}"
        )
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    elif not isinstance(image_size, (list, tuple)) or len(image_size) != 2:
        raise ValueError(
            f"`image_size` must be a tuple of 2 integers. Received: image_size={image_size!r}"
        )
    interpolation = interpolation.lower()
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"`interpolation` must be one of {INTERPOLATIONS}. "
            f"Received: interpolation={interpolation!r}"
        )
    if format != "tf":
        raise ValueError(
            'remote_keras.image_dataset_from_directory returns a tf.data.Dataset (format="tf"); '
            f"it does not support format={format!r}"
        )
    return label_mode, labels, COLOR_MODES[color_mode], tuple(image_size), interpolation


def _check_split(fraction: Any, subset: Any, shuffle: bool, seed: Any) -> None:
    """Keras's checks of `validation_split` and `subset`."""
    if fraction and not 0 < fraction < 1:
        raise ValueError(f"`validation_split` must be between 0 and 1. Received: {fraction!r}")
    if (fraction or subset) and not (fraction and subset):
        raise ValueError(
            "`validation_split` must be set (between 0 and 1) when `subset` is, and `subset` "
            f"when `validation_split` is. Received: validation_split={fraction!r}, "
            f"subset={subset!r}"
        )
    if subset not in ("training", "validation", "both", None):
        raise ValueError(
            f'`subset` must be either "training", "validation" or "both". Received: {subset!r}'
        )
    if fraction and shuffle and seed is None:
        raise ValueError(
            "With `validation_split` and shuffle=True you must provide a `seed`, so that the "
            "training and validation subsets do not overlap."
        )


def _check_options(opts: LoaderOptions) -> None:
    """Refuses what has no meaning for this function."""
    if opts.use_multiprocessing:
        raise ValueError(
            "use_multiprocessing=True does not apply to image_dataset_from_directory: "
            "TensorFlow decodes in its own threads."
        )
    if opts.jpeg_draft:
        raise ValueError(
            "jpeg_draft=True does not apply to image_dataset_from_directory: images are "
            "decoded by TensorFlow, as Keras's function decodes them."
        )


def _shard(opts: LoaderOptions) -> tuple[sharding.Shard, int]:
    """The files this process reads, and the processes Keras splits the read batches among.

    Explicit `num_shards`/`shard_index` win; otherwise a multi-process
    `keras.distribution` that does not split datasets itself
    (`auto_shard_dataset=False`: "the dataset is already sharded") gives this
    process's shard. `tf.distribute` strategies shard the dataset themselves.
    """
    keras_split = sharding.keras_dataset_split()
    if opts.num_shards is None and opts.shard_index is None:
        if keras_split > 1:
            return sharding.Shard(), keras_split
        return sharding.detect_keras_distribution(), 1
    shard = sharding.resolve(opts.num_shards, opts.shard_index, opts.shard_remainder)
    if shard.count > 1 and keras_split > 1:
        raise ValueError(
            f"num_shards={shard.count} was given while keras.distribution splits the dataset "
            f"among {keras_split} processes itself (auto_shard_dataset=True): the data would be "
            "split twice. Pass DataParallel(auto_shard_dataset=False) to keep num_shards, or "
            "leave num_shards out."
        )
    return shard, keras_split


def _indexed(
    directory: str, labels: Any, class_names: Any, follow_links: bool, files: Any, verbose: bool
) -> tuple[list[str], np.ndarray | None, list[str] | None]:
    """The files in Keras's order, their labels and the class names; prints what was found."""
    if labels is None and class_names is not None:
        raise ValueError("`class_names` cannot be given with labels=None (no labels).")
    inferred = labels == "inferred"
    paths, classes, names = dataset_index.index(
        directory, inferred, class_names, follow_links, files
    )
    found: np.ndarray | None = None
    if inferred:
        found = np.asarray(classes, dtype="int32")
    elif labels is not None:
        if len(labels) != len(paths):
            raise ValueError(
                "Expected the lengths of `labels` to match the number of files found: "
                f"{len(labels)} labels for {len(paths)} image files in {directory!r}; pass one "
                "label per file."
            )
        import tensorflow as tf

        found = tf.convert_to_tensor(list(labels)).numpy()  # the dtype Keras's labels get
        names = [str(label) for label in sorted(set(labels))]
    if verbose:
        if found is None:
            print_msg(f"Found {len(paths)} files.")
        else:
            print_msg(f"Found {len(paths)} files belonging to {len(names)} classes.")
    return paths, found, (None if found is None else names)


def _split(
    paths: list[str], labels: np.ndarray | None, fraction: float | None, subset: str | None
) -> tuple[list[str], np.ndarray | None]:
    """Keras's split: the last `int(fraction * n)` files validate, the others train."""
    if not fraction:
        return paths, labels
    count = int(fraction * len(paths))
    if subset == "training":
        print_msg(f"Using {len(paths) - count} files for training.")
        kept = slice(None, -count)
    else:
        print_msg(f"Using {count} files for validation.")
        kept = slice(-count, None)
    return paths[kept], None if labels is None else labels[kept]


def _data_format(data_format: str | None) -> str:
    if data_format is None:
        return keras.config.image_data_format()
    value = str(data_format).lower()
    if value not in ("channels_last", "channels_first"):
        raise ValueError(
            '`data_format` must be "channels_last" or "channels_first". '
            f"Received: data_format={data_format!r}"
        )
    return value


def _join(directory: str, relative: str) -> str:
    if locations.is_url(directory):
        return directory.rstrip("/") + "/" + relative
    return os.path.join(directory, relative)


def _describe(
    dataset: Any,
    names: list[str] | None,
    urls: list[str],
    files: dataset_pipeline.RemoteFiles,
    reader: dataset_pipeline.EpochReader,
    directory: str,
    subset: str | None,
) -> None:
    """Keras's attributes, plus what the package's records and users read."""
    dataset.class_names = names
    dataset.file_paths = urls  # what is read: on lakeFS, at the commit pinned
    dataset.skipped = dataset_pipeline.Skipped(reader.skips)
    dataset.subset = subset
    dataset.directory = directory
    dataset.options = files.options
    dataset.lakefs_pins = files.lakefs_pins
    dataset._filepaths = urls  # read by `write_data_version`
