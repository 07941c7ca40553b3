"""On Keras 2, batches equal stock `tf.keras.preprocessing.image`'s on the same local files."""

from __future__ import annotations

import numpy as np
import pytest

import remote_keras as rk
from tests.helpers import AUGMENT, assert_same_batch

SIZE = dict(target_size=(6, 6), batch_size=5)


def _both(stock_image, kwargs=None):
    kwargs = kwargs or {}
    return rk.ImageDataGenerator(**kwargs), stock_image.ImageDataGenerator(**kwargs)


def test_the_front_is_keras_2_and_subclasses_its_classes(stock_image, tfk, image_dir):
    directory, df = image_dir
    assert rk._front() == "keras2"
    assert issubclass(rk.ImageDataGenerator, tfk.preprocessing.image.ImageDataGenerator)
    ours = rk.ImageDataGenerator().flow_from_directory(directory, **SIZE)
    with ours:
        assert isinstance(ours, tfk.preprocessing.image.DirectoryIterator)
        assert isinstance(ours, tfk.utils.Sequence)
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, **SIZE) as ours:
        assert isinstance(ours, stock_image.DataFrameIterator)
    assert rk.NumpyArrayIterator is tfk.preprocessing.image.NumpyArrayIterator


@pytest.mark.parametrize(
    "class_mode, subset",
    [
        ("categorical", None),
        ("binary", "training"),
        ("sparse", "validation"),
        ("input", "training"),
        (None, "validation"),
    ],
)
def test_directory_batches_equal_stock(stock_image, image_dir, class_mode, subset):
    directory, _ = image_dir
    two = sorted(set(image_dir[1]["class"]))[:2] if class_mode == "binary" else None
    gens = _both(stock_image, dict(AUGMENT, validation_split=0.3))
    kwargs = dict(SIZE, class_mode=class_mode, classes=two, seed=11, subset=subset)
    ours, stock = (g.flow_from_directory(directory, **kwargs) for g in gens)
    with ours:
        assert ours.filenames == stock.filenames
        for i in range(len(stock)):
            assert_same_batch(ours[i], stock[i])
    ours, stock = (g.flow_from_directory(directory, **kwargs) for g in gens)
    with ours:  # next(): the stream, three epochs, permutations and seeds rolling over
        for _ in range(3 * len(stock)):
            assert_same_batch(next(ours), next(stock))


@pytest.mark.parametrize("class_mode", ["categorical", "binary", "sparse", "raw", "input", None])
def test_dataframe_batches_equal_stock(stock_image, image_dir, class_mode):
    directory, df = image_dir
    df = df.assign(weight=np.linspace(0.5, 2, len(df)), value=np.arange(len(df), dtype="float32"))
    if class_mode == "binary":
        df = df[df["class"].isin(sorted(set(df["class"]))[:2])]
    y_col = "value" if class_mode == "raw" else "class"
    gens = _both(stock_image, dict(AUGMENT, validation_split=0.25))
    for subset in ("training", "validation"):
        kwargs = dict(SIZE, class_mode=class_mode, y_col=y_col, weight_col="weight", seed=4)
        ours, stock = (g.flow_from_dataframe(df, directory, subset=subset, **kwargs) for g in gens)
        with ours:
            for i in range(len(stock)):
                assert_same_batch(ours[i], stock[i])
        ours, stock = (g.flow_from_dataframe(df, directory, subset=subset, **kwargs) for g in gens)
        with ours:  # next(): two epochs of the stream
            for _ in range(2 * len(stock)):
                assert_same_batch(next(ours), next(stock))


def test_dataframe_of_urls_from_s3_equals_stock_on_local_files(
    stock_image, image_dir, s3_images, s3_options
):
    directory, df = image_dir
    url, _ = s3_images
    ours = rk.ImageDataGenerator(**AUGMENT, storage_options=s3_options)
    stock = stock_image.ImageDataGenerator(**AUGMENT)
    remote = df.assign(filename=[f"{url}/{name}" for name in df["filename"]])
    with ours.flow_from_dataframe(remote, seed=2, **SIZE) as it:
        local = stock.flow_from_dataframe(df, directory, seed=2, **SIZE)
        for i in range(len(local)):
            assert_same_batch(it[i], local[i])


# ------------------------------------------------------------------ what parity means on Keras 2
# Stock Keras 2 draws a batch's augmentation from `seed + (calls of __getitem__ so far)`, and
# the order of each epoch after the first from the `np.random` state the last `__getitem__`
# left: by index, its batches depend on how many calls came before and in which order. The
# package's batch `b` of epoch `e` is a function of `(seed, e, b)`: stock's `next()` stream.


def _stream(it, epochs: int) -> list:
    return [next(it) for _ in range(epochs * len(it))]


def _by_index(it, epochs: int) -> list:
    batches = []
    for _ in range(epochs):
        batches += [it[i] for i in range(len(it))]
        it.on_epoch_end()
    return batches


def test_by_index_without_shuffle_equals_stock_over_epochs(stock_image, image_dir):
    directory, _ = image_dir
    ours, stock = (
        g.flow_from_directory(directory, shuffle=False, **SIZE) for g in _both(stock_image)
    )
    with ours:
        for a, b in zip(_by_index(stock, 3), _by_index(ours, 3), strict=True):
            assert_same_batch(a, b)


def test_by_index_with_shuffle_each_epoch_is_stocks_next_stream(stock_image, image_dir):
    """Epoch 0 by index equals stock's by index; every epoch equals stock's `next()` stream."""
    directory, _ = image_dir
    kwargs = dict(SIZE, seed=11)
    gens = _both(stock_image, AUGMENT)
    stream = _stream(gens[1].flow_from_directory(directory, **kwargs), 2)
    stock_indexed = _by_index(gens[1].flow_from_directory(directory, **kwargs), 2)
    with gens[0].flow_from_directory(directory, **kwargs) as ours:
        indexed = _by_index(ours, 2)
    steps = len(stream) // 2
    for a, b, c in zip(stock_indexed[:steps], indexed[:steps], stream[:steps]):
        assert_same_batch(a, b)
        assert_same_batch(c, b)
    for a, b in zip(stream, indexed, strict=True):
        assert_same_batch(a, b)
    # Stock's own epoch 1 by index is another order: drawn from what its last call left.
    assert not all(
        np.array_equal(a[1], b[1]) for a, b in zip(stock_indexed[steps:], stream[steps:])
    )


@pytest.mark.slow
def test_inside_fit_each_epoch_is_stocks_next_stream(tfk, stock_image, image_dir):
    """Inside `fit` (default workers), the batches trained are stock's `next()` stream."""
    directory, _ = image_dir
    kwargs = dict(SIZE, seed=11)
    gens = _both(stock_image, AUGMENT)

    class Recording(tfk.Sequential):
        def train_step(self, data):
            self.seen.append((np.asarray(data[0]), np.asarray(data[1])))
            return super().train_step(data)

    def fit(it) -> list:
        model = Recording([tfk.layers.Flatten(), tfk.layers.Dense(3)])
        model.seen = []
        model.compile("sgd", "mse", run_eagerly=True)
        model.fit(it, epochs=2, shuffle=False, verbose=0)
        return model.seen

    stream = _stream(gens[1].flow_from_directory(directory, **kwargs), 2)
    stock_fit = fit(gens[1].flow_from_directory(directory, **kwargs))
    with gens[0].flow_from_directory(directory, **kwargs) as ours:
        our_fit = fit(ours)
    for a, b in zip(stream, our_fit, strict=True):
        assert_same_batch(a, b)
    # Stock's `fit` reads batch 0 once for its spec first: its augmentation draws move on by one.
    assert not np.array_equal(stock_fit[0][0], stream[0][0])
