"""On Keras 2: a corrupt image ends `fit` in its epoch naming the URL, `on_error="skip"` trains
on, retries carry `fit` through an outage, a wrong bucket is named at once, and a truncated
JPEG is named (or skipped) like any corrupt file."""

from __future__ import annotations

import socket
import uuid

import fsspec
import pandas as pd
import pytest
import s3fs

import remote_keras as rk
from remote_keras.testing.proxy import FaultPlan
from tests.helpers import assert_same_batch, noise_png, put_objects, truncated_jpeg

FAST = rk.RetryPolicy(attempts=4, budget=500, backoff_s=0.01, max_backoff_s=0.05, timeout_s=5)
SIZE = dict(target_size=(6, 6), batch_size=4)


@pytest.fixture(scope="module")
def with_corrupt(s3_server):
    """16 PNGs on S3 and one object named `.png` that is not an image."""
    fs = s3fs.S3FileSystem(**s3_server.storage_options, skip_instance_cache=True)
    prefix = f"data/k2-faults-{uuid.uuid4().hex[:6]}"
    names = [f"{'ab'[i % 2]}/{i:02d}.png" for i in range(16)]
    objects = {f"{prefix}/{name}": noise_png(i) for i, name in enumerate(names)}
    objects[f"{prefix}/a/broken.png"] = b"these bytes are no image"
    put_objects(fs, objects)
    rows = pd.DataFrame(
        {"filename": [*names, "a/broken.png"], "class": [n[0] for n in names] + ["a"]}
    )
    return f"s3://{prefix}", rows


class EpochsBegun:
    def __init__(self, tfk):
        class Recorder(tfk.callbacks.Callback):
            def __init__(self) -> None:
                super().__init__()
                self.epochs: list[int] = []

            def on_epoch_begin(self, epoch, logs=None):
                self.epochs.append(epoch)

        self.callback = Recorder()


def _model(tfk):
    model = tfk.Sequential([tfk.layers.Flatten(input_shape=(6, 6, 3)), tfk.layers.Dense(2)])
    model.compile("sgd", "mse")
    return model


@pytest.mark.slow
@pytest.mark.parametrize(
    "fit_kwargs",
    [{}, {"workers": 2}, {"workers": 2, "use_multiprocessing": True}],
    ids=["default", "threads", "processes"],
)
def test_a_corrupt_image_ends_fit_in_its_epoch_naming_the_url(
    tfk, with_corrupt, s3_options, fit_kwargs
):
    url, df = with_corrupt
    begun = EpochsBegun(tfk).callback
    gen = rk.ImageDataGenerator(storage_options=s3_options, retries=FAST)
    with gen.flow_from_dataframe(df, url, seed=1, **SIZE) as it:
        with pytest.raises(Exception) as caught:
            _model(tfk).fit(it, epochs=5, verbose=0, callbacks=[begun], **fit_kwargs)
    assert f"{url}/a/broken.png" in str(caught.value)
    assert begun.epochs in ([], [0])  # the epoch that met it (or the spec's batch 0) ended fit


@pytest.mark.slow
def test_skip_trains_on_and_names_what_it_skipped(tfk, with_corrupt, s3_options):
    url, df = with_corrupt
    gen = rk.ImageDataGenerator(storage_options=s3_options, retries=FAST, on_error="skip")
    with gen.flow_from_dataframe(df, url, seed=1, **SIZE) as it:
        with pytest.warns(UserWarning, match="broken.png"):
            history = _model(tfk).fit(it, epochs=2, verbose=0, workers=2)
        assert len(history.history["loss"]) == 2
        assert {u for u, _ in it.skipped} == {f"{url}/a/broken.png"}
        assert it.stats.skipped >= 1


@pytest.mark.slow
def test_fit_goes_through_an_outage_on_retries(tfk, with_corrupt, s3_options, s3_proxy):
    url, df = with_corrupt
    df = df[df["filename"] != "a/broken.png"]
    gen = rk.ImageDataGenerator(storage_options=s3_options, retries=FAST)
    kwargs = dict(SIZE, seed=3, shuffle=False, validate_filenames=False)
    with gen.flow_from_dataframe(df, url, **kwargs) as it:
        clean = [it[i] for i in range(len(it))]
    s3_proxy.set_faults(FaultPlan(rate=1.0, seed=2, kinds=("503",), max_faults_per_key=2))
    try:
        with gen.flow_from_dataframe(df, url, **kwargs) as it:
            history = _model(tfk).fit(it, epochs=1, verbose=0, shuffle=False)
            during = [it[i] for i in range(len(it))]
            retries = it.stats.retries
    finally:
        s3_proxy.set_faults(None)
    assert len(history.history["loss"]) == 1
    assert retries >= len(df)  # every image failed (twice) before it was read
    it_again = rk.ImageDataGenerator(storage_options=s3_options)
    with it_again.flow_from_dataframe(df, url, **kwargs) as fresh:
        fresh.set_epoch(1)
        for a, b in zip(during, [fresh[i] for i in range(len(fresh))]):
            assert_same_batch(a, b)
    assert len(clean) == len(during)


def test_a_wrong_bucket_is_named_at_once(s3_options):
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with pytest.raises(FileNotFoundError, match="no-such-bucket"):
        gen.flow_from_directory("s3://no-such-bucket/train", **SIZE)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_truncated_jpeg_at_its_own_size_is_named(on_error):
    # At its own size nothing converts or resizes it, which made Pillow decode it only at
    # `np.asarray`: a bare OSError without the URL, and skipped with no ImageDecodeError.
    folder = f"memory://k2-truncated-{uuid.uuid4().hex[:6]}/a"
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{folder}/cut.jpg", truncated_jpeg(0))
    fs.pipe(f"{folder}/whole.png", noise_png(1))
    df = pd.DataFrame({"filename": [f"{folder}/cut.jpg", f"{folder}/whole.png"], "class": "a"})
    bad = f"{folder}/cut.jpg"
    gen = rk.ImageDataGenerator(on_error=on_error)
    with gen.flow_from_dataframe(df, target_size=(6, 6), shuffle=False) as it:
        if on_error == "raise":
            with pytest.raises(rk.ImageDecodeError, match=f"'{bad}': OSError: .*truncated"):
                it[0]
            return
        with pytest.warns(UserWarning, match="on_error='skip'"):
            x, _ = it[0]
        assert x.shape[0] == 1
        ((path, reason),) = it.skipped
    assert path == bad and reason.startswith(f"ImageDecodeError: Cannot decode image '{bad}'")


def _gave_up_generator(s3_options):
    """A generator whose store never answers: nothing listens at its endpoint."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    options = dict(s3_options, client_kwargs=dict(s3_options["client_kwargs"], endpoint_url=closed))
    return rk.ImageDataGenerator(
        storage_options=options, retries=rk.RetryPolicy(deadline_s=0.5, max_backoff_s=0.1)
    )


@pytest.mark.slow
@pytest.mark.parametrize("where", ["first", "later"])
@pytest.mark.parametrize("mode", ["fit", "evaluate", "predict"])
def test_errors_reach_fit_evaluate_and_predict_as_the_guide_says(
    tfk, with_corrupt, s3_options, mode, where
):
    """What the Keras 2 guide says each call raises, naming the URL, for a corrupt file in the
    first batch or a later one, and for a store that gave up (in the first batch)."""
    url, df = with_corrupt
    broken = df[df["filename"] == "a/broken.png"]
    rows = pd.concat([broken, df.drop(broken.index)] if where == "first" else [df])
    gen = rk.ImageDataGenerator(storage_options=s3_options, retries=FAST)
    outcomes = {}
    for case, generator in (("corrupt", gen), ("gave up", _gave_up_generator(s3_options))):
        kwargs = dict(SIZE, shuffle=False, validate_filenames=False)
        with generator.flow_from_dataframe(rows, url, **kwargs) as it:
            with pytest.raises(Exception) as caught:
                getattr(_model(tfk), mode)(it, verbose=0)
        outcomes[case] = (type(caught.value).__name__, str(caught.value))
    # Keras 2 reads the first batch itself, outside the graph, to learn the tensor spec: an
    # error there arrives as itself; later, TensorFlow's `InvalidArgumentError` around it.
    name, message = outcomes["corrupt"]
    assert name == ("ImageDecodeError" if where == "first" else "InvalidArgumentError"), outcomes
    assert f"{url}/a/broken.png" in message
    name, message = outcomes["gave up"]  # every row on the silent store: the first batch fails
    assert name == "ImageLoadError" and "Gave up reading" in message, outcomes
    assert f"{url}/{rows['filename'].iloc[0]}" in message
