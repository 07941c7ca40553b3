"""`image_dataset_from_directory` on Keras 2: not provided; a clear error says what to use."""

from __future__ import annotations

from typing import Any


def image_dataset_from_directory(*args: Any, **kwargs: Any) -> Any:
    """Not available where `tf.keras` is Keras 2; raises `NotImplementedError` saying why.

    remote_keras's `image_dataset_from_directory` follows Keras 3's function
    (its arguments, defaults and pixels), which Keras 2's differs from. Use
    `ImageDataGenerator().flow_from_directory(url)` (or its
    `to_tf_dataset()`), which reads the same folders on Keras 2.

    Raises:
        NotImplementedError: Always.
    """
    raise NotImplementedError(
        "remote_keras.image_dataset_from_directory follows Keras 3's function and is not "
        "available on Keras 2 (tf.keras 2.x, tf_keras). Read the folder with "
        "remote_keras.ImageDataGenerator().flow_from_directory(url), or its "
        ".to_tf_dataset() for a tf.data.Dataset."
    )
