"""Maps `keras_preprocessing.image` onto Keras 3's classes or remote_keras's.

Copied as `conftest.py` next to keras-preprocessing 1.1.2's own `tests/image/`
(downloaded at test time, never stored in this repository).
`KP_TARGET=keras` runs them against stock Keras 3, `KP_TARGET=remote_keras`
against this package.
"""

import os
import sys
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras.src.legacy.preprocessing import image as legacy
from keras.src.utils import image_utils

if os.environ.get("KP_TARGET") == "remote_keras":
    import remote_keras as classes
else:
    classes = legacy

SUBMODULES = {
    "iterator": {"Iterator": classes.Iterator, "BatchFromFilesMixin": legacy.BatchFromFilesMixin},
    "directory_iterator": {"DirectoryIterator": classes.DirectoryIterator},
    "dataframe_iterator": {"DataFrameIterator": classes.DataFrameIterator},
    "numpy_array_iterator": {"NumpyArrayIterator": classes.NumpyArrayIterator},
    "image_data_generator": {"ImageDataGenerator": classes.ImageDataGenerator},
    "affine_transformations": {
        name: getattr(legacy, name)
        for name in (
            "flip_axis",
            "random_rotation",
            "random_shift",
            "random_shear",
            "random_zoom",
            "apply_channel_shift",
            "random_channel_shift",
            "apply_brightness_shift",
            "random_brightness",
            "transform_matrix_offset_center",
            "apply_affine_transform",
        )
    },  # fmt: skip
    "utils": {
        "load_img": image_utils.load_img,
        "img_to_array": image_utils.img_to_array,
        "array_to_img": image_utils.array_to_img,
        "save_img": image_utils.save_img,
        "validate_filename": legacy.validate_filename,
    },
}

package = types.ModuleType("keras_preprocessing")
image = types.ModuleType("keras_preprocessing.image")
package.image = image
sys.modules["keras_preprocessing"] = package
sys.modules["keras_preprocessing.image"] = image
for module_name, members in SUBMODULES.items():
    module = types.ModuleType(f"keras_preprocessing.image.{module_name}")
    module.__dict__.update(members)
    sys.modules[module.__name__] = module
    setattr(image, module_name, module)
    image.__dict__.update(members)

# Pillow >= 11 cannot write 32-bit ("I") images as PNG, which the suite's
# fixtures do; write them as 16-bit PNGs instead (the tests only check shapes
# and modes that survive this). Stock Keras and remote_keras get the same files.
from PIL import Image  # noqa: E402

_original_save = Image.Image.save


def _save_mode_i_png_as_16_bit(self, fp, format=None, **params):
    name = str(getattr(fp, "name", fp))
    if self.mode == "I" and (format or "").upper() in ("", "PNG") and name.lower().endswith(".png"):
        self = self.convert("I;16")
    return _original_save(self, fp, format, **params)


Image.Image.save = _save_mode_i_png_as_16_bit
