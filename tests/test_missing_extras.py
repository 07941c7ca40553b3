"""A missing optional client fails with `MissingBackendError` naming the extra that installs it.

The clients are dev dependencies: their absence is simulated (`sys.modules[name] = None` makes
`import name` raise `ImportError`, and fsspec forgets the classes it may have loaded). No test
here reaches a network: every one fails before its first request. TensorFlow is an extra too
(`make test-notf` runs these where it is not installed).
"""

from __future__ import annotations

import importlib
import importlib.util
import pickle
import sys
from pathlib import Path

import pandas as pd
import pytest

import remote_keras as rk
from remote_keras.storage.loaders import ObstoreLoader
from tests.helpers import noise_png

# `format="tf"` (the default) checks for TensorFlow first: without it, the grain dataset's
# reads meet the missing client.
DATASET_FORMAT = "tf" if importlib.util.find_spec("tensorflow") else "grain"


def hide(monkeypatch, module: str, protocols: tuple[str, ...] = ()) -> None:
    """Makes `module` (and its submodules) fail to import, and fsspec forget `protocols`."""
    for name in [n for n in sys.modules if n.startswith(module + ".")] + [module]:
        monkeypatch.setitem(sys.modules, name, None)
    registry = importlib.import_module("fsspec.registry")
    for protocol in protocols:
        monkeypatch.delitem(registry._registry, protocol, raising=False)
        # fsspec's own implementation of the protocol (its HTTP one imports aiohttp), if another
        # test of this process has imported it already: it holds the client it imported.
        implementation = registry.known_implementations.get(protocol, {}).get("class", "")
        if implementation.startswith("fsspec."):
            monkeypatch.setitem(sys.modules, implementation.rsplit(".", 1)[0], None)


def install_line(extra: str, package: str) -> str:
    return rf'pip install "\.\[{extra}\]" in a clone of remote_keras, which installs .*{package}'


CLIENTS = [
    ("s3://bucket/train", "s3fs", ("s3", "s3a"), "s3", "s3fs"),
    ("gs://bucket/train", "gcsfs", ("gs", "gcs"), "gcs", "gcsfs"),
    ("az://container/train", "adlfs", ("az", "abfs"), "azure", "adlfs"),
    ("http://127.0.0.1:9/train", "aiohttp", ("http", "https"), "http", "aiohttp"),
    ("lakefs://repo/main/train", "lakefs_spec", ("lakefs",), "lakefs", "lakefs-spec"),
]


@pytest.mark.parametrize(
    ("url", "module", "protocols", "extra", "package"), CLIENTS, ids=[c[3] for c in CLIENTS]
)
def test_a_url_without_its_client_names_the_extra(
    monkeypatch, url, module, protocols, extra, package
):
    hide(monkeypatch, module, protocols)
    rows = pd.DataFrame({"filename": [f"{url}/a/x.png"], "class": ["a"]})
    calls = {
        "flow_from_directory": lambda: rk.ImageDataGenerator(loader="fsspec").flow_from_directory(
            url
        ),
        "flow_from_dataframe": lambda: rk.ImageDataGenerator(loader="fsspec").flow_from_dataframe(
            rows
        ),
        "image_dataset_from_directory": lambda: rk.image_dataset_from_directory(
            url, loader="fsspec", format=DATASET_FORMAT
        ),
    }
    for name, call in calls.items():
        with pytest.raises(rk.MissingBackendError, match=install_line(extra, package)) as info:
            call()
        assert url in str(info.value), name
    copy = pickle.loads(pickle.dumps(info.value))
    assert (type(copy), str(copy)) == (rk.MissingBackendError, str(info.value))


def test_lakefs_records_and_pins_without_lakefs_spec_name_the_extra(monkeypatch):
    hide(monkeypatch, "lakefs_spec", ("lakefs",))
    with pytest.raises(rk.MissingBackendError, match=install_line("lakefs", "lakefs-spec")):
        rk.pin_url("lakefs://repo/main/train/")
    with pytest.raises(rk.MissingBackendError, match=install_line("lakefs", "lakefs-spec")):
        rk.read_table("lakefs://repo/main/labels.csv")


def test_the_obstore_loader_without_obstore_names_it(monkeypatch):
    hide(monkeypatch, "obstore")
    rows = pd.DataFrame({"filename": ["s3://bucket/a/x.png"], "class": ["a"]})
    with rk.ImageDataGenerator(loader="obstore").flow_from_dataframe(
        rows, validate_filenames=False
    ) as it:
        with pytest.raises(rk.MissingBackendError, match=install_line("s3", "obstore")):
            it[0]
    with pytest.raises(rk.MissingBackendError, match=install_line("s3", "obstore")):
        ObstoreLoader()("s3://bucket/a/x.png")  # called as a plain loader


def test_a_lakectl_local_folder_is_recorded_without_lakefs_spec(monkeypatch, tmp_path):
    # Read from disk, a `lakectl local` folder needs no lakeFS client: its record is written
    # and read back without the `lakefs` extra (PyYAML, for `.lakefs_ref.yaml`, is a dependency).
    hide(monkeypatch, "lakefs_spec", ("lakefs",))
    (tmp_path / "data" / "train" / "a").mkdir(parents=True)
    (tmp_path / "data" / "train" / "a" / "x.png").write_bytes(noise_png(0))
    (tmp_path / "data" / ".lakefs_ref.yaml").write_text(
        "src: lakefs://repo/main/\nat_head: c0ffee\n"
    )
    gen = rk.ImageDataGenerator()
    with gen.flow_from_directory(tmp_path / "data" / "train", target_size=(6, 6)) as it:
        record = rk.write_data_version(it, tmp_path / "dv.json")
    (entry,) = record["data"]
    assert (entry["repository"], entry["ref"], entry["commit_id"]) == ("repo", "main", "c0ffee")
    assert entry["urls"] == ["lakefs://repo/c0ffee/train/"]
    assert rk.pinned_urls(tmp_path / "dv.json") == ["lakefs://repo/c0ffee/train/"]
    assert rk.pinned_urls(tmp_path / "data") == ["lakefs://repo/c0ffee/"]
    written = tmp_path / "dv.lakefs" / "all" / "repo" / "train" / ".lakefs_ref.yaml"
    assert rk.read_lakefs_ref(written) == {"src": "lakefs://repo/main/train/", "at_head": "c0ffee"}


def test_format_grain_without_grain_names_the_extra(monkeypatch, tmp_path):
    hide(monkeypatch, "grain")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.png").write_bytes(noise_png(0))
    with pytest.raises(rk.MissingBackendError, match=r'pip install "\.\[grain\]" in a clone'):
        rk.image_dataset_from_directory(tmp_path, format="grain")


def test_format_tf_and_to_tf_dataset_without_tensorflow_name_the_extra(monkeypatch, tmp_path):
    hide(monkeypatch, "tensorflow")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.png").write_bytes(noise_png(0))
    tensorflow_line = install_line("tensorflow", "tensorflow")
    with pytest.raises(rk.MissingBackendError, match=tensorflow_line) as info:
        rk.image_dataset_from_directory(tmp_path)  # format="tf", the default
    assert 'format="grain"' in str(info.value)  # what works without it
    copy = pickle.loads(pickle.dumps(info.value))
    assert (type(copy), str(copy)) == (rk.MissingBackendError, str(info.value))
    with rk.ImageDataGenerator().flow_from_directory(tmp_path, target_size=(4, 4)) as it:
        assert it[0][0].shape == (1, 4, 4, 3)  # the iterator itself needs no TensorFlow
        with pytest.raises(rk.MissingBackendError, match=tensorflow_line):
            it.to_tf_dataset()


def test_keras_2_without_tensorflow_names_the_extra(monkeypatch):
    hide(monkeypatch, "tensorflow")
    monkeypatch.delitem(sys.modules, "remote_keras.keras2.keras_api", raising=False)
    with pytest.raises(rk.MissingBackendError, match=install_line("tensorflow", "tensorflow")):
        importlib.import_module("remote_keras.keras2.keras_api")  # tf.keras: Keras 2's only home


def test_every_install_line_can_run_from_a_clone():
    """No page or message names a `remote-keras[...]` package: none is on the package index
    (anyone could publish one); every install line is the clone's `pip install ".[extra]"`."""
    root = Path(__file__).parents[1]
    places = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    places += sorted((root / "remote_keras").rglob("*.py"))
    places += sorted((root / "docs" / "notebooks").glob("*.ipynb"))
    naming = [str(p.relative_to(root)) for p in places if "remote-keras[" in p.read_text()]
    assert naming == []
