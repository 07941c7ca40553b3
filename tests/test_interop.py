"""tf.data interop, and the clear error for the Keras 2 line."""

from __future__ import annotations

import numpy as np

import remote_keras as rk
from tests.helpers import assert_same_batch


def test_to_tf_dataset_yields_the_iterators_batches(image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator(rescale=1 / 255)
    for kwargs in ({}, {"weight_col": "weight"}, {"class_mode": None}):
        with gen.flow_from_dataframe(
            df, directory, target_size=(8, 8), batch_size=5, shuffle=False, **kwargs
        ) as it:
            expected = [it[i] for i in range(len(it))]
            dataset = it.to_tf_dataset()
            got = [
                tuple(np.asarray(t) for t in b) if isinstance(b, tuple) else np.asarray(b)
                for b in dataset
            ]
            x_spec = dataset.element_spec
            x_spec = x_spec[0] if isinstance(x_spec, tuple) else x_spec
            assert x_spec.shape.as_list() == [None, 8, 8, 3]
        assert len(got) == len(expected)
        for a, b in zip(expected, got):
            assert_same_batch(a, b)


def test_each_pass_over_to_tf_dataset_is_the_next_epoch(image_dir):
    directory, df = image_dir
    gen = rk.ImageDataGenerator(rotation_range=20)
    options = dict(target_size=(8, 8), batch_size=5, seed=4)
    with gen.flow_from_dataframe(df, directory, **options) as reference:
        expected = []
        for _ in range(2):
            expected.append([reference[i] for i in range(len(reference))])
            reference.on_epoch_end()
    with gen.flow_from_dataframe(df, directory, **options) as it:
        dataset = it.to_tf_dataset()
        assert int(dataset.cardinality()) == len(it)
        for epoch in range(2):
            got = [tuple(np.asarray(t) for t in batch) for batch in dataset]
            assert len(got) == len(expected[epoch])
            for a, b in zip(expected[epoch], got):
                assert_same_batch(a, b)
        assert it.stats.images == 2 * len(df)  # batch 0, read for the spec, is not read twice
