"""Keras 3's callbacks: input-stall reports, data-version records (`keras_agnostic.callbacks`)."""

from __future__ import annotations

import keras

from remote_keras.keras_agnostic.callbacks import DataVersionCore, EpochInputReport, InputStallCore

__all__ = ["DataVersionCallback", "EpochInputReport", "InputStallCallback"]


class InputStallCallback(InputStallCore, keras.callbacks.Callback):
    """Reports, per epoch, how long training waited for batches from `iterator`.

    Training asks for batch `k` when step `k - 1` ends (or when the epoch
    starts); the batch is available once the iterator has handed it out, and
    all batches asked for before it (Keras delivers them in order). The wait
    of step `k` is the difference when positive. This works for every backend
    and with Keras's `workers` threads; each report is also added to the
    epoch's logs as `input_wait_s` and `input_wait_fraction`.

    Args:
        iterator: The `remote_keras` iterator passed to `fit` (directly or
            through `to_tf_dataset()`).
        verbose: Print a line per epoch when 1 (the default); silent when 0.
        print_fn: Replaces `print`, e.g. `logging.info`.

    Example:

    ```python
    stall = InputStallCallback(train)
    model.fit(train, epochs=3, callbacks=[stall])
    stall.reports[-1].wait_fraction  # 0.02: the GPU was fed
    ```
    """


class DataVersionCallback(DataVersionCore, keras.callbacks.Callback):
    """Writes the data versions an iterator reads when training starts.

    The JSON record lists the lakeFS commits and the paths read at each; next
    to it, one `.lakefs_ref.yaml` per folder read (see `write_data_version`).
    Put them next to the model's checkpoints: `pinned_urls(filepath)` gives
    back the URLs that read exactly the same data.

    Args:
        iterators: One iterator or a list (e.g. training and validation).
        filepath: Where to write, e.g. `"checkpoints/data_version.json"`.
            Folders are created; URLs (`lakefs://`, `s3://`, ...) are
            written through fsspec.
        storage_options: Options for writing to a URL; by default the first
            iterator's `storage_options` (its lakeFS credentials).
        lakefs_refs: Whether to write the `.lakefs_ref.yaml` files too.

    Example:

    ```python
    train = gen.flow_from_directory("lakefs://images/main/train")
    model.fit(train, callbacks=[
        keras.callbacks.ModelCheckpoint("ckpt/model.keras"),
        DataVersionCallback(train, "ckpt/data_version.json"),
    ])
    ```
    """
