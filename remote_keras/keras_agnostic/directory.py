"""`DirectoryCore`: Keras's `DirectoryIterator`, over a folder of class sub-folders, anywhere.

Each front subclasses it together with its Keras's own `DirectoryIterator`, and supplies
its Keras's defaults and message printer (the front's `keras_api`).
"""

from __future__ import annotations

import os
from typing import Any, cast

from typing_extensions import Unpack

from remote_keras.keras_agnostic import files, iterator_setup
from remote_keras.keras_agnostic.batch_core import RemoteBatchCore
from remote_keras.pipeline.options import LoaderOptions, LoaderOverrides, keras_arguments
from remote_keras.storage import listing, locations, saving


class DirectoryCore(RemoteBatchCore):
    """What both fronts' `DirectoryIterator` add to Keras's: remote folders, listed once."""

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
        arguments = keras_arguments(locals(), "directory", "image_data_generator")
        saving.check_save_prefix(save_to_dir, save_prefix)
        iterator_setup.start(self, options, overrides)
        if locations.is_url(os.fspath(directory)):
            self._listing = (os.fspath(directory), image_data_generator, arguments)
            init_from_listing(self, *self._listing[:2], **arguments)
        else:
            # Keras's `DirectoryIterator`, next in the MRO
            cast(Any, super()).__init__(directory, image_data_generator, **arguments)
        self._finish_init()

    def _reread_at_pins(self) -> None:
        """Lists the folder again at the pinned commits (a moved branch may hold other files)."""
        directory, image_data_generator, arguments = self._listing
        init_from_listing(self, directory, image_data_generator, **arguments)
        self._finish_init()


def init_from_listing(it: Any, directory: str, image_data_generator: Any, **kw: Any) -> None:
    """Sets up `it` as Keras's `DirectoryIterator.__init__` does, from one listing of `directory`.

    See `listing.list_classes`; the `Found N images belonging to K classes.`
    message is stock.
    """
    data_format = kw["data_format"] or it.keras_api.image_data_format()
    it.set_processing_attrs(
        image_data_generator,
        kw["target_size"],
        kw["color_mode"],
        data_format,
        kw["save_to_dir"],
        kw["save_prefix"],
        kw["save_format"],
        kw["subset"],
        kw["interpolation"],
        kw["keep_aspect_ratio"],
    )
    it.directory = directory
    if kw["class_mode"] not in it.allowed_class_modes:
        raise ValueError(
            f"Invalid class_mode: {kw['class_mode']}; expected one of: {it.allowed_class_modes}"
        )
    it.class_mode = kw["class_mode"]
    it.dtype = kw["dtype"] or it.keras_api.floatx()
    it.filenames, it.classes, it.class_indices, it._path_prefix = listing.list_classes(
        files.listing_scope(it), directory, kw["classes"], it.split
    )
    it.num_classes = len(kw["classes"] or it.class_indices)
    it.samples = len(it._filenames)
    it.keras_api.print_msg(f"Found {it.samples} images belonging to {it.num_classes} classes.")
    it.keras_api.Iterator.__init__(it, it.samples, kw["batch_size"], kw["shuffle"], kw["seed"])
