"""`DirectoryIterator`: Keras's, over a folder of class sub-folders, local or remote."""

from __future__ import annotations

import os

from keras.src.legacy.preprocessing import image as keras_image
from typing_extensions import Unpack

from remote_keras import listing, saving, storage
from remote_keras.iterators.base import RemoteBatchMixin
from remote_keras.options import LoaderOptions, LoaderOverrides


class DirectoryIterator(RemoteBatchMixin, keras_image.DirectoryIterator):
    """Iterator over a folder of class sub-folders, local or remote.

    Takes every argument of Keras's `DirectoryIterator`, with the same
    defaults, plus the keyword arguments of `DataFrameIterator`. A remote
    `directory` (`"s3://bucket/train"`) is listed once: one request when it holds at most
    1,000 objects, else its class folders in parallel (`remote_keras.listers`); the training
    and validation subsets of one generator share the listing; classes,
    file order and `subset` splits are as for a local folder.
    """

    def __init__(
        self,
        directory,
        image_data_generator,
        target_size=(256, 256),
        color_mode="rgb",
        classes=None,
        class_mode="categorical",
        batch_size=32,
        shuffle=True,
        seed=None,
        data_format=None,
        save_to_dir=None,
        save_prefix="",
        save_format="png",
        follow_links=False,
        subset=None,
        interpolation="nearest",
        keep_aspect_ratio=False,
        dtype=None,
        *,
        options: LoaderOptions | None = None,
        **overrides: Unpack[LoaderOverrides],
    ):
        saving.check_save_prefix(save_to_dir, save_prefix)
        self._init_remote(options, overrides)
        arguments = dict(
            target_size=target_size,
            color_mode=color_mode,
            classes=classes,
            class_mode=class_mode,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            data_format=data_format,
            save_to_dir=save_to_dir,
            save_prefix=save_prefix,
            save_format=save_format,
            follow_links=follow_links,
            subset=subset,
            interpolation=interpolation,
            keep_aspect_ratio=keep_aspect_ratio,
            dtype=dtype,
        )
        if storage.is_url(os.fspath(directory)):
            self._listing = (os.fspath(directory), image_data_generator, arguments)
            listing.init_from_listing(self, *self._listing[:2], **arguments)
        else:
            super().__init__(directory, image_data_generator, **arguments)
        self._finish_init()

    def _reread_at_pins(self) -> None:
        """Lists the folder again at the pinned commits (a moved branch may hold other files)."""
        directory, image_data_generator, arguments = self._listing
        listing.init_from_listing(self, directory, image_data_generator, **arguments)
        self._finish_init()
