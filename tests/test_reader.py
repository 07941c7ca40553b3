"""`BatchReader`, the core's entry point: labels per class mode, batch access, bad arguments."""

from __future__ import annotations

import time

import numpy as np
import pytest

import remote_keras as rk
from remote_keras.pipeline.reader import BatchReader
from remote_keras.storage.integrity import Checksum, ChecksumMismatchError
from remote_keras.storage.loaders.checked_reads import Fetched
from tests.helpers import assert_same_batch


@pytest.fixture
def local_iterator(image_dir):
    directory, _ = image_dir
    gen = rk.ImageDataGenerator()
    with gen.flow_from_directory(
        directory, target_size=(8, 9), batch_size=5, shuffle=True, seed=2, class_mode="sparse"
    ) as it:
        yield it


def test_sparse_labels_and_images_only_equal_the_iterator(local_iterator):
    it = local_iterator
    expected = [it[i] for i in range(len(it))]
    settings = dict(target_size=(8, 9), batch_size=5, shuffle=True, seed=2)
    with BatchReader(it.filepaths, it.classes, **settings) as reader:
        assert len(reader) == len(it)
        for i, batch in enumerate(reader.epoch_batches(0)):
            assert_same_batch(expected[i], batch)
        assert_same_batch(expected[-1], reader.batch(0, len(it) - 1))
        with pytest.raises(IndexError):
            reader.batch(0, len(it))
        assert reader.stats.images == it.n + len(expected[-1][0])
    with BatchReader(it.filepaths, **settings) as reader:  # no labels: images only
        x = reader.batch(0, 0)
        assert isinstance(x, np.ndarray)
        np.testing.assert_array_equal(x, expected[0][0])


def test_raw_labels_and_channels_first(local_iterator):
    it = local_iterator
    values = np.arange(it.n, dtype="float32") / 10
    with BatchReader(
        it.filepaths,
        values,
        class_mode="raw",
        batch_size=4,
        shuffle=False,
        target_size=(8, 9),
        color_mode="grayscale",
        data_format="channels_first",
    ) as reader:
        x, y = reader.batch(0, 1)
    assert x.shape == (4, 1, 8, 9)
    np.testing.assert_array_equal(y, values[4:8])


@pytest.mark.parametrize(
    "labels, class_mode",
    [(None, "sparse"), ([0, 1], None), ([0, 1], "multi_output"), ([0, 1], "input")],
)
def test_class_mode_must_fit_the_labels(labels, class_mode):
    with pytest.raises(ValueError, match="class_mode"):
        BatchReader(["a.png", "b.png"], labels, class_mode=class_mode)


def test_skips_unreadable_files(local_iterator, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    paths = [*local_iterator.filepaths[:3], str(bad)]
    with BatchReader(paths, batch_size=4, shuffle=False, on_error="skip") as reader:
        with pytest.warns(UserWarning):
            x = reader.batch(0, 0)
        assert len(x) == 3
        assert [url for url, _ in reader.skipped] == [str(bad)]


class _WrongChecksums:
    """Reads local files and reports a checksum no body has (a loader of one's own)."""

    def __call__(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def read_checked(self, path: str) -> Fetched:
        return Fetched(self(path), Checksum("md5", "0" * 32, "test"))


@pytest.mark.parametrize("verify", [True, False])
def test_verify_checksums_is_the_readers_option(local_iterator, verify):
    paths = local_iterator.filepaths[:4]
    fast = rk.RetryPolicy(backoff_s=0.01, max_backoff_s=0.01)  # mismatches are read again
    reader = BatchReader(
        paths,
        batch_size=4,
        shuffle=False,
        loader=_WrongChecksums(),
        verify_checksums=verify,
        retries=fast,
    )
    with reader:
        if verify:
            with pytest.raises(ChecksumMismatchError, match="md5"):
                reader.batch(0, 0)
        else:
            assert reader.batch(0, 0).shape == (4, 256, 256, 3)


def test_an_epoch_left_early_does_not_stop_later_epochs_reading_ahead(local_iterator):
    """Batches built ahead for an epoch whose loop stopped are dropped when its generator
    closes; before, they filled the look-ahead for good and no later epoch read ahead."""
    it = local_iterator
    read: list[str] = []

    def loader(path: str) -> bytes:
        read.append(path)
        with open(path, "rb") as file:
            return file.read()

    settings = dict(target_size=(8, 9), batch_size=2, shuffle=False, prefetch_batches=2)
    with BatchReader(it.filepaths, loader=loader, **settings) as reader:

        def read_at_least(count: int) -> None:
            deadline = time.monotonic() + 10
            while len(read) < count and time.monotonic() < deadline:
                time.sleep(0.01)

        epoch = reader.epoch_batches(0)
        next(epoch)  # batch 0, and batches 1 and 2 built ahead
        read_at_least(6)
        epoch.close()  # the loop stops
        read.clear()
        later = reader.epoch_batches(1)
        next(later)
        read_at_least(6)
        assert sorted(read) == sorted(it.filepaths[:6])  # batch 0, and 1 and 2 ahead again
        later.close()
