"""`ImageDataGenerator`: Keras 3's, with `flow_from_*` building remote-aware iterators."""

from __future__ import annotations

from remote_keras.keras3.iterators import DataFrameIterator, DirectoryIterator
from remote_keras.keras3.keras_src import legacy_image
from remote_keras.keras_agnostic.generator import GeneratorCore


class ImageDataGenerator(GeneratorCore, legacy_image.ImageDataGenerator):
    """Keras's `ImageDataGenerator` that reads images from local disk or object storage.

    Takes every argument of `keras.preprocessing.image.ImageDataGenerator`
    (augmentation, normalization, `validation_split`, ...) unchanged, plus
    remote_keras's keyword arguments (the fields of `LoaderOptions`: `loader`,
    `storage_options`, `workers`, `cache_dir`, `retries`, `on_error`,
    `num_shards`, ...), which become the defaults of the iterators that
    `flow_from_dataframe` and `flow_from_directory` build. Each call can
    override any of them by name; passing `None` there means the option's
    own `None` (e.g. `cache_dir=None`: no cache for this call).

    Args:
        *args: Positional arguments of Keras's `ImageDataGenerator`.
        options: A `LoaderOptions` to start from (the keyword arguments
            below override its fields).
        **kwargs: Keyword arguments of Keras's `ImageDataGenerator`, and
            `LoaderOptions` fields (typed together as `GeneratorArguments`;
            `flow_from_*` take the same `LoaderOverrides`).

    Example:

    ```python
    from remote_keras import ImageDataGenerator  # the only changed line

    gen = ImageDataGenerator(rescale=1 / 255, validation_split=0.2)
    train = gen.flow_from_directory("s3://bucket/train", subset="training")
    model.fit(train, epochs=10)
    ```
    """

    dataframe_iterator = DataFrameIterator
    directory_iterator = DirectoryIterator
