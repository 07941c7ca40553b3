"""`image_dataset_from_directory` on Keras 2: TensorFlow 2.15's function, also for URLs.

Same signature, defaults, file order, shuffling, split, labels and pixels as
`tf.keras.utils.image_dataset_from_directory` of Keras 2.15 (and tf_keras),
plus the package's options as keywords; the body is the one the Keras 3 front
uses (`remote_keras/image_dataset/`), with Keras 2's class-name rules.
"""

from __future__ import annotations

import os
from typing import Any

from typing_extensions import Unpack

from remote_keras.image_dataset import arguments as dataset_arguments
from remote_keras.image_dataset import dataset as image_dataset
from remote_keras.pipeline.options import NAMES, LoaderOptions, LoaderOverrides, keras_arguments


def image_dataset_from_directory(
    directory: str | os.PathLike[str],
    labels: Any = "inferred",
    label_mode: str | None = "int",
    class_names: list[str] | None = None,
    color_mode: str = "rgb",
    batch_size: int | None = 32,
    image_size: tuple[int, int] = (256, 256),
    shuffle: bool = True,
    seed: int | None = None,
    validation_split: float | None = None,
    subset: str | None = None,
    interpolation: str = "bilinear",
    follow_links: bool = False,
    crop_to_aspect_ratio: bool = False,
    *,
    options: LoaderOptions | None = None,
    **kwargs: Unpack[LoaderOverrides],
) -> Any:
    """Generates a `tf.data.Dataset` from image files in a folder, local or remote (Keras 2).

    Keras 2.15's `tf.keras.utils.image_dataset_from_directory`, also for
    `s3://`, `gs://`, `az://`, `http(s)://`, `lakefs://` and other fsspec
    URLs, with the same files, order, shuffling for a given `seed`, subsets,
    labels, `class_names` and pixels. Files are fetched ahead of training
    through the package's loader, retried, cached and checked, as on Keras 3
    (see the Keras 3 function's documentation for the options).

    Args:
        directory: Local folder or URL of the images.
        labels: `"inferred"`, `None`, or one integer label per image in the
            order of the sorted file paths.
        label_mode: `"int"`, `"categorical"`, `"binary"` or `None`.
        class_names: With `labels="inferred"`, every class sub-folder, in
            label order (the files are still read folder by folder in sorted
            order, as Keras 2 reads them).
        color_mode: `"grayscale"`, `"rgb"` or `"rgba"`.
        batch_size: Samples per batch; `None` for single samples.
        image_size: `(height, width)` images are resized to.
        shuffle: Whether to shuffle (with `seed`).
        seed: Seed of the shuffles; `None` draws one from `np.random`.
        validation_split: Fraction of the files kept for validation.
        subset: `"training"`, `"validation"` or `"both"`.
        interpolation: TensorFlow's resize method.
        follow_links: Walk into symbolic links to local folders (no effect on
            URLs: a store has no links).
        crop_to_aspect_ratio: Resize the largest central window with the
            target's aspect ratio (Keras 2's `smart_resize=` is accepted too).
        options: A `LoaderOptions` to start from.
        **kwargs: The package's options (`storage_options`, `cache_dir`,
            `on_error`, `num_shards`, ...), and Keras 2's `smart_resize`.

    Returns:
        A `tf.data.Dataset` of `images` or `(images, labels)` batches with
        `class_names` and `file_paths` (and the package's `skipped`,
        `lakefs_pins`, `skip_passes`), or a list of two with `subset="both"`.

    Raises:
        TypeError: an unknown keyword argument.
        ValueError: an argument Keras 2's function refuses, or no images.
        NotImplementedError: an unknown `interpolation`, as in Keras 2.
    """
    arguments = keras_arguments(locals(), "directory", "kwargs")
    from remote_keras.keras2 import keras_api

    extra: dict[str, Any] = dict(kwargs)
    if "smart_resize" in extra:
        arguments["crop_to_aspect_ratio"] = extra.pop("smart_resize")
    unknown = tuple(name for name in extra if name not in NAMES)
    if unknown:
        raise TypeError(f"Unknown keywords argument(s): {unknown}")
    opts = (options or LoaderOptions()).merged(extra)
    checked = dataset_arguments.make_arguments(arguments, keras_line=2)
    return image_dataset.make(
        os.fspath(directory), options=opts, say=keras_api.print_msg, **checked
    )
