"""The `tf.data` graph of `image_dataset_from_directory`: Keras's order, decode and batches.

The order of each pass comes from TensorFlow's `shuffle` op, the bytes from
`reads.EpochReader` (through `from_generator`), the pixels from the
TensorFlow ops Keras's function decodes and resizes with (`decode_resize`),
and each batch's positions go back to the reader's account. TensorFlow is
imported when a dataset is made, so the module loads without it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from remote_keras.image_dataset.reads import EpochReader
from remote_keras.keras_agnostic import tensorflow_import
from remote_keras.keras_lines import dataset_passes
from remote_keras.pipeline import interrupts

if TYPE_CHECKING:
    import tensorflow as tf


def require() -> None:
    """Checks that TensorFlow can be imported, before the folder is listed.

    Raises:
        MissingBackendError: it cannot, naming the extra that installs it and
            `format="grain"`, which needs none.
    """
    tensorflow_import.tensorflow(
        'image_dataset_from_directory(format="tf"), the default,',
        'pass format="grain" for a grain.IterDataset without TensorFlow (pip install ".[grain]")',
    )


def decode_resize(
    data: tf.Tensor,
    image_size: tuple[int, int],
    channels: int,
    interpolation: str,
    data_format: str,
    crop_to_aspect_ratio: bool,
    pad_to_aspect_ratio: bool,
) -> tf.Tensor:
    """Decodes and resizes one image with the TensorFlow ops Keras's function uses.

    Same arithmetic as Keras 3.8 to 3.15: `tf.io.decode_image` (first frame
    of a GIF), then `tf.image.resize`; with `crop_to_aspect_ratio`, first
    the central window of the target's aspect ratio (sizes computed in
    `float32`, as Keras's `smart_resize` does in a graph); with
    `pad_to_aspect_ratio`, `tf.image.resize_with_pad`. `"nearest"` keeps
    the input dtype (`uint8`), as there.
    """
    import tensorflow as tf  # imported when a dataset is made: the module loads without it

    height, width = image_size
    image = tf.io.decode_image(data, channels=channels, expand_animations=False)
    if crop_to_aspect_ratio:
        shape = tf.shape(image)
        in_h, in_w = shape[0], shape[1]
        crop_h = tf.cast(tf.cast(in_w * height, "float32") / width, "int32")
        crop_h = tf.maximum(tf.minimum(in_h, crop_h), 1)
        crop_w = tf.cast(tf.cast(in_h * width, "float32") / height, "int32")
        crop_w = tf.maximum(tf.minimum(in_w, crop_w), 1)
        top = tf.cast(tf.cast(in_h - crop_h, "float32") / 2, "int32")
        left = tf.cast(tf.cast(in_w - crop_w, "float32") / 2, "int32")
        image = image[top : top + crop_h, left : left + crop_w, :]
        image = tf.image.resize(image, image_size, method=interpolation)
    elif pad_to_aspect_ratio:
        image = tf.image.resize_with_pad(image, height, width, method=interpolation)
    else:
        image = tf.image.resize(image, image_size, method=interpolation)
    if data_format == "channels_first":
        image = tf.transpose(image, (2, 0, 1))
        image.set_shape((channels, height, width))
    else:
        image.set_shape((height, width, channels))
    return image


def _op_determinism() -> bool:
    """Whether `tf.config.experimental.enable_op_determinism()` was called.

    TensorFlow has no public getter: its `config.is_op_determinism_enabled`
    (TensorFlow 2.8 to 2.21 at least) is read where it exists.
    """
    from tensorflow.python.framework import config

    enabled = getattr(config, "is_op_determinism_enabled", None)
    return bool(enabled()) if callable(enabled) else False


def build(
    reader: EpochReader,
    labels: np.ndarray | None,
    label_mode: str | None,
    num_classes: int,
    decode_args: tuple[Any, ...],
    batch_size: int | None,
    shuffle_buffer: int | None,
    seed: int | None,
    batch_size_visible: bool = False,
) -> tf.data.Dataset:
    """The dataset of one subset: ordered, fetched ahead, decoded, accounted for, batched.

    Args:
        reader: Fetches the subset's files.
        labels: Class index (or given label) per sample, or `None`.
        label_mode: `"int"`, `"categorical"`, `"binary"` or `None`.
        num_classes: Classes, for `"categorical"`.
        decode_args: `decode_resize`'s arguments after the bytes.
        batch_size: Samples per batch; `None` for single samples.
        shuffle_buffer: The shuffle buffer of each epoch, or `None` not to shuffle.
        seed: The shuffle's seed.
        batch_size_visible: End with a plain `batch`, so that TensorFlow can read
            the batch size from the graph (`compute_batch_size`), as Keras's split
            of a dataset among processes does. Costs a copy of every image.
    """
    import tensorflow as tf

    interrupts.watch()  # Ctrl-C ends a pass at once, also while its requests stall

    def explain(data: bytes) -> str | None:
        try:
            decode_resize(tf.constant(data), *decode_args)
        except tf.errors.OpError as exc:  # "{{function_node ...}} REASON [Op:...] ..."
            reason = re.sub(r"\{\{function_node [^}]*\}\}", "", exc.message)
            reason = re.split(r"\[\[| \[Op:", reason)[0]
            return reason.strip() or None
        return None

    reader.explain = explain
    n = len(reader.urls)
    order = tf.data.Dataset.range(n)
    if shuffle_buffer is not None:
        order = order.shuffle(buffer_size=shuffle_buffer, seed=seed)
    vector = tf.TensorSpec((None,), tf.int64)
    spec = (vector, vector, vector, tf.TensorSpec((None,), tf.string))
    samples = (
        order.batch(n)
        .flat_map(
            lambda whole: tf.data.Dataset.from_generator(
                reader.epoch, args=(whole,), output_signature=spec
            )
        )
        .unbatch()
    )
    table = None if labels is None else tf.constant(labels)

    def decode(token: Any, position: Any, index: Any, data: Any) -> tuple[Any, ...]:
        image = decode_resize(data, *decode_args)
        if table is None:
            return token, position, index, image
        label = tf.gather(table, tf.maximum(index, 0))
        if label_mode == "binary":
            label = tf.expand_dims(tf.cast(label, "float32"), axis=-1)
        elif label_mode == "categorical":
            label = tf.one_hot(label, num_classes)
        return token, position, index, image, label

    def account(token: Any, position: Any, index: Any, *values: Any) -> Any:
        done = tf.numpy_function(reader.observe, [token, position], tf.bool, stateful=True)
        with tf.control_dependencies([done]):
            keep = tf.greater_equal(index, 0)  # drops the sentinel
        # Only the batch holding the sentinel is masked: copying every batch of images
        # cost a tenth of the decode's CPU.
        kept = tf.cond(
            tf.reduce_all(keep),
            lambda: tuple(tf.identity(value) for value in values),
            lambda: tuple(tf.boolean_mask(value, keep) for value in values),
        )
        return kept if len(kept) > 1 else kept[0]

    # Under op determinism TensorFlow makes a parallel map after the generator sequential
    # anyway, and logs an error-level line as it rewrites it (`use_unbounded_threadpool`).
    parallel = None if _op_determinism() else tf.data.AUTOTUNE
    decoded = samples.map(decode, num_parallel_calls=parallel).ignore_errors()
    batches = decoded.batch(batch_size or reader.chunk).map(account)
    batches = batches.filter(lambda first, *rest: tf.shape(first)[0] > 0)
    if batch_size is None:
        batches = batches.unbatch()
    elif batch_size_visible:  # the map above hides the batch size from compute_batch_size
        batches = batches.unbatch().batch(batch_size)
    if reader.files.options.on_error == "raise":  # every sample arrives: Keras's cardinality
        count = n if batch_size is None else -(-n // batch_size)
        batches = batches.apply(tf.data.experimental.assert_cardinality(count))
    batches = batches.prefetch(tf.data.AUTOTUNE)

    def consumed(*values: Any) -> Any:  # after the prefetch: runs as the consumer takes a batch
        taken = tf.numpy_function(reader.consumed, [], tf.bool, stateful=True)
        with tf.control_dependencies([taken]):
            kept = tuple(tf.identity(value) for value in values)
        return kept if len(kept) > 1 else kept[0]

    if not batch_size_visible:  # a map would hide the batch size again: no count, no carry
        batches = batches.map(consumed)

    dataset_passes.attach(batches, order, n, reader.passes, seed)
    return batches


def label_array(labels: Any) -> np.ndarray:
    """`labels` (one per file) as TensorFlow converts them: the dtype Keras's labels get."""
    import tensorflow as tf

    return tf.convert_to_tensor(list(labels)).numpy()
