"""Through the fault-injecting proxy: a faulty epoch equals the fault-free one, on S3 and lakeFS."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest

import remote_keras as rk
from remote_keras.testing.proxy import CountingProxy, FaultPlan
from tests.helpers import AUGMENT, assert_same_batch, epoch, noise_png, put_objects

KINDS = ("503", "500", "429", "reset-before", "reset-mid-body", "truncate")
FAST = rk.RetryPolicy(attempts=8, budget=200, backoff_s=0.01, max_backoff_s=0.05, timeout_s=5)


@pytest.fixture(scope="module")
def many_images(s3_server):
    """200 small PNGs on S3, so that a 5% fault rate hits about ten requests."""
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.storage_options, skip_instance_cache=True)
    prefix = f"data/faults-{uuid.uuid4().hex[:6]}"
    names = [f"{'ab'[i % 2]}/{i:03d}.png" for i in range(200)]
    put_objects(fs, {f"{prefix}/{name}": noise_png(i) for i, name in enumerate(names)})
    return f"s3://{prefix}", pd.DataFrame({"filename": names, "class": [n[0] for n in names]})


def epoch_and_stats(options, url, df, loader):
    gen = rk.ImageDataGenerator(**AUGMENT, storage_options=options, loader=loader, retries=FAST)
    with gen.flow_from_dataframe(
        df, url, target_size=(6, 6), batch_size=16, seed=5, validate_filenames=False
    ) as it:
        return epoch(it), it.stats


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["fsspec", "obstore"])
def test_five_percent_faults_change_nothing_on_s3(many_images, s3_options, s3_proxy, loader):
    url, df = many_images
    clean, _ = epoch_and_stats(s3_options, url, df, loader)
    s3_proxy.set_faults(FaultPlan(rate=0.05, seed=7, kinds=KINDS))
    try:
        faulty, stats = epoch_and_stats(s3_options, url, df, loader)
        injected = sum(s3_proxy.faults_injected.values())
    finally:
        s3_proxy.set_faults(None)
    assert injected >= 3, injected
    for a, b in zip(clean, faulty):
        assert_same_batch(a, b)
    assert stats.images == len(df)


@pytest.mark.slow
def test_a_stalled_request_never_hangs_training(many_images, s3_options, s3_proxy):
    url, df = many_images
    df = df[:32]
    clean, _ = epoch_and_stats(s3_options, url, df, "obstore")
    s3_proxy.set_faults(FaultPlan(rate=0.2, seed=3, kinds=("stall",), stall_s=3,
                                  max_faults_per_key=1))  # fmt: skip
    policy = rk.RetryPolicy(attempts=3, backoff_s=0.01, timeout_s=1.0)
    try:
        gen = rk.ImageDataGenerator(**AUGMENT, storage_options=s3_options, loader="obstore",
                                    retries=policy)  # fmt: skip
        with gen.flow_from_dataframe(
            df, url, target_size=(6, 6), batch_size=16, seed=5, validate_filenames=False
        ) as it:
            faulty = [it[i] for i in range(len(it))]
            assert it.stats.retries >= 1
        assert s3_proxy.faults_injected["stall"] >= 1
    finally:
        s3_proxy.set_faults(None)
    for a, b in zip(clean, faulty):
        assert_same_batch(a, b)


def test_exhausted_retries_name_url_attempts_and_last_cause(many_images, s3_options, s3_proxy):
    url, df = many_images
    s3_proxy.set_faults(FaultPlan(rate=1.0, seed=1, kinds=("503",)))
    policy = rk.RetryPolicy(attempts=2, backoff_s=0.01)
    try:
        gen = rk.ImageDataGenerator(storage_options=s3_options, loader="obstore", retries=policy)
        with (
            gen.flow_from_dataframe(df[:1], url, validate_filenames=False, shuffle=False) as it,
            pytest.raises(rk.ImageLoadError) as info,
        ):
            it[0]
    finally:
        s3_proxy.set_faults(None)
    message = str(info.value)
    assert f"{url}/{df['filename'][0]}" in message and "after 2 attempt(s)" in message
    assert info.value.attempts == 2


def test_faults_on_lakefs_change_nothing(image_dir):
    import lakefs
    from lakefs.client import Client
    from lakefs_spec import LakeFSFileSystem

    from remote_keras.testing import LakeFSServer

    local, df = image_dir
    with LakeFSServer() as server, CountingProxy(int(server.endpoint_url.split(":")[-1])) as proxy:
        options = dict(server.storage_options, host=proxy.endpoint_url)
        client = Client(**server.storage_options)
        lakefs.Repository("faults", client=client).create(storage_namespace="local://faults")
        fs = LakeFSFileSystem(**server.storage_options)
        for name in df["filename"]:
            fs.put_file(f"{local}/{name}", f"lakefs://faults/main/train/{name}")
        lakefs.Branch("faults", "main", client=client).commit("images")

        def epoch():
            gen = rk.ImageDataGenerator(**AUGMENT, storage_options=options, retries=FAST)
            with gen.flow_from_directory(
                "lakefs://faults/main/train", target_size=(6, 6), batch_size=5, seed=2
            ) as it:
                return [it[i] for i in range(len(it))]

        clean = epoch()
        with rk.ImageDataGenerator(storage_options=options).flow_from_directory(
            "lakefs://faults/main"  # the root of a ref works too
        ) as root:
            assert root.class_indices == {"train": 0} and root.samples == len(df)
        proxy.set_faults(FaultPlan(rate=0.25, seed=4, kinds=KINDS))
        faulty = epoch()
        assert sum(proxy.faults_injected.values()) >= 2
    for a, b in zip(clean, faulty):
        assert_same_batch(a, b)
