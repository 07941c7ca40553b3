"""TensorFlow, imported only by what needs it: it is the optional `tensorflow` extra.

Keras 3 on JAX or PyTorch needs no TensorFlow, and neither do `flow_from_*`,
`BackupAndRestore`, `image_dataset_from_directory(format="grain")` and the stores.
What does (`format="tf"` datasets, `to_tf_dataset()`, Keras 2, Keras 3's
TensorFlow backend) imports it through here, or raises `missing`'s error when
it cannot be imported: a `MissingBackendError` naming the extra that installs it.
"""

from __future__ import annotations

from typing import Any

from remote_keras import errors

INSTALL = 'pip install ".[tensorflow]" in a clone of remote_keras, which installs tensorflow'


def missing(needed_by: str, cause: BaseException, instead: str = "") -> errors.MissingBackendError:
    """The error for `needed_by` when TensorFlow cannot be imported.

    Args:
        needed_by: What needs TensorFlow, as the user wrote it (`"to_tf_dataset()"`).
        cause: The `ImportError` raised by importing TensorFlow.
        instead: What works without TensorFlow, said after the install line.

    Returns:
        A `MissingBackendError` (an `ImportError`; it pickles) naming the extra.
    """
    alternative = f"; or {instead}" if instead else ""
    return errors.MissingBackendError(
        f"{needed_by} needs TensorFlow, which cannot be imported ({cause}). "
        f"Fix: {INSTALL}{alternative}"
    )


def tensorflow(needed_by: str, instead: str = "") -> Any:
    """Imports TensorFlow for `needed_by`.

    Args:
        needed_by: What needs TensorFlow, named in the error.
        instead: What works without TensorFlow, named in the error.

    Returns:
        The `tensorflow` module.

    Raises:
        MissingBackendError: TensorFlow cannot be imported.
    """
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise missing(needed_by, exc, instead) from exc
    return tf
