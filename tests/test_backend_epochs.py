"""What `fit` trains in each epoch, on Keras 3's TensorFlow, JAX and PyTorch backends.

Each backend runs in a fresh interpreter (Keras fixes its backend at import). There,
`fit` with the iterator's defaults, no warm-up, reads unique random-pixel images from
the session's S3 server through the counting proxy, and a pass-through layer hashes each
row where the model receives it (eager, from `on_train_begin` on, so Keras's build step
is not counted). The assertions are made here:

- each epoch trains each image exactly once, with and without `rk.BackupAndRestore`,
  with `use_multiprocessing=True` and with `fit(shuffle=False)`;
- one GET per image per epoch, counted by the proxy (Keras's JAX and PyTorch trainers
  build the model from a batch of a pass they abandon: its reads are carried over), also
  for `image_dataset_from_directory(format="grain")`;
- unshuffled (the iterator's `shuffle` and `fit`'s), the batches of every step equal
  stock Keras's on the local copy (stock is exact there with its default of one worker);
- what `fit`, `evaluate` and `predict` raise for a corrupt file in the first batch and a
  later one, what `fit` raises for a missing file and for a store that gave up, what
  `on_error="skip"` trains and lists, and the error for a wrong bucket (`failures.md`).

Stock Keras's own iterator given `workers=4` trains some images twice on JAX and PyTorch
(its worker queue hands a pass's leftover batches to the next): the test of that is
`test_stock_keras_with_workers_loses_images_on_jax`, which documents the upstream fact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest
from PIL import Image

from tests.helpers import needs_jax, needs_torch, put_folder, put_objects

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES, BATCH, EPOCHS = 26, 4, 3
BACKENDS = [
    pytest.param("tensorflow", marks=pytest.mark.tensorflow),
    pytest.param("jax", marks=needs_jax),
    pytest.param("torch", marks=needs_torch),
]

SCRIPT = textwrap.dedent(
    """
    import hashlib, json, os, random, socket, sys, tempfile, urllib.request, warnings
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras, numpy as np, pandas as pd
    from keras.src.legacy.preprocessing import image as keras_image  # stock Keras
    import remote_keras as rk

    spec = json.loads(sys.argv[1])
    endpoint = spec["options"]["client_kwargs"]["endpoint_url"]
    FLOW = dict(target_size=(8, 8), batch_size=spec["batch"], seed=3)

    def gets():
        with urllib.request.urlopen(endpoint + "/__proxy__/counts?reset=1") as answer:
            return json.load(answer).get("GET", 0)

    def digest(row):
        return hashlib.sha1(np.ascontiguousarray(row).tobytes()).hexdigest()[:12]

    class Tap(keras.layers.Layer):
        # Hashes the rows the model trains on, once `Arm` says training began.
        armed = False
        steps = []

        def call(self, inputs, training=None):
            if Tap.armed and training:
                Tap.steps.append([digest(r) for r in keras.ops.convert_to_numpy(inputs)])
            return inputs

    class Arm(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            Tap.armed, Tap.steps = True, []

    def train(iterator, shuffle=True, callbacks=()):
        random.seed(0)
        np.random.seed(0)
        model = keras.Sequential([
            keras.Input((8, 8, 3)), Tap(), keras.layers.Flatten(),
            keras.layers.Dense(2, activation="softmax"),
        ])
        model.compile("sgd", "categorical_crossentropy", run_eagerly=True)
        Tap.armed = False
        model.fit(iterator, epochs=spec["epochs"], shuffle=shuffle, verbose=0,
                  callbacks=[Arm(), *callbacks])
        Tap.armed = False
        return Tap.steps

    report = {"backend": keras.backend.backend()}
    stock_iterator = keras_image.ImageDataGenerator().flow_from_directory(
        spec["local"], shuffle=False, **FLOW
    )
    report["stock_unshuffled"] = train(stock_iterator, shuffle=False)
    generator = rk.ImageDataGenerator(storage_options=spec["options"])
    variants = {
        "defaults": ({}, {}),
        "backup": ({}, {"callbacks": [rk.BackupAndRestore(tempfile.mkdtemp(), save_freq=2)]}),
        "processes": ({"workers": 2, "use_multiprocessing": True}, {}),
        "unshuffled": ({"shuffle": False}, {"shuffle": False}),
    }
    for name, (options, fit_arguments) in variants.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            iterator = generator.flow_from_directory(spec["url"], **FLOW, **options)
        gets()
        steps = train(iterator, **fit_arguments)
        report[name] = {"steps": steps, "gets": gets(), "n": iterator.n,
                        "warnings": [str(w.message) for w in caught]}
        iterator.close()
    # image_dataset_from_directory(format="grain"): every pass in the same order.
    dataset = rk.image_dataset_from_directory(
        spec["url"], image_size=(8, 8), batch_size=spec["batch"], seed=3, format="grain",
        label_mode="categorical", prefetch_batches=1, storage_options=spec["options"],
    )
    gets()
    report["grain"] = {"steps": train(dataset), "gets": gets()}
    # A file that cannot be decoded, in the first batch (TensorFlow's adapter reads batches 0
    # and 1 itself to learn the spec) or the last; raised, and skipped; and a wrong bucket.
    bad = spec["url"] + "-broken/bad.png"
    good = [f"{spec['url']}/class_{i % 2}/{i}.png" for i in range(11)]

    def evaluate(iterator, shuffle):
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(2, activation="softmax")])
        model.compile("sgd", "categorical_crossentropy")
        return model.evaluate(iterator, verbose=0)

    def predict(iterator, shuffle):
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(2, activation="softmax")])
        return model.predict(iterator, verbose=0).tolist()

    def failing(rows, bad, use=train, source=generator, **options):
        frame = pd.DataFrame({"filename": rows, "class": ["a", "b"] * (len(rows) // 2)})
        iterator = source.flow_from_dataframe(frame, None, shuffle=False, **FLOW, **options)
        try:
            steps = use(iterator, shuffle=False)
        except Exception as error:
            bases = {c.__module__ + "." + c.__name__ for c in type(error).__mro__}
            return {"error": type(error).__name__, "bases": sorted(bases),
                    "names_url": bad in str(error), "gave_up": "Gave up reading" in str(error)}
        finally:
            iterator.close()
        return {"error": None, "steps": steps, "skipped": [p for p, _ in iterator.skipped]}

    report["corrupt_first"] = failing([bad] + good, bad)
    report["corrupt_later"] = failing(good + [bad], bad)
    report["corrupt_skipped"] = failing(good + [bad], bad, on_error="skip")
    missing = spec["url"] + "-broken/missing.png"  # gone between listing and reading
    report["missing_later"] = failing(good + [missing], missing, validate_filenames=False)
    for use in (evaluate, predict):
        report[f"corrupt_first_{use.__name__}"] = failing([bad] + good, bad, use)
        report[f"corrupt_later_{use.__name__}"] = failing(good + [bad], bad, use)
    # A store that gave up: nothing listens at its endpoint; retried until the deadline.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    away = rk.ImageDataGenerator(
        storage_options=dict(spec["options"], client_kwargs={"endpoint_url": closed}),
        retries=rk.RetryPolicy(deadline_s=0.5, max_backoff_s=0.1),
    )
    report["gave_up_first"] = failing(good + [bad], good[0], source=away, validate_filenames=False)
    try:
        generator.flow_from_directory("s3://no-such-bucket-rk/train", **FLOW)
        report["wrong_bucket"] = None
    except Exception as error:
        report["wrong_bucket"] = [type(error).__name__, "s3://no-such-bucket-rk" in str(error)]
    print("REPORT", json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def unique_images(tmp_path_factory, s3_server):
    """Random-pixel PNGs in two class folders (no two rows alike), local and on S3."""
    import s3fs

    from tests.conftest import SETUP_CLIENT

    root = tmp_path_factory.mktemp("unique")
    rng = np.random.default_rng(42)
    for i in range(IMAGES):
        folder = root / f"class_{i % 2}"
        folder.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    fs = s3fs.S3FileSystem(**s3_server.storage_options, **SETUP_CLIENT)
    prefix = f"data/{uuid.uuid4().hex[:8]}"
    put_folder(fs, str(root), prefix)
    put_objects(fs, {f"{prefix}-broken/bad.png": b"not an image" * 20})  # apart from the classes
    return str(root), f"s3://{prefix}"


def run_backend(backend: str, local: str, url: str, options: dict) -> dict:
    spec = {"local": local, "url": url, "options": options, "batch": BATCH, "epochs": EPOCHS}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(spec)],
        capture_output=True, text=True, timeout=600, check=False,
        env=dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=ROOT),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line.split(" ", 1)[1])


def epochs_of(steps: list[list[str]]) -> list[list[str]]:
    """The rows trained in each epoch (steps are `ceil(IMAGES / BATCH)` per epoch)."""
    per_epoch = -(-IMAGES // BATCH)
    assert len(steps) == EPOCHS * per_epoch
    return [sum(steps[e * per_epoch : (e + 1) * per_epoch], []) for e in range(EPOCHS)]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_each_epoch_trains_each_image_once_with_one_get_each(backend, unique_images, s3_options):
    local, url = unique_images
    report = run_backend(backend, local, url, s3_options)
    assert report["backend"] == backend
    images = sorted(sum(epochs_of(report["stock_unshuffled"])[0:1], []))
    assert len(set(images)) == IMAGES  # every row differs: a row names its image
    for name in ("defaults", "backup", "processes", "unshuffled"):
        result = report[name]
        where = f"{backend}/{name}"
        assert result["n"] == IMAGES, where
        for epoch, rows in enumerate(epochs_of(result["steps"])):
            twice = sorted({r for r in rows if rows.count(r) > 1})
            assert sorted(rows) == images, f"{where} epoch {epoch}: twice {twice}"
        assert result["gets"] == EPOCHS * IMAGES, where  # one GET per image per epoch
    # Unshuffled, step for step what stock Keras trains on the local copy.
    assert report["unshuffled"]["steps"] == report["stock_unshuffled"]
    # The grain dataset too: each epoch each image once, one GET per image per epoch (the
    # first elements Keras's build or spec batch read are kept for the pass that follows).
    grain = report["grain"]
    grain_epochs = [sorted(rows) for rows in epochs_of(grain["steps"])]
    assert len(set(grain_epochs[0])) == IMAGES
    assert grain_epochs == [grain_epochs[0]] * EPOCHS
    assert grain["gets"] == EPOCHS * IMAGES
    # What `fit` raises for a file that cannot be decoded: the package's own error, naming
    # the URL; on TensorFlow, past the batches its adapter reads itself, TensorFlow's
    # `InvalidArgumentError` (an `OpError`) with the URL in its message.
    for case in ("corrupt_first", "corrupt_later"):
        raised = report[case]
        later_on_tf = case == "corrupt_later" and backend == "tensorflow"
        assert raised["error"] == ("InvalidArgumentError" if later_on_tf else "ImageDecodeError")
        assert ("builtins.ValueError" in raised["bases"]) != later_on_tf, raised
        assert raised["names_url"], raised
    # `evaluate` and `predict` raise as `fit` does.
    for mode in ("evaluate", "predict"):
        for case in ("corrupt_first", "corrupt_later"):
            raised = report[f"{case}_{mode}"]
            later_on_tf = case == "corrupt_later" and backend == "tensorflow"
            wanted = "InvalidArgumentError" if later_on_tf else "ImageDecodeError"
            assert raised["error"] == wanted and raised["names_url"], (mode, case, raised)
    # A store that stayed away past the retry deadline, in the first batch: the package's
    # `ImageLoadError` (an `OSError`) on every backend, saying it gave up and naming the URL.
    gave_up = report["gave_up_first"]
    assert gave_up["error"] == "ImageLoadError" and "builtins.OSError" in gave_up["bases"]
    assert gave_up["gave_up"] and gave_up["names_url"], gave_up
    # A file the store does not have (an `OSError`): TensorFlow's `UnknownError` there.
    missing = report["missing_later"]
    tf_error = backend == "tensorflow"
    assert missing["error"] == ("UnknownError" if tf_error else "FileNotFoundError"), missing
    assert ("builtins.OSError" in missing["bases"]) != tf_error and missing["names_url"]
    # Skipped: each epoch trains the 11 readable images once, and `skipped` names the file.
    skipped = report["corrupt_skipped"]
    assert skipped["error"] is None, skipped
    rows = sum(skipped["steps"], [])
    assert len(rows) == EPOCHS * 11 and len(set(rows)) == 11
    assert set(skipped["skipped"]) == {url + "-broken/bad.png"}
    assert report["wrong_bucket"] == ["FileNotFoundError", True]
    multiprocessing_warned = any(
        "use_multiprocessing=True is not used" in w for w in report["processes"]["warnings"]
    )
    assert multiprocessing_warned == (backend != "tensorflow")
