"""The argument checks of `image_dataset_from_directory`, shared by the Keras 3 and Keras 2 fronts.

Keras's function checks its arguments in this order and raises `ValueError`
with messages that code and tests match; the phrases they match are kept here
(Keras 2.15 and Keras 3.8 to 3.15 use the same ones), and the package's own
context follows them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remote_keras.pipeline.options import LoaderOptions

LABEL_MODES = ("int", "categorical", "binary", None)
COLOR_MODES = {"grayscale": 1, "rgb": 3, "rgba": 4}
INTERPOLATIONS = (
    "bilinear",
    "nearest",
    "bicubic",
    "area",
    "lanczos3",
    "lanczos5",
    "gaussian",
    "mitchellcubic",
)


def checked(
    labels: Any,
    label_mode: str | None,
    class_names: Any,
    color_mode: str,
    image_size: Any,
    interpolation: str,
    keras_line: int = 3,
) -> tuple[Any, Any, int, tuple[int, int], str]:
    """Keras's checks of the labels, colours, size and interpolation, in its order.

    Args:
        labels, label_mode, class_names, color_mode, image_size, interpolation:
            The function's arguments.
        keras_line: 3, or 2 for Keras 2.15's exception and message for an
            unknown `interpolation` (`NotImplementedError`).

    Returns:
        `(label_mode, labels, channels, image_size, interpolation)`, normalized:
        no labels at all when either `labels` or `label_mode` is `None`.
    """
    if labels not in ("inferred", None):
        if not isinstance(labels, (list, tuple)):
            raise ValueError(
                '`labels` argument should be "inferred" (from the sub-folders), None (images '
                "only), or a list/tuple of integer labels, one per image file in the folder. "
                f"Received: labels={labels!r}"
            )
        if class_names:
            raise ValueError(
                'You can only pass `class_names` if `labels="inferred"`. '
                f"Received: labels={labels!r}, class_names={class_names!r}"
            )
    if label_mode not in LABEL_MODES:
        raise ValueError(
            f"`label_mode` argument must be one of {LABEL_MODES}. "
            f"Received: label_mode={label_mode!r}"
        )
    if labels is None or label_mode is None:
        labels = label_mode = None
    if color_mode not in COLOR_MODES:
        raise ValueError(
            f"`color_mode` must be one of {sorted(COLOR_MODES)}. "
            f"Received: color_mode={color_mode!r}"
        )
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    elif not isinstance(image_size, (list, tuple)) or len(image_size) != 2:
        raise ValueError(
            f"`image_size` must be a tuple of 2 integers. Received: image_size={image_size!r}"
        )
    interpolation = interpolation.lower()
    if interpolation not in INTERPOLATIONS and keras_line == 2:
        raise NotImplementedError(
            f"Value not recognized for `interpolation`: {interpolation!r}. "
            f"Supported values are: {INTERPOLATIONS}"
        )
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"Argument `interpolation` should be one of {INTERPOLATIONS}. "
            f"Received: interpolation={interpolation!r}"
        )
    return label_mode, labels, COLOR_MODES[color_mode], tuple(image_size), interpolation


def make_arguments(
    arguments: dict[str, Any],
    default_data_format: str = "channels_last",
    grain_arithmetic: Callable[..., Any] | None = None,
    keras_line: int = 3,
) -> dict[str, Any]:
    """A front's arguments, checked in Keras's order, as `dataset.make` takes them.

    Args:
        arguments: The front's arguments by name, but `directory` and the
            package's options (see `keras_arguments`). Keras 2's have no
            `pad_to_aspect_ratio`, `data_format`, `format` or `verbose`: they
            are `False`, `default_data_format`, `"tf"` and `True`.
        default_data_format: The data format where `data_format` is `None`.
        grain_arithmetic: Makes Keras's ops for `format="grain"` from
            `(image_size, interpolation, data_format, crop_to_aspect_ratio,
            pad_to_aspect_ratio)`.
        keras_line: 3, or 2 for Keras 2.15's checks and classes.

    Returns:
        `dataset.make`'s keyword arguments but `options` and `say`.
    """
    given = arguments  # as the front received them
    label_mode, labels, channels, size, interpolation = checked(
        given["labels"],
        given["label_mode"],
        given["class_names"],
        given["color_mode"],
        given["image_size"],
        given["interpolation"],
        keras_line,
    )
    format = given.get("format", "tf")
    if format not in ("tf", "grain"):
        raise ValueError(f'`format` should be either "tf" or "grain". Received: format={format!r}')
    check_split(given["validation_split"], given["subset"], given["shuffle"], given["seed"])
    chosen_format = data_format(given.get("data_format"), default_data_format)
    crop, pad = given["crop_to_aspect_ratio"], given.get("pad_to_aspect_ratio", False)
    arithmetic = None
    if format == "grain" and grain_arithmetic is not None:
        arithmetic = grain_arithmetic(size, interpolation, chosen_format, crop, pad)
    return {
        "labels": labels,
        "label_mode": label_mode,
        "class_names": given["class_names"],
        "channels": channels,
        "image_size": size,
        "batch_size": given["batch_size"],
        "shuffle": given["shuffle"],
        "seed": given["seed"],
        "validation_split": given["validation_split"],
        "subset": given["subset"],
        "interpolation": interpolation,
        "follow_links": given["follow_links"],
        "crop_to_aspect_ratio": crop,
        "pad_to_aspect_ratio": pad,
        "data_format": chosen_format,
        "verbose": given.get("verbose", True),
        "keras_line": keras_line,
        "grain_arithmetic": arithmetic,
    }


def check_split(fraction: Any, subset: Any, shuffle: bool, seed: Any) -> None:
    """Keras's checks of `validation_split` and `subset`."""
    if fraction and not 0 < fraction < 1:
        raise ValueError(f"`validation_split` must be between 0 and 1. Received: {fraction!r}")
    if (fraction or subset) and not (fraction and subset):
        raise ValueError(
            "`validation_split` must be set (between 0 and 1) when `subset` is, and `subset` "
            f"when `validation_split` is. Received: validation_split={fraction!r}, "
            f"subset={subset!r}"
        )
    if subset not in ("training", "validation", "both", None):
        raise ValueError(
            f'`subset` must be either "training", "validation" or "both". Received: {subset!r}'
        )
    if fraction and shuffle and seed is None:
        raise ValueError(
            "With `validation_split` and shuffle=True you must provide a `seed`, so that the "
            "training and validation subsets do not overlap."
        )


def check_options(opts: LoaderOptions) -> None:
    """Refuses the package's options that have no meaning for this function."""
    if opts.use_multiprocessing:
        raise ValueError(
            "use_multiprocessing=True does not apply to image_dataset_from_directory: "
            "TensorFlow decodes in its own threads."
        )
    if opts.jpeg_draft:
        raise ValueError(
            "jpeg_draft=True does not apply to image_dataset_from_directory: images are "
            "decoded by TensorFlow, as Keras's function decodes them."
        )


def data_format(value: str | None, default: str) -> str:
    """`value` checked, or the Keras configuration's `default` where it is `None`."""
    if value is None:
        return default
    lowered = str(value).lower()
    if lowered not in ("channels_last", "channels_first"):
        raise ValueError(
            '`data_format` must be "channels_last" or "channels_first". '
            f"Received: data_format={value!r}"
        )
    return lowered
