"""Keras's registries of its worker pools (`_DATA_POOLS`), read without importing Keras.

Keras keeps the `multiprocessing.Pool`s of `use_multiprocessing=True` in a
module-level `WeakSet`: Keras 3's `PyDataset` adapter
(`keras/src/trainers/data_adapters/py_dataset_adapter.py`, `_DATA_POOLS`,
line 368 of 3.15.1, 396 of 3.16.0.dev2026102704), and Keras 2's `data_utils`
(`keras/src/utils/data_utils.py` line 594 of Keras 2.15, and of `tf_keras`
2.21). `remote_keras.keras_agnostic.workers` fails the batches these pools owe
when a worker process dies.
"""

from __future__ import annotations

import sys
from typing import Any

REGISTRIES = (
    "keras.src.trainers.data_adapters.py_dataset_adapter",
    "keras.src.utils.data_utils",
    "tf_keras.src.utils.data_utils",
)


def keras_worker_pools() -> list[Any]:
    """The worker pools Keras holds now, from whichever of its modules are loaded.

    Returns:
        The `multiprocessing.Pool`s (none where Keras's adapter was never loaded).
    """
    return [
        pool
        for name in REGISTRIES
        for pool in list(getattr(sys.modules.get(name), "_DATA_POOLS", ()))
    ]
