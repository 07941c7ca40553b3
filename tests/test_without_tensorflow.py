"""Keras 3 on JAX or PyTorch without TensorFlow, which is the optional `tensorflow` extra.

A fresh interpreter makes TensorFlow absent (`sys.modules["tensorflow"] = None`: `import
tensorflow` fails and `importlib.util.find_spec` finds nothing, as when it is not installed)
before anything is imported. There `import remote_keras`, `flow_from_directory` (from S3)
and `flow_from_dataframe`, a `fit` with `BackupAndRestore` and `format="grain"` work, and
`format="tf"` and `to_tf_dataset()` raise `MissingBackendError` naming the extra. `make
test-notf` runs this file, and the JAX and PyTorch tests, where TensorFlow is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap

from tests.helpers import run_script

# Where `make test-notf` runs this (KERAS_BACKEND=jax, then torch), the script runs on the
# backend of the run; in the main suite (TensorFlow's), on JAX.
BACKEND = "torch" if os.environ.get("KERAS_BACKEND") == "torch" else "jax"

ABSENT = """
import sys
sys.modules["tensorflow"] = None  # as if not installed
"""

SCRIPT = """
import json, pickle
import remote_keras as rk

loaded = sorted({m.split(".")[0] for m in sys.modules if sys.modules[m] is not None})
report = {"at_import": [m for m in loaded if m in ("keras", "jax", "torch")]}
import keras
import pandas as pd

job = json.load(open("job.json"))
report["backend"] = keras.backend.backend()
gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=job["options"])
flow = dict(target_size=(8, 8), batch_size=4, shuffle=False)
rows = pd.DataFrame(job["rows"])
with gen.flow_from_directory(job["url"], **flow) as remote, gen.flow_from_directory(
    job["local"], **flow
) as local, gen.flow_from_dataframe(rows, job["local"], **flow) as frame:
    report["same"] = all(
        (remote[i][0] == local[i][0]).all() and (remote[i][1] == local[i][1]).all()
        for i in range(len(local))
    )
    report["frame"] = [frame.n, list(frame[0][0].shape)]
    try:
        remote.to_tf_dataset()
    except rk.MissingBackendError as exc:
        report["to_tf_dataset"] = str(exc)
    model = keras.Sequential([
        keras.Input((8, 8, 3)), keras.layers.Flatten(),
        keras.layers.Dense(local.num_classes, activation="softmax"),
    ])
    model.compile("sgd", "categorical_crossentropy")
    backup = rk.BackupAndRestore("backup", train_iterator=remote)
    history = model.fit(remote, epochs=2, callbacks=[backup], verbose=0)
    report["epochs"] = len(history.history["loss"])
try:
    rk.image_dataset_from_directory(job["local"], image_size=(8, 8))
except rk.MissingBackendError as exc:
    report["format_tf"] = str(pickle.loads(pickle.dumps(exc)))
grain = rk.image_dataset_from_directory(job["local"], image_size=(8, 8), format="grain")
report["grain"] = sum(len(x) for x, _ in grain)
report["tensorflow"] = sorted(m for m in sys.modules if sys.modules[m] is not None
                              and m.split(".")[0] == "tensorflow")
print(json.dumps(report))
"""

INSTALL = 'pip install ".[tensorflow]" in a clone of remote_keras, which installs tensorflow'


def test_tensorflow_is_where_the_run_expects_it():
    """`make test-notf` sets REMOTE_KERAS_EXPECT_NO_TENSORFLOW=1: its venv must lack it."""
    absent = importlib.util.find_spec("tensorflow") is None
    expected = os.environ.get("REMOTE_KERAS_EXPECT_NO_TENSORFLOW") == "1"
    assert absent == expected, (
        "TensorFlow is installed here, which `make test-notf` tests the absence of"
        if expected
        else "TensorFlow is not installed: the suite needs the `tensorflow` extra (`make "
        "test-notf` runs the tests that need none)"
    )


def test_keras_3_reads_fits_and_resumes_without_tensorflow(
    image_dir, s3_images, s3_options, tmp_path
):
    local, df = image_dir
    url, _ = s3_images
    job = dict(local=local, url=url, options=s3_options, rows=df.to_dict("list"))
    (tmp_path / "job.json").write_text(json.dumps(job))
    result = run_script(ABSENT + textwrap.dedent(SCRIPT), tmp_path, KERAS_BACKEND=BACKEND)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report.pop("at_import") == []  # `import remote_keras` loads no Keras
    assert report.pop("to_tf_dataset").startswith("iterator.to_tf_dataset() needs TensorFlow")
    format_tf = report.pop("format_tf")
    assert INSTALL in format_tf and 'format="grain"' in format_tf
    images = len(df)
    assert report == {
        "backend": BACKEND,
        "same": True,
        "frame": [images, [4, 8, 8, 3]],
        "epochs": 2,
        "grain": images,
        "tensorflow": [],
    }


def test_keras_on_its_tensorflow_backend_without_tensorflow_names_the_extra(tmp_path):
    script = ABSENT + textwrap.dedent(
        """
        import remote_keras as rk

        try:
            rk.ImageDataGenerator
        except rk.MissingBackendError as exc:
            print(exc)
        """
    )
    result = run_script(script, tmp_path, KERAS_BACKEND="tensorflow")
    assert result.returncode == 0, result.stderr[-3000:]
    said = result.stdout.strip().splitlines()[-1]
    assert said.startswith("Keras on its TensorFlow backend (Keras's default) needs TensorFlow")
    assert INSTALL in said and "KERAS_BACKEND=jax" in said
