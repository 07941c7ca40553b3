"""A user's script, as `tests/test_usual_settings.py` runs it in a subprocess.

`read URL LOCAL`: reads every batch of `flow_from_directory(URL)` with the defaults
(`loader="auto"`, no `storage_options`: the store is configured by its usual environment
variables only), compares each with stock Keras's on the local copy LOCAL, and prints one
JSON line: `{"choice": ..., "samples": n, "same": bool}`.

`stop LOCAL`: serves LOCAL from a GCS emulator, reads the first batch through the fsspec
loader (gcsfs) with retries and read-ahead off, stops the server, asks for the next batch
and prints the one error it raises. Logging is left as a script leaves it: not configured.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

import remote_keras as rk

KWARGS = dict(target_size=(7, 9), batch_size=5, shuffle=False)


def read(url: str, local: str) -> None:
    from keras.src.legacy.preprocessing import image as keras_image

    stock = keras_image.ImageDataGenerator().flow_from_directory(local, **KWARGS)
    with rk.ImageDataGenerator().flow_from_directory(url, **KWARGS) as ours:
        same = len(stock) == len(ours) and all(
            np.array_equal(a, b) for i in range(len(stock)) for a, b in zip(stock[i], ours[i])
        )
        print(json.dumps({"choice": ours.loader_choice, "samples": ours.samples, "same": same}))


def stop(local: str) -> None:
    import gcsfs

    from remote_keras.testing import GCSServer

    with GCSServer(buckets=("data",)) as server:
        fs = gcsfs.GCSFileSystem(**server.storage_options, skip_instance_cache=True)
        fs.put(local + "/", "data/train/", recursive=True)
        gen = rk.ImageDataGenerator(storage_options=server.storage_options)
        with gen.flow_from_directory(
            "gs://data/train", loader="fsspec", retries=1, prefetch_batches=0, **KWARGS
        ) as it:
            it[0]
            server.stop()
            try:
                it[1]
            except OSError as exc:
                print(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    if sys.argv[1] == "read":
        read(sys.argv[2], sys.argv[3])
    else:
        stop(sys.argv[2])
