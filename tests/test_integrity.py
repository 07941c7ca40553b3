"""Bytes damaged on the way never reach the model: reads are checked against the store's checksum.

The fault proxy flips 3 bytes in the middle of some response bodies (same status, same
length, as the fault trial's proxy did); every flipped JPEG still decodes. With
`verify_checksums=True` (the default) the flipped bodies are caught, read again and the
batches equal a clean run's; with `False` they reach the batches.
"""

from __future__ import annotations

import hashlib
import pickle
import uuid
import zlib

import obstore
import pandas as pd
import pytest
import s3fs
from obstore.store import S3Store

import remote_keras as rk
from remote_keras.storage import integrity, retry
from remote_keras.storage.integrity import Checksum, ChecksumMismatchError
from remote_keras.testing import CountingProxy, StaticHTTPServer
from remote_keras.testing.data import photo_like_jpeg
from remote_keras.testing.proxy import FaultPlan, flip_middle
from tests.cloud_stores import azurite_folder, gcs_folder
from tests.helpers import assert_same_batch, put_objects

FAST = rk.RetryPolicy(backoff_s=0.01, max_backoff_s=0.05, timeout_s=10)
KW = dict(target_size=(16, 16), batch_size=10, shuffle=False, validate_filenames=False)
LOADERS = ("fsspec", "obstore")
MD5_EMPTY = "d41d8cd98f00b204e9800998ecf8427e"


def flips(rate: float = 1.0, seed: int = 0, targets: tuple[str, ...] = ()) -> FaultPlan:
    return FaultPlan(rate=rate, seed=seed, kinds=("flip",), targets=targets)


# --------------------------------------------------------------------------- parsing


def test_single_part_etags_are_md5s_multipart_and_other_etags_are_not():
    assert integrity.from_etag(f'"{MD5_EMPTY.upper()}"') == Checksum("md5", MD5_EMPTY, "ETag")
    assert integrity.from_etag(f'W/"{MD5_EMPTY}"') == Checksum("md5", MD5_EMPTY, "ETag")
    assert integrity.from_etag(MD5_EMPTY) == Checksum("md5", MD5_EMPTY, "ETag")
    for not_md5 in (f'"{MD5_EMPTY}-3"', '"0x8DC1234567890AB"', '"uS3RbBkMfvRhHh59iTmRQQ=="',
                    "", None, '"abc"'):  # fmt: skip
        assert integrity.from_etag(not_md5) is None, not_md5


def test_s3_responses_prefer_full_object_checksums_and_skip_encrypted_etags():
    etag = f'"{MD5_EMPTY}"'
    crc = {"ChecksumCRC32": "AAAAAA=="}
    assert integrity.from_s3_response({"ETag": etag}) == Checksum("md5", MD5_EMPTY, "ETag")
    assert integrity.from_s3_response({"ETag": etag, **crc}).algorithm == "crc32"
    assert integrity.from_s3_response({"ETag": f'"{MD5_EMPTY}-12"'}) is None  # multipart
    composite = {"ETag": f'"{MD5_EMPTY}-2"', "ChecksumCRC32": "AAAAAA==-2"}
    assert integrity.from_s3_response(composite) is None
    typed = {"ETag": etag, "ChecksumCRC32": "AAAAAA==", "ChecksumType": "COMPOSITE"}
    assert integrity.from_s3_response(typed).source == "ETag"
    for encrypted in ({"ServerSideEncryption": "aws:kms"}, {"SSECustomerAlgorithm": "AES256"},
                      {"ServerSideEncryption": "aws:kms:dsse"}):  # fmt: skip
        assert integrity.from_s3_response({"ETag": etag, **encrypted}) is None
        assert integrity.from_s3_response({"ETag": etag, **encrypted, **crc}).algorithm == "crc32"
    sse_s3 = {"ETag": etag, "ServerSideEncryption": "AES256"}  # SSE-S3 keeps the MD5 ETag
    assert integrity.from_s3_response(sse_s3) == Checksum("md5", MD5_EMPTY, "ETag")


def test_headers_give_goog_hash_amz_checksums_and_content_md5_unless_encoded():
    md5_b64 = "1B2M2Y8AsgTpgAmY7PhCfg=="  # MD5 of b""
    goog = {"X-Goog-Hash": f"crc32c=AAAAAA==,md5={md5_b64}"}
    assert integrity.from_headers(goog) == Checksum("crc32c", "00000000", "x-goog-hash")
    assert integrity.from_headers({"x-goog-hash": f"md5={md5_b64}"}).value == MD5_EMPTY
    assert integrity.from_headers({"Content-MD5": md5_b64}).source == "Content-MD5"
    sha256 = {"x-amz-checksum-sha256": "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="}
    assert integrity.from_headers(sha256).algorithm == "sha256"
    assert integrity.from_headers({"ETag": f'"{MD5_EMPTY}"'}) is None  # HTTP ETags are opaque
    assert integrity.from_headers({**goog, "Content-Encoding": "gzip"}) is None
    assert integrity.from_headers({**goog, "X-Goog-Stored-Content-Encoding": "gzip"}) is None
    assert integrity.from_headers({"Content-MD5": "not base64!"}) is None
    assert integrity.from_content_md5(bytearray(hashlib.md5(b"").digest())).value == MD5_EMPTY


@pytest.mark.parametrize("algorithm", ["md5", "crc32", "crc32c", "sha256"])
def test_verify_accepts_the_right_checksum_and_raises_for_a_wrong_one(algorithm):
    if algorithm == "crc32c":
        pytest.importorskip("google_crc32c", reason="CRC32C is checked only with google-crc32c")
    data = b"123456789"
    hexed = {
        "md5": hashlib.md5(data).hexdigest(),
        "crc32": f"{zlib.crc32(data):08x}",
        "crc32c": "e3069283",  # the published check value of CRC-32C for "123456789"
        "sha256": hashlib.sha256(data).hexdigest(),
    }[algorithm]
    good = Checksum(algorithm, hexed, "test")
    assert integrity.verify("s3://b/k", data, good) is True
    with pytest.raises(ChecksumMismatchError) as info:
        integrity.verify("s3://b/k", flip_middle(data), good)
    assert info.value.expected == hexed and info.value.got != hexed
    assert integrity.verify("s3://b/k", data, None) is False


def test_mismatch_names_url_and_both_checksums_never_a_secret_and_pickles():
    url = "https://user:hunter2@host/b/k.jpg?X-Amz-Signature=deadbeef&v=1"
    with pytest.raises(ChecksumMismatchError) as info:
        integrity.verify(url, b"flipped", Checksum("md5", MD5_EMPTY, "ETag"))
    error = info.value
    got = hashlib.md5(b"flipped").hexdigest()
    message = str(error)
    assert "https://***@host/b/k.jpg?X-Amz-Signature=***&v=1" in message
    assert MD5_EMPTY in message and got in message and "verify_checksums=False" in message
    assert "hunter2" not in message + repr(error) and "deadbeef" not in message
    assert isinstance(error, rk.ImageLoadError) and isinstance(error, OSError)
    assert rk.ChecksumMismatchError is ChecksumMismatchError
    assert retry.is_transient(error)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ChecksumMismatchError and str(copy) == message
    assert (copy.url, copy.expected, copy.got, copy.algorithm) == (error.url, MD5_EMPTY, got, "md5")


def test_mismatches_are_retried_at_most_mismatch_attempts_then_stay_mismatches():
    calls = []

    def always_flipped(paths):
        calls.append(paths)
        return [integrity.mismatch(p, Checksum("md5", MD5_EMPTY, "ETag"), "0" * 32) for p in paths]

    policy = rk.RetryPolicy(backoff_s=0)
    results, retries = retry.fetch_with_retries(always_flipped, ["s3://b/k"], policy, sleep=bool)
    assert len(calls) == integrity.MISMATCH_ATTEMPTS and retries == len(calls) - 1
    (error,) = results
    assert isinstance(error, ChecksumMismatchError) and error.attempts == len(calls)
    assert f"after {len(calls)} attempt(s)" in str(error) and MD5_EMPTY in str(error)
    assert pickle.loads(pickle.dumps(error)).attempts == len(calls)
    calls.clear()
    capped = rk.RetryPolicy(attempts=3, backoff_s=0)
    results, _ = retry.fetch_with_retries(always_flipped, ["s3://b/k"], capped, sleep=bool)
    assert len(calls) == 3 and isinstance(results[0], ChecksumMismatchError)


def test_verify_checksums_is_an_option_checked_like_the_others():
    assert rk.ImageDataGenerator().options.verify_checksums is True
    assert rk.ImageDataGenerator(verify_checksums=False).options.verify_checksums is False
    with pytest.raises(TypeError, match="verify_checksums"):
        rk.ImageDataGenerator(verify_checksums="no")


# --------------------------------------------------------------------------- S3 end to end


@pytest.fixture(scope="module")
def jpegs(s3_server):
    """40 photo-like JPEGs on S3; returns (url, dataframe, {name: bytes})."""
    import numpy as np

    rng = np.random.default_rng(3)
    names = [f"{'ab'[i % 2]}/{i:03d}.jpg" for i in range(40)]
    bodies = {name: photo_like_jpeg(rng, 48, 40) for name in names}
    fs = s3fs.S3FileSystem(**s3_server.storage_options, skip_instance_cache=True)
    prefix = f"data/integrity-{uuid.uuid4().hex[:6]}"
    put_objects(fs, {f"{prefix}/{name}": body for name, body in bodies.items()})
    df = pd.DataFrame({"filename": names, "class": [n[0] for n in names]})
    return f"s3://{prefix}", df, bodies


def epoch(options, url, df, loader, **kwargs):
    gen = rk.ImageDataGenerator(storage_options=options, loader=loader, retries=FAST, **kwargs)
    with gen.flow_from_dataframe(df, url, **KW) as it:
        return [it[i] for i in range(len(it))], it.stats, list(it.skipped)


@pytest.mark.slow
@pytest.mark.parametrize("loader", LOADERS)
def test_flipped_bodies_never_reach_the_batches(jpegs, s3_options, s3_proxy, loader):
    url, df, _ = jpegs
    clean, _, _ = epoch(s3_options, url, df, loader)
    s3_proxy.set_faults(flips(rate=0.15, seed=11))
    try:
        checked, stats, _ = epoch(s3_options, url, df, loader)
        flipped = s3_proxy.faults_injected["flip"]
    finally:
        s3_proxy.set_faults(None)
    assert flipped >= 2, flipped
    for a, b in zip(clean, checked):
        assert_same_batch(a, b)
    assert stats.checksum_mismatches == flipped and stats.retries >= flipped
    assert stats.verified == len(df) and stats.unverified == 0 and stats.images == len(df)


@pytest.mark.slow
@pytest.mark.parametrize("loader", LOADERS)
def test_without_verify_checksums_a_flipped_body_reaches_the_batch(
    jpegs, s3_options, s3_proxy, loader
):
    url, df, _ = jpegs
    clean, _, _ = epoch(s3_options, url, df, loader)
    s3_proxy.set_faults(flips(targets=(f"/{df['filename'][13]}",)))
    try:
        damaged, stats, _ = epoch(s3_options, url, df, loader, verify_checksums=False)
    finally:
        s3_proxy.set_faults(None)
    (x_clean, _), (x_damaged, _) = clean[1], damaged[1]
    assert (x_clean[3] != x_damaged[3]).any()  # sample 13: the flipped JPEG decoded
    assert (x_clean[:3] == x_damaged[:3]).all() and (x_clean[4:] == x_damaged[4:]).all()
    for i in (0, 2, 3):
        assert_same_batch(clean[i], damaged[i])
    assert (stats.verified, stats.checksum_mismatches, stats.unverified) == (0, 0, len(df))


def hex_of(algorithm: str, data: bytes) -> str:  # crc32: what rclone keeps from s3fs's uploads
    return hashlib.md5(data).hexdigest() if algorithm == "md5" else f"{zlib.crc32(data):08x}"


@pytest.mark.parametrize("loader", LOADERS)
def test_persistent_corruption_raises_naming_url_and_both_checksums(
    jpegs, s3_options, s3_proxy, loader
):
    url, df, bodies = jpegs
    name = df["filename"][25]
    s3_proxy.set_faults(flips(targets=(f"/{name}",)))
    try:
        gen = rk.ImageDataGenerator(storage_options=s3_options, loader=loader, retries=FAST)
        with gen.flow_from_dataframe(df, url, **KW) as it:
            with pytest.raises(ChecksumMismatchError) as info:
                it[2]
        flipped = s3_proxy.faults_injected["flip"]
    finally:
        s3_proxy.set_faults(None)
    error = info.value
    assert error.algorithm == {"fsspec": "crc32", "obstore": "md5"}[loader]  # header over ETag
    expected = hex_of(error.algorithm, bodies[name])
    got = hex_of(error.algorithm, flip_middle(bodies[name]))
    assert error.url == f"{url}/{name}" and f"{url}/{name}" in str(error)
    assert (error.expected, error.got) == (expected, got)
    assert expected in str(error) and got in str(error)
    assert error.attempts == flipped == integrity.MISMATCH_ATTEMPTS
    assert pickle.loads(pickle.dumps(error)).got == got


@pytest.mark.parametrize("loader", LOADERS)
def test_persistent_corruption_is_skipped_with_on_error_skip(jpegs, s3_options, s3_proxy, loader):
    url, df, _ = jpegs
    name = df["filename"][25]
    clean, _, _ = epoch(s3_options, url, df, loader)
    s3_proxy.set_faults(flips(targets=(f"/{name}",)))
    try:
        batches, stats, skipped = epoch(s3_options, url, df, loader, on_error="skip")
    finally:
        s3_proxy.set_faults(None)
    (x_clean, y_clean), (x, y) = clean[2], batches[2]
    keep = [i for i in range(10) if i != 5]
    assert len(x) == 9 and (x == x_clean[keep]).all() and (y == y_clean[keep]).all()
    ((skipped_url, reason),) = skipped
    assert skipped_url == f"{url}/{name}" and reason.startswith("ChecksumMismatchError")
    assert stats.skipped == 1 and stats.verified == len(df) - 1
    assert stats.checksum_mismatches == integrity.MISMATCH_ATTEMPTS


def test_fsspec_checks_x_amz_checksums_else_the_etag_with_one_get(s3_server, s3_options, s3_proxy):
    data = photo_like_jpeg(__import__("numpy").random.default_rng(0), 32, 32)
    prefix = f"integrity-{uuid.uuid4().hex[:6]}"
    s3fs.S3FileSystem(**s3_server.storage_options, skip_instance_cache=True).pipe(
        f"data/{prefix}/by-s3fs.jpg", data
    )  # botocore sends a CRC32, which rclone keeps and returns
    store = S3Store("data", endpoint=s3_server.endpoint_url, region="us-east-1",
                    access_key_id=s3_server.access_key, secret_access_key=s3_server.secret_key,
                    client_options={"allow_http": True})  # fmt: skip
    obstore.put(store, f"{prefix}/by-obstore.jpg", data)  # no checksum header: the ETag only
    loader = rk.FsspecLoader(s3_options)
    s3_proxy.reset()
    by_s3fs = loader.read_checked(f"s3://data/{prefix}/by-s3fs.jpg")
    by_obstore = loader.load_many_checked([f"s3://data/{prefix}/by-obstore.jpg"])[0]
    assert by_s3fs.data == by_obstore.data == data
    assert by_s3fs.checksum == Checksum("crc32", f"{zlib.crc32(data):08x}", "x-amz-checksum-crc32")
    assert by_obstore.checksum == Checksum("md5", hashlib.md5(data).hexdigest(), "ETag")
    assert s3_proxy.reset() == {"GET": 2}  # one GET each, no HEAD
    checked = rk.ObstoreLoader(s3_options).read_checked(f"s3://data/{prefix}/by-s3fs.jpg")
    assert checked.checksum == Checksum("md5", hashlib.md5(data).hexdigest(), "ETag")


def test_cache_hits_count_neither_verified_nor_unverified(jpegs, s3_options, tmp_path):
    url, df, _ = jpegs
    gen = rk.ImageDataGenerator(storage_options=s3_options, loader="obstore", cache_dir=tmp_path)
    with gen.flow_from_dataframe(df, url, **KW) as it:
        for _ in range(2):
            [it[i] for i in range(len(it))]
        stats = it.stats
    assert stats.cache_hits == len(df) and stats.verified == len(df) and stats.unverified == 0


def test_local_files_count_neither(image_dir):
    local, df = image_dir
    with rk.ImageDataGenerator().flow_from_dataframe(df, local, target_size=(8, 8)) as it:
        [it[i] for i in range(len(it))]
        stats = it.stats
    assert stats.images == len(df) and (stats.verified, stats.unverified) == (0, 0)


class CountingFsspecLoader(rk.FsspecLoader):
    """A user's subclass that overrides only `load_many`, as the loaders' docs invite."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = 0

    def load_many(self, paths, executor=None):
        self.calls += 1
        return super().load_many(paths, executor=executor)


def test_a_subclass_overriding_only_load_many_is_called_and_counted_unverified(jpegs, s3_options):
    url, df, _ = jpegs
    loader = CountingFsspecLoader(storage_options=s3_options)
    gen = rk.ImageDataGenerator(loader=loader)  # verify_checksums=True, the default
    with gen.flow_from_dataframe(df, url, **KW) as it:
        [it[i] for i in range(len(it))]
        stats = it.stats
    assert loader.calls == len(it)  # its override read every batch, not the inherited check
    assert (stats.verified, stats.unverified) == (0, len(df))


def test_offers_checked_follows_the_most_derived_override():
    from remote_keras.storage.loaders.protocol import offers_checked

    class Checked(rk.FsspecLoader):
        def load_many_checked(self, paths, executor=None):
            return super().load_many_checked(paths, executor)

    assert offers_checked(rk.FsspecLoader(), "load_many", "load_many_checked")
    assert not offers_checked(CountingFsspecLoader(), "load_many", "load_many_checked")
    assert offers_checked(Checked(), "load_many", "load_many_checked")
    assert offers_checked(rk.FsspecLoader(), "__call__", "read_checked")


# --------------------------------------------------------------------------- HTTP


def read_all(options, url, df, **kwargs):
    gen = rk.ImageDataGenerator(storage_options=options, retries=FAST, **kwargs)
    kw = dict(target_size=(8, 8), shuffle=False, validate_filenames=False)
    with gen.flow_from_dataframe(df, url, **kw) as it:
        return [it[i] for i in range(len(it))], it.stats


def test_http_is_verified_with_content_md5_and_unverified_without(image_dir):
    local, df = image_dir
    with StaticHTTPServer(local) as plain:
        expected, stats = read_all(None, plain.url, df)
    assert (stats.verified, stats.unverified) == (0, len(df))
    with StaticHTTPServer(local, content_md5=True) as server, CountingProxy(server.port) as proxy:
        proxy.set_faults(flips(rate=0.3, seed=2))
        got, stats = read_all(None, proxy.endpoint_url, df)
        flipped = proxy.faults_injected["flip"]
    assert flipped >= 1 and stats.checksum_mismatches == flipped
    assert (stats.verified, stats.unverified) == (len(df), 0)
    for a, b in zip(expected, got):
        assert_same_batch(a, b)


# --------------------------------------------------------------------------- GCS, Azure


@pytest.fixture(scope="module")
def gcs_store(image_dir):
    """The image folder on fake-gcs-server, behind a proxy: (options, url, proxy)."""
    with gcs_folder(image_dir[0], "data/checks") as (server, proxy, url):
        yield server.storage_options_for(proxy.endpoint_url), url, proxy


@pytest.fixture(scope="module")
def azure_store(image_dir):
    """The image folder on Azurite, behind a proxy: (options, url, proxy)."""
    with azurite_folder(image_dir[0], "data/checks") as (server, proxy, url):
        options = {"connection_string": server.connection_string(proxy.endpoint_url)}
        yield options, url, proxy


@pytest.mark.slow
@pytest.mark.parametrize("store", ["gcs", "azure"])
def test_gcs_and_azure_catch_flips_through_fsspec(request, image_dir, store):
    options, url, proxy = request.getfixturevalue(f"{store}_store")
    _, df = image_dir
    clean, _ = read_all(options, url, df, loader="fsspec")
    proxy.set_faults(flips(rate=0.3, seed=5, targets=(".png", ".jpg")))
    try:
        checked, stats = read_all(options, url, df, loader="fsspec")
        flipped = proxy.faults_injected["flip"]
    finally:
        proxy.set_faults(None)
    assert flipped >= 1 and stats.checksum_mismatches == flipped
    assert (stats.verified, stats.unverified) == (len(df), 0)
    for a, b in zip(clean, checked):
        assert_same_batch(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["gcs", "azure"])
def test_gcs_and_azure_reads_through_obstore_are_unverified(request, image_dir, store):
    options, url, _ = request.getfixturevalue(f"{store}_store")
    _, df = image_dir
    _, stats = read_all(options, url, df, loader="obstore")  # obstore exposes no checksum
    assert stats.images == len(df) and (stats.verified, stats.unverified) == (0, len(df))
