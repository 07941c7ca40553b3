"""The Keras 3 front's Keras names that have no public home (`keras_lines.private_homes`).

`legacy_image` (the legacy image module: `ImageDataGenerator`, `Iterator`,
`DataFrameIterator`, `DirectoryIterator`, `NumpyArrayIterator`), `print_msg`
(how Keras's iterators print) and `file_utils` (the file layer of Keras's
`BackupAndRestore`). Tested with every Keras from 3.8.0 to 3.16; a Keras
without one of them fails at import, here, naming it.
"""

from __future__ import annotations

from typing import Any

from remote_keras.keras_lines import private_homes

legacy_image: Any = private_homes.keras3_legacy_image()
file_utils: Any = private_homes.keras3_file_utils()
print_msg: Any = private_homes.keras3_print_msg()

Iterator = legacy_image.Iterator
NumpyArrayIterator = legacy_image.NumpyArrayIterator

__all__ = ["Iterator", "NumpyArrayIterator", "file_utils", "legacy_image", "print_msg"]
