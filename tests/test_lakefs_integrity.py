"""lakeFS reads are checked against the checksums lakeFS sends with them, no extra request.

Through the server, the ETag of `GET .../objects` is lakeFS's checksum of the object (its
MD5 unless multipart); presigned, the store's own headers come with the body (an S3-like
store's ETag). The fault proxy flips 3 bytes in the middle of some bodies: between the
client and the lakeFS server for reads through it, between the client and the store for
presigned reads. Every flipped JPEG still decodes, to other pixels, unless caught.
"""

from __future__ import annotations

import hashlib
import pickle
import types
import urllib.request
from collections.abc import Iterator

import lakefs
import numpy as np
import pandas as pd
import pytest
from lakefs.client import Client
from lakefs_sdk import StagingMetadata

import remote_keras as rk
from remote_keras.storage import integrity
from remote_keras.storage.integrity import Checksum, ChecksumMismatchError
from remote_keras.testing import CountingProxy
from remote_keras.testing.base import free_port
from remote_keras.testing.data import photo_like_jpeg
from remote_keras.testing.lakefs import LakeFSServer
from remote_keras.testing.proxy import FaultPlan, flip_middle
from tests.helpers import assert_same_batch

REPO = "checked"
URL = f"lakefs://{REPO}/main"
FAST = rk.RetryPolicy(backoff_s=0.01, max_backoff_s=0.05, timeout_s=10)
KW = dict(target_size=(16, 16), batch_size=10, shuffle=False, validate_filenames=False)
MODES = ("server", "presigned")
MD5_EMPTY = "d41d8cd98f00b204e9800998ecf8427e"


def flips(rate: float = 1.0, seed: int = 0, targets: tuple[str, ...] = ()) -> FaultPlan:
    return FaultPlan(rate=rate, seed=seed, kinds=("flip",), targets=targets)


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture(scope="module")
def lake() -> Iterator[types.SimpleNamespace]:
    """40 JPEGs committed to a presigning stand-in, behind a proxy to its API and one to its store.

    Yields a namespace: `server`, `api` and `store` (the proxies), `options` (through
    `api`), `df`, `bodies` ({name: bytes}) and `client` (a `lakefs.Client`).
    """
    rng = np.random.default_rng(3)
    names = [f"{'ab'[i % 2]}/{i:03d}.jpg" for i in range(40)]
    bodies = {name: photo_like_jpeg(rng, 48, 40) for name in names}
    data_port = free_port()
    with CountingProxy(data_port) as store:
        server = LakeFSServer(
            presign=True, data_server=True, data_port=data_port, presign_url=store.endpoint_url
        )
        with server, CountingProxy(server.port) as api:
            client = Client(**server.storage_options)
            lakefs.Repository(REPO, client=client).create(storage_namespace=f"local://{REPO}")
            branch = lakefs.Branch(REPO, "main", client=client)
            for name, body in bodies.items():
                branch.object(name).upload(body)
            branch.commit("images")
            df = pd.DataFrame({"filename": names, "class": [n[0] for n in names]})
            options = dict(server.storage_options, host=api.endpoint_url)
            yield types.SimpleNamespace(
                server=server, api=api, store=store, options=options, df=df, bodies=bodies,
                client=client,
            )  # fmt: skip


@pytest.fixture(autouse=True)
def no_faults(lake):
    lake.api.set_faults(None)
    lake.store.set_faults(None)
    yield
    lake.api.set_faults(None)
    lake.store.set_faults(None)


def proxy_of(lake, mode: str) -> CountingProxy:
    """The proxy every object body of `mode` crosses."""
    return lake.api if mode == "server" else lake.store


def epoch(lake, mode: str, url: str = URL, df=None, **kwargs):
    gen = rk.ImageDataGenerator(
        storage_options=lake.options, pre_sign=mode == "presigned", retries=FAST, **kwargs
    )
    with gen.flow_from_dataframe(lake.df if df is None else df, url, **KW) as it:
        return [it[i] for i in range(len(it))], it.stats, list(it.skipped)


def target(lake, mode: str, name: str) -> str:
    """What the request for `name` contains: its path (server), its blob id (presigned)."""
    if mode == "server":
        return f"path={name}"
    stats = lakefs.Repository(REPO, client=lake.client).ref("main").object(name).stat()
    return "/_presigned/" + stats.physical_address.rpartition("/")[2]


@pytest.mark.parametrize("mode", MODES)
def test_flipped_bodies_never_reach_the_batches(lake, mode):
    clean, _, _ = epoch(lake, mode)
    proxy = proxy_of(lake, mode)
    proxy.set_faults(flips(rate=0.15, seed=11))
    checked, stats, _ = epoch(lake, mode)
    flipped = proxy.faults_injected["flip"]
    proxy.set_faults(None)
    assert flipped >= 3, flipped
    for a, b in zip(clean, checked):
        assert_same_batch(a, b)
    assert stats.checksum_mismatches == flipped and stats.retries >= flipped
    assert (stats.verified, stats.unverified, stats.images) == (len(lake.df), 0, len(lake.df))


@pytest.mark.parametrize("mode", MODES)
def test_checks_make_no_extra_request(lake, mode):
    counts = []
    for verify in (False, True):
        lake.api.reset(), lake.store.reset()
        epoch(lake, mode, verify_checksums=verify)
        counts.append((lake.api.reset(), lake.store.reset()))
    assert counts[0] == counts[1], counts
    api, store = counts[1]
    objects = store["GET"] if mode == "presigned" else api["GET"] - 1  # 1: resolving the pin
    assert objects == len(lake.df), counts


@pytest.mark.parametrize("mode", MODES)
def test_persistent_corruption_raises_naming_url_and_both_checksums(lake, mode):
    name = lake.df["filename"][25]
    proxy = proxy_of(lake, mode)
    proxy.set_faults(flips(targets=(target(lake, mode, name),)))
    gen = rk.ImageDataGenerator(
        storage_options=lake.options, pre_sign=mode == "presigned", retries=FAST
    )
    with gen.flow_from_dataframe(lake.df, URL, **KW) as it:
        with pytest.raises(ChecksumMismatchError) as info:
            it[2]
        (pin,) = it.lakefs_pins
    flipped = proxy.faults_injected["flip"]
    error = info.value
    body = lake.bodies[name]
    expected, got = md5(body), md5(flip_middle(body))
    read = f"lakefs://{REPO}/{pin.commit_id}/{name}"
    assert error.url == read and read in str(error)
    assert (error.algorithm, error.expected, error.got) == ("md5", expected, got)
    assert expected in str(error) and got in str(error)
    assert error.source == {"server": "lakeFS ETag", "presigned": "ETag"}[mode]
    assert error.attempts == flipped == integrity.MISMATCH_ATTEMPTS
    assert pickle.loads(pickle.dumps(error)).got == got


@pytest.mark.parametrize("mode", MODES)
def test_persistent_corruption_is_skipped_with_on_error_skip(lake, mode):
    name = lake.df["filename"][25]
    clean, _, _ = epoch(lake, mode)
    proxy = proxy_of(lake, mode)
    proxy.set_faults(flips(targets=(target(lake, mode, name),)))
    batches, stats, skipped = epoch(lake, mode, on_error="skip")
    (x_clean, y_clean), (x, y) = clean[2], batches[2]
    keep = [i for i in range(10) if i != 5]
    assert len(x) == 9 and (x == x_clean[keep]).all() and (y == y_clean[keep]).all()
    ((skipped_url, reason),) = skipped
    assert skipped_url.endswith(f"/{name}") and reason.startswith("ChecksumMismatchError")
    assert stats.skipped == 1 and stats.verified == len(lake.df) - 1
    assert stats.checksum_mismatches == integrity.MISMATCH_ATTEMPTS


def test_objects_whose_lakefs_checksum_is_no_md5_are_read_unverified(lake):
    """A multipart upload's checksum (`<hex>-N`) is no MD5: such reads count as unverified."""
    client = lake.client
    branch = lakefs.Repository(REPO, client=client).branch("multipart").create("main")
    staging = client.sdk_client.staging_api
    names = list(lake.df["filename"][:3])
    for name in names:
        body = lake.bodies[name]
        location = staging.get_physical_address(REPO, "multipart", name, presign=True)
        request = urllib.request.Request(location.presigned_url, data=body, method="PUT")
        urllib.request.urlopen(request, timeout=10).close()
        metadata = StagingMetadata(
            staging=location, checksum=f"{md5(body)}-2", size_bytes=len(body)
        )
        staging.link_physical_address(REPO, "multipart", name, metadata)
    branch.commit("multipart uploads")
    df = lake.df[:3]
    batches, stats, _ = epoch(lake, "server", url=f"lakefs://{REPO}/multipart", df=df)
    assert (stats.verified, stats.unverified) == (0, 3)
    assert_same_batch(batches[0], epoch(lake, "server", df=df)[0][0])


def test_store_headers_give_the_etag_as_md5_unless_multipart_or_encrypted():
    etag = {"ETag": f'"{MD5_EMPTY}"'}
    assert integrity.from_headers(etag, etag="ETag") == Checksum("md5", MD5_EMPTY, "ETag")
    assert integrity.from_headers(etag, "lakeFS ETag").source == "lakeFS ETag"
    assert integrity.from_headers(etag) is None  # plain HTTP: ETags are opaque
    for not_md5 in ({"ETag": f'"{MD5_EMPTY}-2"'}, {"ETag": '"0x8DC1234567890AB"'},
                    {**etag, "x-amz-server-side-encryption": "aws:kms"},
                    {**etag, "X-Amz-Server-Side-Encryption-Customer-Algorithm": "AES256"},
                    {**etag, "Content-Encoding": "gzip"}):  # fmt: skip
        assert integrity.from_headers(not_md5, etag="ETag") is None, not_md5
    sse_s3 = {**etag, "x-amz-server-side-encryption": "AES256"}  # SSE-S3 keeps the MD5 ETag
    assert integrity.from_headers(sse_s3, etag="ETag") == Checksum("md5", MD5_EMPTY, "ETag")
    goog = {**etag, "x-goog-hash": "md5=1B2M2Y8AsgTpgAmY7PhCfg=="}  # GCS: its hash first
    assert integrity.from_headers(goog, etag="ETag").source == "x-goog-hash"
    with pytest.raises(ChecksumMismatchError, match="verify_checksums=False"):
        integrity.verify("lakefs://r/c/k", b"x", Checksum("md5", MD5_EMPTY, "lakeFS ETag"))


@pytest.mark.slow
def test_presigned_reads_from_an_s3_store_check_its_etag(lake, tmp_path):
    """A lakeFS on S3: addresses are URLs of `rclone serve s3`, whose ETag is the MD5."""
    from remote_keras.testing import S3Server

    with S3Server(tmp_path, auth=False) as s3, CountingProxy(s3.port) as store:
        with LakeFSServer(tmp_path, presign=True, presign_s3_url=store.endpoint_url) as server:
            client = Client(**server.storage_options)
            lakefs.Repository(REPO, client=client).create(storage_namespace=f"local://{REPO}")
            branch = lakefs.Branch(REPO, "main", client=client)
            for name in lake.df["filename"]:
                branch.object(name).upload(lake.bodies[name])
            branch.commit("images")
            store.set_faults(flips(rate=0.15, seed=11))
            gen = rk.ImageDataGenerator(storage_options=server.storage_options, retries=FAST)
            with gen.flow_from_dataframe(lake.df, URL, **KW) as it:
                batches = [it[i] for i in range(len(it))]
                stats = it.stats
            flipped = store.faults_injected["flip"]
    assert flipped >= 3 and stats.checksum_mismatches == flipped
    assert (stats.verified, stats.unverified) == (len(lake.df), 0)
    for a, b in zip(epoch(lake, "server")[0], batches):
        assert_same_batch(a, b)
