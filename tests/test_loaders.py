"""The pluggable loader, decoding semantics, HTTP and memory URLs, and error messages."""

from __future__ import annotations

import importlib
import io
import os
import pickle
import sys

import fsspec
import numpy as np
import pandas as pd
import pytest
from keras.src.utils import image_utils
from PIL import Image

import remote_keras as rk
from remote_keras.storage import locations
from tests.helpers import assert_same_batch


@pytest.mark.parametrize("color_mode", ["rgb", "rgba", "grayscale"])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic", "box"])
@pytest.mark.parametrize("keep_aspect_ratio", [False, True])
@pytest.mark.parametrize("kind", ["bytes", "file", "pil", "array"])
def test_every_loader_output_decodes_like_load_img(
    image_dir, color_mode, interpolation, keep_aspect_ratio, kind
):
    directory, df = image_dir
    path = os.path.join(directory, df["filename"][3])
    options = dict(
        color_mode=color_mode,
        target_size=(9, 13),
        interpolation=interpolation,
        keep_aspect_ratio=keep_aspect_ratio,
    )
    expected = image_utils.img_to_array(image_utils.load_img(path, **options))
    raw = open(path, "rb").read()
    data = {
        "bytes": lambda: raw,
        "file": lambda: io.BufferedReader(io.BytesIO(raw)),
        "pil": lambda: Image.open(io.BytesIO(raw)),
        "array": lambda: np.asarray(Image.open(io.BytesIO(raw)).convert("RGB")),
    }[kind]()
    got = image_utils.img_to_array(rk.decode_image(data, path, **options))
    np.testing.assert_array_equal(got, expected)


def test_custom_loader_does_all_reading(image_dir):
    directory, df = image_dir
    calls = []

    def loader(path):
        calls.append(path)
        with open(path.removeprefix("mystore://"), "rb") as f:
            return f.read()

    gen = rk.ImageDataGenerator(loader=loader)
    it = gen.flow_from_dataframe(
        df,
        "mystore://" + directory,
        target_size=(8, 8),
        shuffle=False,
        validate_filenames=False,
        prefetch_batches=0,
    )
    with it:
        x, _ = it[0]
    assert sorted(calls) == sorted(it.filepaths[:32])
    stock = rk.ImageDataGenerator().flow_from_dataframe(
        df, directory, target_size=(8, 8), shuffle=False
    )
    with stock:
        np.testing.assert_array_equal(x, stock[0][0])


def test_loader_given_to_flow_overrides_the_generators(image_dir):
    directory, df = image_dir
    seen = []

    def loader(path):
        seen.append(path)
        return np.zeros((5, 5, 3), dtype="uint8")

    gen = rk.ImageDataGenerator(loader=lambda p: 1 / 0)
    with gen.flow_from_dataframe(df, directory, loader=loader, target_size=(5, 5)) as it:
        x, _ = it[0]
    assert seen and not x.any()


def test_loader_returning_wrong_type_is_a_clear_type_error(image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator(loader=lambda path: 42)
    with gen.flow_from_dataframe(df, directory, shuffle=False) as it:
        with pytest.raises(TypeError, match=r"Received: int for .*cat_0\.png"):
            it[0]


def test_loader_must_be_callable():
    with pytest.raises(TypeError, match="`loader` must be a callable"):
        rk.DataFrameIterator(pd.DataFrame({"filename": [], "class": []}), loader="s3")


def test_corrupt_image_names_the_url():
    fs = fsspec.filesystem("memory")
    fs.pipe("/corrupt/cat/bad.jpg", b"\xff\xd8\xff\xe0 not really a jpeg")
    df = pd.DataFrame({"filename": ["cat/bad.jpg"], "class": ["cat"]})
    with rk.ImageDataGenerator().flow_from_dataframe(df, "memory://corrupt") as it:
        with pytest.raises(rk.ImageDecodeError, match="memory://corrupt/cat/bad.jpg") as info:
            it[0]
    assert info.value.url == "memory://corrupt/cat/bad.jpg"


def test_memory_urls_equal_local(image_dir):
    directory, df = image_dir
    fs = fsspec.filesystem("memory")
    for name in df["filename"]:
        fs.pipe(f"/mem-images/{name}", open(os.path.join(directory, name), "rb").read())
    gen = rk.ImageDataGenerator()
    with gen.flow_from_directory("memory://mem-images", target_size=(6, 6), shuffle=False) as it:
        local = rk.ImageDataGenerator().flow_from_directory(
            directory, target_size=(6, 6), shuffle=False
        )
        with local:
            assert it.filenames == local.filenames
            assert_same_batch(local[0], it[0])


def test_http_urls(image_dir, http_images):
    directory, df = image_dir
    url, _ = http_images
    urls = df.assign(filename=url + "/" + df["filename"])
    with (
        rk.ImageDataGenerator().flow_from_dataframe(
            urls, target_size=(6, 6), shuffle=False, batch_size=32
        ) as it,
        rk.ImageDataGenerator().flow_from_dataframe(
            df, directory, target_size=(6, 6), shuffle=False, batch_size=32
        ) as local,
    ):
        assert it.samples == 21
        assert_same_batch(local[0], it[0])


def test_missing_backend_names_the_package_and_the_extra(monkeypatch):
    # gcsfs is a dev dependency: its absence is simulated (`import gcsfs` fails, and fsspec
    # forgets the class it may have loaded already).
    registry = importlib.import_module("fsspec.registry")
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    for protocol in ("gs", "gcs"):
        monkeypatch.delitem(registry._registry, protocol, raising=False)
    df = pd.DataFrame({"filename": ["gs://bucket/a.png"], "class": ["a"]})
    line = r'pip install "\.\[gcs\]" in a clone of remote_keras, which installs gcsfs'
    with pytest.raises(rk.MissingBackendError, match=line):
        rk.ImageDataGenerator().flow_from_dataframe(df)


def test_unknown_protocol_is_named():
    df = pd.DataFrame({"filename": ["nosuchproto://bucket/a.png"], "class": ["a"]})
    with pytest.raises(ValueError, match="nosuchproto://bucket/a.png"):
        rk.ImageDataGenerator().flow_from_dataframe(df)


def test_join_follows_os_path_join_and_urls():
    assert locations.join("s3://b/p/", "c/x.png") == "s3://b/p/c/x.png"
    assert locations.join("s3://b/p", "gs://other/y.png") == "gs://other/y.png"
    assert locations.join("/data", "/abs/x.png") == "/abs/x.png"
    assert locations.join("", "x.png") == "x.png"
    assert locations.join(None, "s3://b/x.png") == "s3://b/x.png"
    assert locations.join("data", "x.png") == os.path.join("data", "x.png")


def test_secrets_are_redacted_from_urls():
    from remote_keras.errors import redact

    assert redact("https://user:pw@host/x.png") == "https://***@host/x.png"
    assert "abc" not in redact("https://h/x.png?X-Amz-Signature=abc&a=1")
    assert redact("s3://bucket/key") == "s3://bucket/key"


def test_the_clients_settings_travel_as_one_object_from_the_options_to_the_loader():
    from remote_keras.pipeline.engine import ReadEngine
    from remote_keras.pipeline.options import LoaderOptions
    from remote_keras.storage.loaders import ClientSettings, FsspecLoader, ObstoreLoader

    secret = {"key": "AKIA", "secret": "s3cr3t"}
    options = LoaderOptions(loader="obstore", storage_options=secret, retries=2, pre_sign=False)
    engine = ReadEngine(options)
    settings = engine.client_settings
    assert settings == ClientSettings(secret, options.retry_policy.timeout_s, False)
    assert engine.loader.settings is settings  # the same object, not three arguments again
    assert engine.loader._fallback.settings is settings  # and on to obstore's fsspec fallback
    assert "s3cr3t" not in repr(settings)
    copy = pickle.loads(pickle.dumps(engine.loader))
    assert isinstance(copy, ObstoreLoader) and copy.settings == settings
    assert ClientSettings.of(secret) == ClientSettings(secret)  # options alone are settings too
    assert FsspecLoader.from_settings(settings).timeout_s == options.retry_policy.timeout_s
    with pytest.raises(TypeError, match="pre_sign"):
        ClientSettings({"pre_sign": True})
    with pytest.raises(ValueError, match="pre_sign"):
        ClientSettings({}, None, "yes")  # type: ignore[arg-type]
