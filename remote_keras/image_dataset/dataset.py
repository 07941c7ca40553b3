"""The body of `image_dataset_from_directory`, shared by the Keras 3 and Keras 2 fronts.

The front checks the arguments (`arguments`) and says how Keras prints
and which data format it defaults to; from there the function is the same on
both Keras lines: the folder is listed once (`file_index`), shuffled with
Keras's permutation, split, sharded, and each subset becomes a `tf.data`
pipeline fetching ahead through the package's engine (`reads`,
`tf_graph`), or with `format="grain"` a `grain.IterDataset` (`grain_dataset`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from remote_keras.image_dataset import arguments, file_index, grain_dataset, reads, tf_graph
from remote_keras.keras_lines import distribution
from remote_keras.pipeline import sharding
from remote_keras.pipeline.engine import ReadEngine
from remote_keras.pipeline.options import LoaderOptions
from remote_keras.storage import locations


def make(
    directory: str,
    *,
    labels: Any,
    label_mode: str | None,
    class_names: list[str] | None,
    channels: int,
    image_size: tuple[int, int],
    batch_size: int | None,
    shuffle: bool,
    seed: int | None,
    validation_split: float | None,
    subset: str | None,
    interpolation: str,
    follow_links: bool,
    crop_to_aspect_ratio: bool,
    pad_to_aspect_ratio: bool,
    data_format: str,
    options: LoaderOptions,
    say: Callable[[str], None],
    verbose: bool = True,
    keras_line: int = 3,
    grain_arithmetic: grain_dataset.GrainArithmetic | None = None,
) -> Any:
    """The dataset (or, with `subset="both"`, the two) from checked arguments.

    Args:
        directory: Local folder or URL of the images.
        labels: `"inferred"`, `None` or one label per file (checked already).
        label_mode: `"int"`, `"categorical"`, `"binary"` or `None`.
        class_names: The class folders to read, in label order, or `None`.
        channels: 1, 3 or 4.
        image_size: `(height, width)`.
        batch_size: Samples per batch; `None` for single samples.
        shuffle: Whether to shuffle, once over all files and each epoch.
        seed: The shuffles' seed; `None` draws one as Keras does.
        validation_split: Fraction of the files kept for validation.
        subset: `"training"`, `"validation"`, `"both"` or `None`.
        interpolation: TensorFlow's resize method.
        follow_links: Walk into symbolic links to local folders.
        crop_to_aspect_ratio: Resize the central window of the target's ratio.
        pad_to_aspect_ratio: Resize the whole image and pad it.
        data_format: `"channels_last"` or `"channels_first"`.
        options: The package's options.
        say: How this Keras prints its lines ("Found N files ...").
        verbose: Whether to say how many files and classes were found.
        keras_line: 3, or 2 for Keras 2.15's classes: it lists the class
            folders in sorted order whatever the order of `class_names`
            (which must name every one) and labels each file by its folder's
            place in `class_names`; its `class_names` attribute is `[""]`
            without labels and the sorted labels with a list of them.
        grain_arithmetic: Keras's ops for `format="grain"` (a `grain.IterDataset`
            is made, without TensorFlow); `None` for a `tf.data.Dataset`.

    Returns:
        A `tf.data.Dataset` (or `grain.IterDataset`), or a list of the
        training and validation ones.
    """
    if grain_arithmetic is not None:
        grain_dataset.require()
    else:
        tf_graph.require()
    shard, keras_split = _shard(options)
    arguments.check_options(options)
    if keras_split > 1:
        warnings.warn(
            f"keras.distribution splits this dataset's batches among {keras_split} processes "
            f"after they are read (auto_shard_dataset=True): every process reads every file "
            f"and trains on 1/{keras_split} of them. For each process to read only its own "
            "files, pass DataParallel(auto_shard_dataset=False): the dataset then reads this "
            "process's share, in batches of `batch_size` per process.",
            stacklevel=3,
        )
    if max(shard.count, keras_split) > 1 and shuffle and seed is None:
        seed = 0  # every worker must draw the same permutation
        warnings.warn(
            f"Reading shard {shard.index} of {max(shard.count, keras_split)} with shuffle=True "
            "and no seed: using seed=0 so that all workers shuffle alike. Pass `seed=` to "
            "choose another.",
            stacklevel=3,
        )
    if seed is None:
        seed = int(np.random.randint(1_000_000))  # as Keras draws it, even without shuffling
    files = ReadEngine(options, directory)
    read_from = files.pin(directory) if locations.is_url(directory) else directory
    paths, labels, names = _indexed(
        read_from, labels, class_names, follow_links, files, keras_line, grain_arithmetic is None
    )
    if verbose and labels is None and keras_line == 3:
        say(f"Found {len(paths)} files.")
    elif verbose:  # Keras 2 counts its one class without labels ([""])
        say(f"Found {len(paths)} files belonging to {len(names or ())} classes.")
    if label_mode == "binary" and len(names or ()) != 2:
        raise ValueError(
            'With label_mode="binary", there must be exactly 2 classes. '
            f"Received: class_names={names}"
        )
    if shuffle:
        order = np.arange(len(paths))
        np.random.RandomState(seed).shuffle(order)  # the permutation Keras applies
        paths = [paths[i] for i in order]
        labels = None if labels is None else labels[order]
    decode_args = (
        image_size,
        channels,
        interpolation,
        data_format,
        crop_to_aspect_ratio,
        pad_to_aspect_ratio,
    )
    buffer = batch_size * 8 if batch_size is not None else 1024
    made = []
    for part in ("training", "validation") if subset == "both" else (subset,):
        part_paths, part_labels = _split(paths, labels, validation_split, part, say)
        if not part_paths:
            what = f"{part} images" if subset == "both" else "images"
            raise ValueError(
                f"No {what} found in directory {directory!r}. Allowed formats: {file_index.FORMATS}"
            )
        chosen = shard.select(np.arange(len(part_paths)))
        part_paths = [part_paths[i] for i in chosen]
        part_labels = None if part_labels is None else part_labels[chosen]
        shown = [_join(directory, rel) for rel in part_paths]
        urls = [_join(read_from, rel) for rel in part_paths]
        files.expect(urls)
        part_shuffle = shuffle and (part != "validation" or subset != "both")
        if grain_arithmetic is not None:
            if keras_split > 1:
                raise ValueError(
                    'format="grain" with keras.distribution splitting the dataset '
                    "(auto_shard_dataset=True) is not supported: pass "
                    "DataParallel(auto_shard_dataset=False), and each process reads its share."
                )
            reader: Any = grain_dataset.GrainSamples(
                files,
                urls,
                shown,
                part_labels,
                label_mode,
                len(names) if names else 0,
                channels,
                grain_arithmetic,
            )
            dataset = grain_dataset.build(
                reader, batch_size, part_shuffle, seed, grain_arithmetic.batch
            )
            _describe(dataset, names, urls, files, reader, directory, part)
            made.append(dataset)
            continue
        reader = reads.EpochReader(files, urls, shown, batch_size or 32)
        dataset = tf_graph.build(
            reader,
            part_labels,
            label_mode,
            len(names) if names else 0,
            decode_args,
            batch_size,
            buffer if part_shuffle else None,
            seed,
            batch_size_visible=keras_split > 1,
        )
        _describe(dataset, names, urls, files, reader, directory, part)
        made.append(dataset)
    return made if subset == "both" else made[0]


def _shard(opts: LoaderOptions) -> tuple[sharding.Shard, int]:
    """The files this process reads, and the processes Keras splits the read batches among.

    Explicit `num_shards`/`shard_index` win; otherwise a multi-process
    `keras.distribution` that does not split datasets itself
    (`auto_shard_dataset=False`: "the dataset is already sharded") gives this
    process's shard. `tf.distribute` strategies shard the dataset themselves.
    """
    keras_split = distribution.keras_dataset_split()
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
    directory: str,
    labels: Any,
    class_names: Any,
    follow_links: bool,
    files: Any,
    keras_line: int,
    tensorflow: bool,
) -> tuple[list[str], np.ndarray | None, list[Any] | None]:
    """The files in Keras's order, their labels and the class names."""
    if labels is None and class_names is not None:
        raise ValueError("`class_names` cannot be given with labels=None (no labels).")
    inferred = labels == "inferred"
    sorted_folders = keras_line == 2 and inferred and class_names is not None
    paths, classes, names = file_index.index(
        directory, inferred, None if sorted_folders else class_names, follow_links, files
    )
    found: np.ndarray | None = None
    if sorted_folders:
        if set(class_names) != set(names):
            raise ValueError(
                "The `class_names` passed did not match the names of the subdirectories of "
                f"the target directory. Expected: {names}, but received: {class_names}"
            )
        place = {name: list(class_names).index(name) for name in names}
        classes = [place[names[c]] for c in classes]
        names = list(class_names)
    if inferred:
        found = np.asarray(classes, dtype="int32")
    elif labels is not None:
        if len(labels) != len(paths):
            raise ValueError(
                "Expected the lengths of `labels` to match the number of files found: "
                f"{len(labels)} labels for {len(paths)} image files in {directory!r}; pass one "
                "label per file."
            )
        if tensorflow:
            found = tf_graph.label_array(labels)
        else:  # grain: Keras's label op converts them
            found = np.asarray(list(labels))
        names = sorted(set(labels))
        if keras_line == 3:
            names = [str(label) for label in names]
    if found is None:
        return paths, None, [""] if keras_line == 2 else None
    return paths, found, names


def _split(
    paths: list[str],
    labels: np.ndarray | None,
    fraction: float | None,
    subset: str | None,
    say: Callable[[str], None],
) -> tuple[list[str], np.ndarray | None]:
    """Keras's split: the last `int(fraction * n)` files validate, the others train."""
    if not fraction:
        return paths, labels
    count = int(fraction * len(paths))
    if subset == "training":
        say(f"Using {len(paths) - count} files for training.")
        kept = slice(None, -count)
    else:
        say(f"Using {count} files for validation.")
        kept = slice(-count, None)
    return paths[kept], None if labels is None else labels[kept]


def _join(directory: str, relative: str) -> str:
    if locations.is_url(directory):
        return directory.rstrip("/") + "/" + relative
    return os.path.join(directory, relative)


def _describe(
    dataset: Any,
    names: list[str] | None,
    urls: list[str],
    files: ReadEngine,
    reader: reads.EpochReader | grain_dataset.GrainSamples,
    directory: str,
    subset: str | None,
) -> None:
    """Keras's attributes, plus what the package's records and users read."""
    dataset.class_names = names
    dataset.file_paths = urls  # what is read: on lakeFS, at the commit pinned
    dataset.skipped = reads.Skipped(reader.skips)
    dataset.subset = subset
    dataset.directory = directory
    dataset.options = files.options
    dataset.lakefs_pins = files.lakefs_pins
    dataset._filepaths = urls  # read by `write_data_version`
