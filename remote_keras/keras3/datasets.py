"""`image_dataset_from_directory`: Keras's function, reading from local folders and URLs.

Same signature, defaults, messages, file order, shuffling, split and pixels as
`keras.utils.image_dataset_from_directory` (Keras 3.8 to 3.15), plus the
package's options as keywords; the body is shared with the Keras 2 front
(`remote_keras/image_dataset/`).
"""

from __future__ import annotations

import os
from typing import Any

import keras
from typing_extensions import Unpack

from remote_keras.image_dataset import arguments as dataset_arguments
from remote_keras.image_dataset import dataset as image_dataset
from remote_keras.keras3.grain_arithmetic import KerasGrainArithmetic
from remote_keras.keras3.keras_src import print_msg
from remote_keras.pipeline.options import LoaderOptions, LoaderOverrides, keras_arguments


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
        format: `"tf"` for a `tf.data.Dataset` (needs TensorFlow), or `"grain"` for a
            `grain.IterDataset` (needs the `grain` package; no TensorFlow), as
            Keras 3.13 and later make: shuffled once with `seed` (every pass
            has the same order), decoded by Pillow, resized by `keras.ops`.
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
        A `tf.data.Dataset` (or `grain.IterDataset`) of `images` or
        `(images, labels)` batches, with
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
        MissingBackendError: `format="tf"` without TensorFlow, or
            `format="grain"` without grain (each names the extra to install).
    """
    arguments = keras_arguments(locals(), "directory")
    opts = (options or LoaderOptions()).merged(overrides)
    checked = dataset_arguments.make_arguments(
        arguments, keras.config.image_data_format(), KerasGrainArithmetic
    )
    return image_dataset.make(os.fspath(directory), options=opts, say=print_msg, **checked)
