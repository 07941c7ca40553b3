"""Presigned reads of `lakefs://`: straight from the object store, renewed in bulk on expiry.

The stand-in runs in presign mode with a separate data server (`LakeFSDataServer`): its
physical addresses are signed URLs of that server, which checks signature and expiry, so
requests at each server show which path a read took.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from collections.abc import Iterator

import lakefs
import numpy as np
import pytest
from keras.src.legacy.preprocessing import image as keras_image
from lakefs.client import Client
from lakefs_spec import LakeFSFileSystem

import remote_keras as rk
from remote_keras.testing import CountingProxy, S3Server
from remote_keras.testing.base import free_port
from remote_keras.testing.lakefs import LakeFSServer
from remote_keras.testing.proxy import FaultPlan
from tests.helpers import assert_same_batch, epoch

API = "/api/v1/repositories/{repository}"
LIST = f"GET {API}/refs/{{ref}}/objects/ls"
GET_OBJECT = f"GET {API}/refs/{{ref}}/objects"
CONFIG = "GET /api/v1/config"
DATA_GET = "GET /_presigned/{blob}"
KW = dict(target_size=(8, 8), batch_size=4, shuffle=True, seed=7)


def upload(server: LakeFSServer, local: str, name: str = "images") -> str:
    """Uploads `local` under `train/` of a new repository, commits; returns the commit id."""
    client = Client(**server.storage_options)
    lakefs.Repository(name, client=client).create(storage_namespace=f"local://{name}")
    fs = LakeFSFileSystem(**server.storage_options, skip_instance_cache=True)
    for folder, _, files in os.walk(local):
        for file in files:
            path = os.path.join(folder, file)
            fs.put_file(path, f"lakefs://{name}/main/train/{os.path.relpath(path, local)}")
    return lakefs.Branch(name, "main", client=client).commit("images").get_commit().id


def start(local: str, **kwargs) -> LakeFSServer:
    server = LakeFSServer(presign=True, data_server=True, **kwargs).start()
    upload(server, local)
    return server


@pytest.fixture(scope="module")
def presigning(image_dir) -> Iterator[LakeFSServer]:
    local, _ = image_dir
    server = start(local)
    yield server
    server.close()


def reset(server: LakeFSServer):
    assert server.data is not None
    return server.reset(), server.data.reset()


def test_reads_go_to_the_data_server_only(image_dir, presigning):
    local, _ = image_dir
    stock = keras_image.ImageDataGenerator().flow_from_directory(local, **KW)
    gen = rk.ImageDataGenerator(storage_options=presigning.storage_options)
    reset(presigning)
    with gen.flow_from_directory("lakefs://images/main/train", **KW) as it:
        listed, _ = reset(presigning)
        for i in range(len(stock)):
            assert_same_batch(stock[i], it[i])
        lakefs_counts, data_counts = reset(presigning)
        # Per folder one presigned listing, and one GET /config: none per image.
        folders = len({name.rpartition("/")[0] for name in it.filenames})
        assert lakefs_counts == {LIST: folders, CONFIG: 1}, lakefs_counts
        assert data_counts == {DATA_GET: it.samples}, data_counts
        it.on_epoch_end()
        epoch(it)
        assert reset(presigning) == ({}, {DATA_GET: it.samples})  # steady state: 0 at lakeFS
    assert sum(v for k, v in listed.items() if k == LIST) == 1  # the listing: one page


def test_presigned_urls_of_an_s3_store(image_dir, tmp_path):
    """A lakeFS on S3: addresses are S3 URLs of `rclone serve s3` (no auth) on the data."""
    local, _ = image_dir
    stock = keras_image.ImageDataGenerator().flow_from_directory(local, **KW)
    with S3Server(tmp_path, auth=False) as s3, CountingProxy(s3.port) as store:
        server = LakeFSServer(tmp_path, presign=True, presign_s3_url=store.endpoint_url)
        with server:
            upload(server, local)
            gen = rk.ImageDataGenerator(storage_options=server.storage_options)
            with gen.flow_from_directory("lakefs://images/main/train", **KW) as it:
                server.reset()
                store.reset()
                for i in range(len(stock)):
                    assert_same_batch(stock[i], it[i])
                assert store.reset() == {"GET": it.samples}
                assert GET_OBJECT not in server.reset()


def test_turned_off_reads_through_lakefs(presigning):
    reset(presigning)
    gen = rk.ImageDataGenerator(storage_options=presigning.storage_options, pre_sign=False)
    with gen.flow_from_directory("lakefs://images/main/train", **KW) as it:
        reset(presigning)
        on = rk.ImageDataGenerator(storage_options=presigning.storage_options)
        with on.flow_from_directory("lakefs://images/main/train", **KW) as presigned:
            for i in range(len(it)):
                assert_same_batch(presigned[i], it[i])
        reset(presigning)
        epoch(it)
        lakefs_counts, data_counts = reset(presigning)
    assert lakefs_counts == {GET_OBJECT: it.samples} and not data_counts


def test_required_or_invalid_presign_option(image_dir, target_without_presign):
    gen = rk.ImageDataGenerator(storage_options=target_without_presign.storage_options)
    with gen.flow_from_directory("lakefs://images/main/train", pre_sign=True, **KW) as it:
        with pytest.raises(OSError, match="pre_sign_support=false") as info:
            it[0]
    assert "lakefs://images/" in str(info.value)
    pickle.loads(pickle.dumps(info.value))
    with pytest.raises(ValueError, match="pre_sign"):
        rk.FsspecLoader(pre_sign="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pre_sign"):
        rk.ImageDataGenerator(pre_sign=1)  # type: ignore[arg-type]
    # remote_keras's own keyword, not a storage option: refused there, saying where it goes.
    for make in (
        lambda: rk.FsspecLoader({"pre_sign": False}),
        lambda: rk.ImageDataGenerator(storage_options={"pre_sign": False}),
        lambda: rk.image_dataset_from_directory("lakefs://images/main/train",
                                                storage_options={"pre_sign": False}),
    ):  # fmt: skip
        with pytest.raises(TypeError, match=r"`pre_sign=False` next to `storage_options`"):
            make()


@pytest.fixture(scope="module")
def target_without_presign(image_dir) -> Iterator[LakeFSServer]:
    local, _ = image_dir
    with LakeFSServer() as server:
        upload(server, local)
        yield server


@pytest.mark.slow
def test_expiry_shorter_than_an_epoch_is_survived(image_dir):
    """URLs live 2-3 s, the epoch takes longer: renewed per folder, batches unchanged."""
    local, _ = image_dir
    stock = keras_image.ImageDataGenerator().flow_from_directory(local, **KW)
    server = start(local, presign_expiry_s=3)
    try:
        gen = rk.ImageDataGenerator(storage_options=server.storage_options, prefetch_batches=0)
        with gen.flow_from_directory("lakefs://images/main/train", **KW) as it:
            reset(server)
            started = time.monotonic()
            for i in range(len(stock)):
                assert_same_batch(stock[i], it[i])
                time.sleep(0.7)
            elapsed = time.monotonic() - started
            lakefs_counts, data_counts = reset(server)
            listings = it.loader.presigned.listings
        assert not server.errors and not server.data.errors
        # Renewed ahead of the expiry (a request delayed past it would be refused once, then
        # read again with a new URL).
        assert data_counts[DATA_GET] >= it.samples
        folders = len({name.rpartition("/")[0] for name in it.filenames})
        # Re-listed by folder, not per file: in the background, half-way through each
        # listing's lifetime (1.5 s), and on demand.
        renewals = folders * (1 + int(elapsed / 1.5) + 2)  # the first, renewals, slack
        assert folders < lakefs_counts[LIST] <= renewals, lakefs_counts
        assert listings == lakefs_counts[LIST]  # every listing was the reader's own
    finally:
        server.close()


@pytest.mark.slow
def test_403_after_expiry_counts_as_expiry(image_dir):
    """The store's clock runs 8 s ahead: URLs die before the expiry the listing gave."""
    local, _ = image_dir
    server = start(local, presign_expiry_s=10, presign_skew_s=8)
    try:
        loader = rk.FsspecLoader(server.storage_options)
        commit = lakefs.Reference("images", "main", client=Client(**server.storage_options))
        base = f"lakefs://images/{commit.get_commit().id}/train/cat/"
        names = sorted(LakeFSFileSystem(**server.storage_options).ls(base, detail=False))
        first, second = (base + name.rsplit("/", 1)[-1] for name in names[:2])
        expected = LakeFSFileSystem(**server.storage_options).cat_file(second)
        loader(first)
        reset(server)
        time.sleep(3.5)  # dead at the store, alive by the listing's expiry
        assert loader(second) == expected
        lakefs_counts, data_counts = reset(server)
        assert data_counts == {DATA_GET: 2}  # refused once (403), then read
        assert lakefs_counts == {LIST: 1}  # the folder, signed again in one listing
    finally:
        server.close()


def test_403_to_a_fresh_url_is_permission_error(image_dir):
    local, _ = image_dir
    server = start(local)
    try:
        options = server.storage_options
        gen = rk.ImageDataGenerator(storage_options=options, retries=3, prefetch_batches=0)
        reset(server)
        with gen.flow_from_directory("lakefs://images/main/train", **KW) as it:
            it[0]
            assert server.api is not None
            server.api.secret = "another-secret"  # the store now refuses every signature
            reset(server)
            with pytest.raises(PermissionError, match="lakefs://images/") as info:
                it[1]
            _, data_counts = reset(server)
        assert data_counts[DATA_GET] <= KW["batch_size"]  # not retried
        assert "signature" not in str(info.value) and "_presigned" not in str(info.value)
        assert isinstance(pickle.loads(pickle.dumps(info.value)), PermissionError)
    finally:
        server.close()


def test_store_faults_are_retried_and_missing_objects_skipped(image_dir):
    local, _ = image_dir
    stock = keras_image.ImageDataGenerator().flow_from_directory(local, **KW)
    data_port = free_port()
    proxy = CountingProxy(data_port).start()
    server = start(local, data_port=data_port, presign_url=proxy.endpoint_url)
    try:
        faults = FaultPlan(0.4, seed=2, kinds=("503", "reset-before"), max_faults_per_key=2)
        proxy.set_faults(faults)
        retries = rk.RetryPolicy(attempts=4, backoff_s=0.01)
        gen = rk.ImageDataGenerator(storage_options=server.storage_options, retries=retries)
        with gen.flow_from_directory("lakefs://images/main/train", **KW) as it:
            for i in range(len(stock)):
                assert_same_batch(stock[i], it[i])
            assert it.retries_made > 0 and sum(proxy.faults_injected.values()) > 0
        proxy.set_faults(None)
        assert not server.reset().get(GET_OBJECT)  # never through lakeFS

        skip = rk.ImageDataGenerator(storage_options=server.storage_options, on_error="skip")
        with skip.flow_from_directory("lakefs://images/main/train", **KW) as it:
            blobs = sorted(server.root.joinpath("blobs").iterdir())
            victim = next(b for b in blobs if b.stat().st_size > 0)
            victim.unlink()
            batches = epoch(it)
            assert sum(len(b[0]) for b in batches) == it.samples - 1
            assert len(it.skipped) == 1 and it.skipped[0][0].startswith("lakefs://images/")
    finally:
        server.close()
        proxy.close()


def test_disk_cache_is_keyed_by_the_lakefs_url(presigning, tmp_path):
    kw = dict(KW, cache_dir=str(tmp_path / "cache"))
    gen = rk.ImageDataGenerator(storage_options=presigning.storage_options)
    with gen.flow_from_directory("lakefs://images/main/train", **kw) as first:
        batches = epoch(first)
    # Another iterator, reading through lakeFS this time: every image is a cache hit.
    off = rk.ImageDataGenerator(storage_options=presigning.storage_options, pre_sign=False)
    with off.flow_from_directory("lakefs://images/main/train", **kw) as second:
        reset(presigning)
        for i, batch in enumerate(batches):
            assert_same_batch(batch, second[i])
        lakefs_counts, data_counts = reset(presigning)
        assert second.stats.cache_hits == second.samples
    assert not data_counts and not lakefs_counts.get(GET_OBJECT), (lakefs_counts, data_counts)


def _second_batch(it) -> tuple:
    return it[1]


def test_pickled_and_forked_iterators_read_presigned(presigning):
    options = presigning.storage_options
    gen = rk.ImageDataGenerator(storage_options=options, prefetch_batches=0)
    with gen.flow_from_directory("lakefs://images/main/train", **KW) as it:
        it[0]  # the parent has its addresses and connections already
        reset(presigning)
        with multiprocessing.get_context("fork").Pool(1) as pool:
            got = pool.apply(_second_batch, (it,))
        lakefs_counts, data_counts = reset(presigning)
        expected = it[1]
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    assert data_counts == {DATA_GET: KW["batch_size"]}
    assert not lakefs_counts.get(GET_OBJECT)


@pytest.fixture
def behind_proxy(image_dir) -> Iterator[tuple[LakeFSServer, CountingProxy, dict]]:
    """A presigning stand-in whose API is reached through a proxy (its data server directly)."""
    local, _ = image_dir
    server = start(local)
    api = CountingProxy(server.port).start()
    try:
        yield server, api, dict(server.storage_options, host=api.endpoint_url)
    finally:
        api.close()
        server.close()


def test_a_lakefs_outage_does_not_stop_an_unshuffled_epoch(image_dir, behind_proxy):
    """Folders are listed ahead of the reader: during the outage, reads go on at the store."""
    local, _ = image_dir
    server, api, options = behind_proxy
    kw = dict(KW, shuffle=False)
    stock = keras_image.ImageDataGenerator().flow_from_directory(local, **kw)
    retries = rk.RetryPolicy(deadline_s=2, backoff_s=0.05)  # without the look-ahead: fails fast
    gen = rk.ImageDataGenerator(storage_options=options, retries=retries, prefetch_batches=0)
    with gen.flow_from_directory("lakefs://images/main/train", **kw) as it:
        assert_same_batch(stock[0], it[0])
        ahead = it.loader.presigned.ahead
        assert ahead is not None and ahead.ready.wait(30)
        folders = {name.rpartition("/")[0] for name in it.filenames}
        assert it.loader.presigned.listings == len(folders) > 2
        api.outage(3600)
        reset(server)
        for i in range(len(stock)):
            assert_same_batch(stock[i], it[i])
        assert api.is_down
        lakefs_counts, data_counts = reset(server)
        # Batch 0, read before the outage outside a pass, is kept and handed out again.
        read = it.samples - len(stock[0][1])
        assert not lakefs_counts and data_counts == {DATA_GET: read}


@pytest.mark.slow
def test_renewal_during_a_lakefs_outage_fails_naming_the_server(behind_proxy):
    """Addresses expired and lakeFS down: retried up to the deadline, then the server is named."""
    _, api, options = behind_proxy
    retries = rk.RetryPolicy(deadline_s=1, backoff_s=0.05)
    gen = rk.ImageDataGenerator(storage_options=options, retries=retries, prefetch_batches=0)
    kw = dict(KW, shuffle=False)
    with gen.flow_from_directory("lakefs://images/main/train", **kw) as it:
        it[0]
        reader = it.loader.presigned
        assert reader.ahead is not None and reader.ahead.ready.wait(30)
        api.outage(3600)
        reader.clock = lambda: time.time() + 3600  # every address has expired
        with pytest.raises(OSError) as info:
            it[1]
    message = str(info.value)
    assert "Gave up" in message and f"lakeFS server '{api.endpoint_url}/api/v1'" in message, message
    assert "lakefs://images/" in message and "_presigned" not in message
    assert info.value.attempts > 1  # retried
    assert options["password"] not in message
    pickle.loads(pickle.dumps(info.value))


def test_image_dataset_from_directory_reads_from_the_data_server(image_dir, presigning):
    import keras

    local, _ = image_dir
    kwargs = dict(image_size=(6, 8), batch_size=4, seed=2)
    stock = keras.utils.image_dataset_from_directory(local, **kwargs)
    ours = rk.image_dataset_from_directory(
        "lakefs://images/main/train", storage_options=presigning.storage_options, **kwargs
    )
    reset(presigning)
    expected, got = list(stock.as_numpy_iterator()), list(ours.as_numpy_iterator())
    assert len(expected) == len(got)
    for a, b in zip(expected, got):
        assert_same_batch(a, b)
    lakefs_counts, data_counts = reset(presigning)
    assert data_counts == {DATA_GET: len(ours.file_paths)}, data_counts
    # lakeFS only lists (presigned, per folder) and serves its config: no object reads.
    assert set(lakefs_counts) <= {LIST, CONFIG}, lakefs_counts
