"""On Keras 2, `rk.image_dataset_from_directory` equals `tf.keras.utils`' function.

Same files, class names, element spec, cardinality, printed lines and batches over two
passes on local folders; through S3 the same batches as stock Keras 2 on the local copy.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import remote_keras as rk
from remote_keras.testing.data import smooth_image
from tests.helpers import assert_same_batch


def _epochs(dataset, count: int = 2) -> list[list]:
    return [list(dataset.as_numpy_iterator()) for _ in range(count)]


def _assert_same(stock, ours, passes: int = 2) -> None:
    assert ours.file_paths == stock.file_paths
    assert ours.class_names == stock.class_names
    assert ours.element_spec == stock.element_spec
    assert int(ours.cardinality()) == int(stock.cardinality())
    for expected, got in zip(_epochs(stock, passes), _epochs(ours, passes)):
        assert len(expected) == len(got)
        for a, b in zip(expected, got):
            assert_same_batch(a, b)


PARITY = [
    dict(),
    dict(label_mode="categorical", color_mode="grayscale"),
    dict(label_mode="binary", class_names=["dog", "cat"]),  # Keras 2 needs every class named
    dict(label_mode=None, crop_to_aspect_ratio=True),
    dict(smart_resize=True, interpolation="bicubic"),
    dict(batch_size=None),
    dict(shuffle=False, interpolation="nearest"),
    dict(labels=None),
    dict(validation_split=0.3, subset="training"),
    dict(validation_split=0.25, subset="both", label_mode="categorical"),
]


@pytest.mark.slow
@pytest.mark.parametrize("kwargs", PARITY, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_local_equals_keras_2_over_two_passes(tfk, two_class_dir, capsys, kwargs):
    kwargs = dict(dict(image_size=(9, 11), batch_size=5, seed=7), **kwargs)
    stock = tfk.utils.image_dataset_from_directory(two_class_dir, **kwargs)
    said = capsys.readouterr().out
    ours = rk.image_dataset_from_directory(two_class_dir, **kwargs)
    assert capsys.readouterr().out == said
    if kwargs.get("subset") == "both":
        for s, o in zip(stock, ours):
            _assert_same(s, o)
    else:
        _assert_same(stock, ours)


def test_explicit_labels_and_rgba_equal_keras_2(tfk, tmp_path):
    rng = np.random.default_rng(1)
    for i in range(9):
        smooth_image(rng, 10 + i, 13 + i, "RGBA").save(tmp_path / f"{i:02d}.png")
    kwargs = dict(label_mode="categorical", color_mode="rgba", image_size=(6, 5), seed=3)
    labels = [i % 3 for i in range(9)]
    stock = tfk.utils.image_dataset_from_directory(tmp_path, labels=list(labels), **kwargs)
    ours = rk.image_dataset_from_directory(tmp_path, labels=list(labels), **kwargs)
    _assert_same(stock, ours)
    assert ours.class_names == [0, 1, 2]  # Keras 2 keeps the labels themselves


def test_arguments_keras_2_refuses_are_refused_alike(tfk, two_class_dir):
    cases = [
        (dict(class_names=["cat"]), ValueError),  # Keras 2: every class folder, no subset
        (dict(interpolation="sideways"), NotImplementedError),
        (dict(pad_to_aspect_ratio=True), TypeError),  # Keras 3's argument
        (dict(validation_split=0.2), ValueError),
    ]
    for kwargs, kind in cases:
        with pytest.raises(kind):
            tfk.utils.image_dataset_from_directory(two_class_dir, **kwargs)
        with pytest.raises(kind):
            rk.image_dataset_from_directory(two_class_dir, **kwargs)


@pytest.mark.slow
def test_s3_equals_keras_2_on_the_local_copy(tfk, two_class_dir, s3fs_direct, s3_options):
    from tests.helpers import put_folder

    prefix = f"data/k2-dataset-{os.getpid()}"
    put_folder(s3fs_direct, two_class_dir, prefix)
    kwargs = dict(image_size=(7, 9), batch_size=4, seed=5, validation_split=0.2, subset="both")
    stock = tfk.utils.image_dataset_from_directory(two_class_dir, **kwargs)
    url = f"s3://{prefix}"
    ours = rk.image_dataset_from_directory(url, storage_options=s3_options, **kwargs)
    for s, o in zip(stock, ours):
        relative = [os.path.relpath(p, two_class_dir) for p in s.file_paths]
        assert o.file_paths == [f"{url}/{r}" for r in relative]
        assert o.class_names == s.class_names
        for expected, got in zip(_epochs(s), _epochs(o)):
            assert len(expected) == len(got)
            for a, b in zip(expected, got):
                assert_same_batch(a, b)


@pytest.fixture
def two_class_dir(tmp_path):
    """Two class folders of small PNGs and JPEGs of varied sizes (one nested)."""
    rng = np.random.default_rng(5)
    for name, count in (("cat", 7), ("dog", 6)):
        folder = tmp_path / "images" / name
        (folder / "inner").mkdir(parents=True)
        for i in range(count):
            image = smooth_image(rng, 12 + i, 9 + 2 * i, "RGB")
            where = folder / "inner" if i == 0 else folder
            image.save(where / f"{name}_{i}.{'jpg' if i % 2 else 'png'}")
    return str(tmp_path / "images")
