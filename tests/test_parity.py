"""On local files, remote_keras's batches equal stock Keras's, array for array."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from keras.src.legacy.preprocessing import image as keras_image

import remote_keras as rk
from tests.helpers import AUGMENT, assert_same_batch


def both(method, gen_kwargs, *args, **kwargs):
    stock = getattr(keras_image.ImageDataGenerator(**gen_kwargs), method)(*args, **kwargs)
    ours = getattr(rk.ImageDataGenerator(**gen_kwargs), method)(*args, **kwargs)
    return stock, ours


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("augment", [False, True], ids=["plain", "augment"])
@pytest.mark.parametrize("access", ["getitem", "next"])
def test_dataframe_batches_equal_stock(image_dir, shuffle, augment, access):
    directory, df = image_dir
    stock, ours = both(
        "flow_from_dataframe",
        AUGMENT if augment else {},
        df,
        directory,
        target_size=(16, 18),
        batch_size=4,
        shuffle=shuffle,
        seed=11,
    )
    with ours:
        if access == "getitem":
            # Stock reseeds per call, so each index is read exactly once, in order.
            pairs = [(stock[i], ours[i]) for i in range(len(stock))]
        else:  # three epochs through next(): permutations and seeds roll over the same way
            pairs = [(next(stock), next(ours)) for _ in range(3 * len(stock))]
        for a, b in pairs:
            assert_same_batch(a, b)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("augment", [False, True], ids=["plain", "augment"])
def test_directory_batches_equal_stock(image_dir, shuffle, augment):
    directory, _ = image_dir
    stock, ours = both(
        "flow_from_directory",
        AUGMENT if augment else {},
        directory,
        target_size=(12, 12),
        batch_size=5,
        shuffle=shuffle,
        seed=5,
    )
    with ours:
        assert ours.filenames == stock.filenames
        assert ours.filepaths == stock.filepaths
        assert ours.class_indices == stock.class_indices
        np.testing.assert_array_equal(ours.classes, stock.classes)
        for i in range(len(stock)):
            assert_same_batch(stock[i], ours[i])


@pytest.mark.parametrize(
    "class_mode, y_col, extra",
    [
        ("categorical", "class", {}),
        ("binary", "binary", {}),
        ("sparse", "class", {}),
        ("input", "class", {}),
        ("raw", "value", {}),
        ("multi_output", ["value", "weight"], {}),
        (None, "class", {}),
        ("categorical", "class", {"weight_col": "weight"}),
        ("categorical", "class", {"classes": ["dog", "cat"]}),
    ],
)
def test_class_modes_equal_stock(image_dir, class_mode, y_col, extra):
    directory, df = image_dir
    df = df.assign(binary=np.where(df["class"] == "cat", "cat", "other"))
    stock, ours = both(
        "flow_from_dataframe",
        {},
        df,
        directory,
        y_col=y_col,
        class_mode=class_mode,
        target_size=(8, 8),
        batch_size=6,
        shuffle=False,
        **extra,
    )
    with ours:
        assert ours.filenames == stock.filenames
        assert getattr(ours, "class_indices", None) == getattr(stock, "class_indices", None)
        for i in range(len(stock)):
            assert_same_batch(stock[i], ours[i])


@pytest.mark.parametrize("color_mode", ["rgb", "rgba", "grayscale"])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic", "lanczos"])
@pytest.mark.parametrize("keep_aspect_ratio", [False, True])
def test_decoding_options_equal_stock(image_dir, color_mode, interpolation, keep_aspect_ratio):
    directory, _ = image_dir
    stock, ours = both(
        "flow_from_directory",
        {},
        directory,
        target_size=(10, 14),
        color_mode=color_mode,
        interpolation=interpolation,
        keep_aspect_ratio=keep_aspect_ratio,
        batch_size=32,
        shuffle=False,
    )
    with ours:
        assert_same_batch(stock[0], ours[0])


@pytest.mark.parametrize("subset", ["training", "validation"])
@pytest.mark.parametrize("method", ["flow_from_dataframe", "flow_from_directory"])
def test_validation_split_equals_stock(image_dir, subset, method):
    directory, df = image_dir
    args = (df, directory) if method == "flow_from_dataframe" else (directory,)
    stock, ours = both(
        method, {"validation_split": 0.3}, *args, subset=subset, target_size=(8, 8), shuffle=False
    )
    with ours:
        assert ours.filenames == stock.filenames
        assert ours.samples == stock.samples
        assert_same_batch(stock[0], ours[0])


def test_found_message_and_defaults_equal_stock(image_dir, capsys):
    directory, df = image_dir
    stock, ours = both("flow_from_directory", {}, directory)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1] == "Found 21 images belonging to 3 classes."
    for attr in ("data_format", "dtype", "target_size", "batch_size", "shuffle", "n"):
        assert getattr(ours, attr) == getattr(stock, attr)
    ours.close()

    bare = rk.DataFrameIterator(df, directory)  # Keras's DataFrameIterator defaults
    stock_bare = keras_image.DataFrameIterator(df, directory)
    assert (bare.data_format, bare.dtype) == (stock_bare.data_format, stock_bare.dtype)
    assert "Found 21 validated image filenames belonging to 3 classes." in capsys.readouterr().out
    bare.close()


def test_past_the_end_raises_value_error_like_stock(image_dir):
    directory, df = image_dir
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, batch_size=8) as it:
        assert len(it) == 3
        with pytest.raises(ValueError, match="Asked to retrieve element 3"):
            it[3]


def test_flow_from_directory_rejects_unknown_keyword_like_stock(image_dir):
    with pytest.raises(TypeError):
        rk.ImageDataGenerator().flow_from_directory(image_dir[0], not_an_argument=1)


def test_flow_from_dataframe_ignores_unknown_keywords_like_stock_but_warns(image_dir):
    directory, df = image_dir
    with pytest.warns(UserWarning, match="keep_aspect_ratio"):
        it = rk.ImageDataGenerator().flow_from_dataframe(
            df, directory, keep_aspect_ratio=True, target_size=(8, 8), shuffle=False
        )
    with it:
        assert it.keep_aspect_ratio is False  # ignored, exactly as Keras does


def test_deprecated_dataframe_arguments_warn(image_dir):
    directory, df = image_dir
    with pytest.warns(DeprecationWarning, match="has_ext"):
        it = rk.ImageDataGenerator().flow_from_dataframe(df, directory, has_ext=True)
    it.close()
    with pytest.warns(DeprecationWarning, match="other"):
        it = rk.ImageDataGenerator().flow_from_dataframe(
            df, directory, y_col="value", class_mode="other"
        )
    assert it.class_mode == "raw"
    it.close()


def test_missing_local_files_dropped_with_stock_warning(image_dir):
    directory, df = image_dir
    df = pd.concat([df, pd.DataFrame([{"filename": "cat/missing.png", "class": "cat"}])])
    with pytest.warns(UserWarning, match="Found 1 invalid image filename"):
        it = rk.ImageDataGenerator().flow_from_dataframe(df, directory)
    with it:
        assert it.samples == 21


def test_save_to_dir_names_and_pixels_equal_stock(image_dir, tmp_path):
    directory, df = image_dir
    stock_dir, our_dir = tmp_path / "stock", tmp_path / "ours"
    stock_dir.mkdir()
    our_dir.mkdir()
    kwargs = dict(target_size=(8, 8), batch_size=4, shuffle=True, seed=2, save_prefix="aug")
    stock = keras_image.ImageDataGenerator(**AUGMENT).flow_from_dataframe(
        df, directory, save_to_dir=str(stock_dir), **kwargs
    )
    ours = rk.ImageDataGenerator(**AUGMENT).flow_from_dataframe(
        df, directory, save_to_dir=str(our_dir), **kwargs
    )
    with ours:
        stock[0], ours[0]
    assert sorted(os.listdir(stock_dir)) == sorted(os.listdir(our_dir))
    for name in os.listdir(stock_dir):
        assert (stock_dir / name).read_bytes() == (our_dir / name).read_bytes()


def test_global_numpy_random_state_is_left_alone(image_dir):
    directory, df = image_dir
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    with rk.ImageDataGenerator(**AUGMENT).flow_from_dataframe(df, directory, seed=4) as it:
        it[0]
    assert np.random.random() == expected


def _plus_one(x):
    return x + 1


# Each case is on the direct path (8-bit pixels rescaled straight into the batch) or
# just off it, where the general path must give the same arrays.
STANDARDIZE_CASES = {
    "rescale": ({"rescale": 1 / 255}, {}, True),
    "int-rescale": ({"rescale": 2}, {}, True),
    "no-generator-rescale": ({}, {}, True),
    "grayscale": ({"rescale": 1 / 255}, {"color_mode": "grayscale"}, True),
    "rgba": ({"rescale": 1 / 255}, {"color_mode": "rgba"}, True),
    "flip": ({"rescale": 1 / 255, "horizontal_flip": True}, {}, True),  # half identity
    "numpy-rescale": ({"rescale": np.float64(1 / 255)}, {}, False),
    "preprocessing": ({"rescale": 1 / 255, "preprocessing_function": _plus_one}, {}, False),
    "samplewise": ({"rescale": 1 / 255, "samplewise_center": True}, {}, False),
    "float64": ({"rescale": 1 / 255, "dtype": "float64"}, {}, False),
    "float16": ({"rescale": 1 / 255, "dtype": "float16"}, {}, False),
    "channels-first": ({"rescale": 1 / 255, "data_format": "channels_first"}, {}, False),
}


@pytest.mark.parametrize("case", list(STANDARDIZE_CASES))
def test_direct_and_general_decoding_paths_equal_stock(image_dir, case):
    from remote_keras.pipeline.batches import _writes_direct

    gen_kwargs, flow_kwargs, direct = STANDARDIZE_CASES[case]
    directory, _ = image_dir
    stock, ours = both(
        "flow_from_directory",
        gen_kwargs,
        directory,
        target_size=(12, 9),
        batch_size=5,
        shuffle=True,
        seed=3,
        **flow_kwargs,
    )
    with ours:
        assert _writes_direct(ours, ours.batch_pixels()) is direct
        for i in range(len(stock)):
            assert_same_batch(stock[i], ours[i])


def test_plain_rescale_takes_the_direct_path_per_sample(image_dir, monkeypatch):
    from remote_keras.pipeline import batches

    def general_path(*args, **kwargs):
        raise AssertionError("the general path ran")

    directory, _ = image_dir
    gen = rk.ImageDataGenerator(rescale=1 / 255)
    with gen.flow_from_directory(directory, target_size=(12, 9), batch_size=5) as ours:
        monkeypatch.setattr(batches, "img_to_array", general_path)
        x, _ = ours[0]  # identity transforms: no `img_to_array`, no `apply_transform`
        assert x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
