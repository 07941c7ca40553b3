"""`model.fit` on remote_keras iterators under Keras 3's JAX and PyTorch backends.

Keras fixes its backend when it is first imported, so each backend runs in a fresh
interpreter with `KERAS_BACKEND` set. There, iterators over `s3://` (the session's S3
server, through the counting proxy) feed a small CNN, and the script reports what happened;
the assertions are made here. JAX is a dev dependency and is never skipped; PyTorch is
heavier (a CPU-only wheel is not on the package index for every platform) and its case
skips, with the reason, when it is not installed. The Keras 2 line's clear ImportError is
tested in `test_interop.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.helpers import needs_torch

FIT_SCRIPT = textwrap.dedent(
    """
    import hashlib, json, os, random, sys, urllib.request
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras, numpy as np
    from keras.src.legacy.preprocessing import image as keras_image  # stock Keras
    import remote_keras as rk

    spec = json.loads(sys.argv[1])
    report = {"backend": keras.backend.backend(), "keras": keras.__version__}
    endpoint = spec["options"]["client_kwargs"]["endpoint_url"]

    def proxy_counts():
        with urllib.request.urlopen(endpoint + "/__proxy__/counts?reset=1") as answer:
            return json.load(answer)

    FLOW = dict(target_size=(16, 16), batch_size=4, seed=7)

    def flows(gen, directory, **kwargs):
        train = gen.flow_from_directory(directory, subset="training", **FLOW, **kwargs)
        val = gen.flow_from_directory(
            directory, subset="validation", shuffle=False, **FLOW, **kwargs
        )
        return train, val

    def digest(array):
        array = np.ascontiguousarray(array)
        return hashlib.sha1(array.tobytes() + str(array.dtype).encode()).hexdigest()

    # Stock Keras on the local copy, and remote_keras on s3://, under this backend.
    stock = keras_image.ImageDataGenerator(rescale=1 / 255, validation_split=0.3)
    stock_train, stock_val = flows(stock, spec["local"])
    stock_train_batches = [stock_train[i] for i in range(len(stock_train))]
    stock_val_batches = [stock_val[i] for i in range(len(stock_val))]
    remote = rk.ImageDataGenerator(
        rescale=1 / 255, validation_split=0.3, storage_options=spec["options"]
    )
    probe_train, probe_val = flows(remote, spec["url"])
    with probe_train, probe_val:
        parity = [
            all(
                a.dtype == b.dtype and np.array_equal(a, b)
                for a, b in zip(stock_batch, probe[i])
            )
            for probe, batches in ((probe_train, stock_train_batches),
                                   (probe_val, stock_val_batches))
            for i, stock_batch in enumerate(batches)
        ]
        report["parity"] = parity
        report["probe_images"] = [probe_train.stats.images, probe_val.stats.images]
        # The training batches of the iterator's epochs 0-3 (order within an epoch aside).
        epoch_batches = []
        for _ in range(4):
            epoch_batches.append(sorted(digest(probe_train[i][0]) for i in range(len(probe_train))))
            probe_train.on_epoch_end()
    report["n"] = [stock_train.n, stock_val.n]
    report["len"] = [len(stock_train), len(stock_val)]
    stock_images = sorted(digest(row) for x, _ in stock_train_batches for row in x)

    class Tap(keras.layers.Layer):
        # Records the training inputs as the model receives them (eager runs only).
        def __init__(self, record, **kwargs):
            super().__init__(**kwargs)
            self.record = record
            self.seen = []

        def call(self, inputs, training=None):
            if self.record and training:
                self.seen.append(keras.ops.convert_to_numpy(inputs))
            return inputs

    class Steps(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.per_epoch = []

        def on_epoch_begin(self, epoch, logs=None):
            self.per_epoch.append(0)

        def on_train_batch_end(self, batch, logs=None):
            self.per_epoch[-1] += 1

    report["variants"] = {}
    for variant in spec["variants"]:
        random.seed(0)  # not `keras.utils.set_random_seed`: it would import TensorFlow
        np.random.seed(0)
        train, val = flows(
            remote,
            spec["url"],
            workers=variant["workers"],
            use_multiprocessing=variant["use_multiprocessing"],
        )
        tap = Tap(variant["eager"])
        model = keras.Sequential([
            keras.Input((16, 16, 3)),
            tap,
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3, activation="softmax"),
        ])
        model.compile("adam", "categorical_crossentropy", run_eagerly=variant["eager"])
        if variant["warm_up"]:
            # Builds the compiled loss and metrics from an in-memory batch, so that `fit` does
            # not take one from `train` first and then start its epoch over.
            model.evaluate(np.zeros((4, 16, 16, 3)), np.eye(3)[[0, 1, 2, 0]], verbose=0)
        steps = Steps()
        proxy_counts()
        stall = rk.InputStallCallback(train, verbose=0)
        history = model.fit(
            train, validation_data=val, epochs=2, verbose=0, callbacks=[steps, stall]
        )
        fit_counts = proxy_counts()
        predictions = model.predict(val, verbose=0)
        evaluated = model.evaluate(val, verbose=0)
        after_counts = proxy_counts()
        result = {
            "steps": steps.per_epoch,
            "loss": history.history["loss"],
            "val_loss": history.history["val_loss"],
            "predict_shape": list(predictions.shape),
            "predict_finite": bool(np.isfinite(predictions).all()),
            "evaluate": float(evaluated),
            "images": [train.stats.images, val.stats.images],
            "fit_gets": fit_counts.get("GET", 0),
            "predict_evaluate_gets": after_counts.get("GET", 0),
            "seen": len(tap.seen),
            "stall": [[r.steps, r.input_wait_s, r.wait_fraction] for r in stall.reports],
        }
        if variant["eager"]:
            epochs = [tap.seen[: len(train)], tap.seen[len(train) :]]
            seen = [sorted(map(digest, epoch)) for epoch in epochs]
            # Keras's fit ends an epoch (`on_epoch_end`) before its first one starts.
            result["first_epoch"] = next(
                (e for e in range(3) if epoch_batches[e : e + 2] == seen), None
            )
            result["stock_images_each_epoch"] = [
                sorted(digest(row) for batch in epoch for row in batch) == stock_images
                for epoch in epochs
            ]
        train.close()
        val.close()
        report["variants"][variant["name"]] = result
    report["backend_after"] = keras.backend.backend()
    report["tensorflow_imported"] = "tensorflow" in sys.modules
    print("REPORT", json.dumps(report))
    """
)

VARIANTS = [
    # As users run it: the default compile (XLA-jitted on JAX); Keras reads without workers.
    {"name": "serial", "workers": 1, "use_multiprocessing": False, "eager": False,
     "warm_up": False},
    # Eager, so that `Tap` can record the batches the model was given, and warmed up, so
    # that the first epoch of `fit` is the iterator's first (see `FIT_SCRIPT`).
    {"name": "threads", "workers": 2, "use_multiprocessing": False, "eager": True,
     "warm_up": True},
    {"name": "processes", "workers": 2, "use_multiprocessing": True, "eager": True,
     "warm_up": True},
]  # fmt: skip

BACKENDS = [
    pytest.param("jax", id="jax"),  # a dev dependency: must run, never skip
    pytest.param("torch", id="torch", marks=needs_torch),  # CI installs the CPU build
]


def run_backend(backend: str, url: str, local: str, options: dict) -> dict:
    spec = {"url": url, "local": local, "options": options, "variants": VARIANTS}
    result = subprocess.run(
        [sys.executable, "-c", FIT_SCRIPT, json.dumps(spec)],
        capture_output=True, text=True, timeout=540, check=False,
        env=dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=os.getcwd()),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-6000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_fit_predict_evaluate_from_s3(backend, image_dir, s3_images, s3_options):
    local, _ = image_dir
    url, _ = s3_images
    report = run_backend(backend, url, local, s3_options)

    # Not TensorFlow by accident: Keras ran on the backend asked for, start to end, and
    # remote_keras did not import TensorFlow (which would also claim GPU memory).
    assert report["backend"] == report["backend_after"] == backend
    assert report["tensorflow_imported"] is False

    # Batch for batch, remote_keras over s3:// equals stock Keras on local files.
    (n_train, n_val), (len_train, len_val) = report["n"], report["len"]
    assert (n_train, n_val) == (15, 6) and (len_train, len_val) == (4, 2)
    assert report["parity"] == [True] * (len_train + len_val)
    assert report["probe_images"] == [n_train, n_val]

    for variant in VARIANTS:
        result = report["variants"][variant["name"]]
        where = f"{backend}/{variant['name']}: {result}"
        assert result["steps"] == [len_train, len_train], where
        assert len(result["loss"]) == len(result["val_loss"]) == 2, where
        assert np.isfinite(result["loss"] + result["val_loss"]).all(), where
        assert result["predict_shape"] == [n_val, 3] and result["predict_finite"], where
        assert np.isfinite(result["evaluate"]), where
        # InputStallCallback measures on this backend too. Keras reads from its own thread
        # on JAX and PyTorch (`use_multiprocessing=True` is not used there): this process reads.
        for steps, wait, fraction in result["stall"]:
            assert steps == len_train, where
            assert wait >= 0 and 0 <= fraction <= 1, where
        # One GET per image and pass: 2 training epochs, 2 validations; predict, evaluate.
        # Without a warm-up, Keras first builds the model from one batch of a pass it then
        # abandons: that batch's files are carried into the next pass, not read again.
        fit_images = 2 * n_train + 2 * n_val
        assert result["predict_evaluate_gets"] == 2 * n_val, where
        assert result["fit_gets"] == fit_images, where
        assert result["images"][1] == 4 * n_val, where
        built = 0 if variant["warm_up"] else 4  # the build batch is decoded twice
        assert result["images"][0] == 2 * n_train + built, where
        if variant["eager"]:
            # The batches the model trained on: in each epoch, those the iterator defines for
            # its seed and epoch, holding every training image once, as stock Keras reads it.
            assert result["seen"] == 2 * len_train, where
            assert result["first_epoch"] is not None, where
            assert result["stock_images_each_epoch"] == [True, True], where
