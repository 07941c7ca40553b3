"""Reads that keep the checksum the store sent with the body, with the one GET a read makes.

Each function returns `Fetched(data, checksum)`: the body, and the whole-object
checksum found in the same response (`remote_keras.storage.integrity`), or `None`.
Nothing here hashes: the caller (`remote_keras.pipeline.fetching.Fetcher`) checks the
body on its own thread, never on fsspec's event loop, which every async
filesystem of the process shares.

- S3 (s3fs): botocore's `get_object`, as s3fs's `cat_file` calls it (no
  HEAD), keeping the response's ETag, encryption and `x-amz-checksum-*` fields.
- GCS (gcsfs): the same GET as gcsfs's `cat_file`, keeping `x-goog-hash`.
- Azure (adlfs): the same `download_blob` as adlfs's `cat_file`, keeping
  the blob's `Content-MD5`.
- HTTP(S): the same GET as fsspec's `cat_file`, keeping its headers.
- obstore: `obstore.get`, keeping the ETag (S3 only: GCS and Azure ETags are
  not MD5s).
- lakeFS: not here; `storage.lakefs.get_object` keeps the server's ETag and
  `storage.presign` the store's headers.
- Other async filesystems: their `cat_file`, with no checksum.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, NamedTuple

from remote_keras.storage import integrity
from remote_keras.storage.integrity import Checksum

S3_PROTOCOLS = ("s3", "s3a")


class Fetched(NamedTuple):
    """A body and the checksum the store sent with it (`None` if none, or not exposed)."""

    data: bytes
    checksum: Checksum | None


def _protocols(fs: Any) -> set[str]:
    protocol = fs.protocol
    return set(protocol if isinstance(protocol, (tuple, list)) else (protocol,))


async def read_async(fs: Any, path: str) -> Fetched:
    """Reads `path` (as `fs` names it) on `fs`'s event loop, with the response's checksum.

    Raises:
        OSError: what the filesystem's `cat_file` raises for the same read
            (`FileNotFoundError`, `PermissionError`, the client's own errors).
    """
    protocols = _protocols(fs)
    if protocols & set(S3_PROTOCOLS) and hasattr(fs, "_call_s3"):
        return await _s3(fs, path)
    if protocols & {"gs", "gcs"} and hasattr(fs, "_call"):
        return await _gcs(fs, path)
    if protocols & {"abfs", "az", "abfss"} and hasattr(fs, "service_client"):
        return await _azure(fs, path)
    if protocols & {"http", "https"} and hasattr(fs, "set_session"):
        return await _http(fs, path)
    return Fetched(await fs._cat_file(path), None)


def read_batch(fs: Any, paths: Sequence[str]) -> list[Fetched | BaseException]:
    """Reads `paths` of the async filesystem `fs` concurrently, all in flight together.

    Returns:
        One entry per path, in order: `Fetched`, or the exception its read raised.
    """
    import fsspec.asyn

    async def gather() -> list[Fetched | BaseException]:
        return await asyncio.gather(*(read_async(fs, p) for p in paths), return_exceptions=True)

    return fsspec.asyn.sync(fs.loop, gather)


def read_one(fs: Any, path: str) -> Fetched:
    """`read_async` from a thread outside the event loop."""
    import fsspec.asyn

    return fsspec.asyn.sync(fs.loop, read_async, fs, path)


async def _s3(fs: Any, path: str) -> Fetched:
    bucket, key, version = fs.split_path(path)
    extra = {"VersionId": version} if version else {}
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **extra)
    body = response["Body"]
    try:
        data = await body.read()
    finally:
        body.close()
    return Fetched(data, integrity.from_s3_response(response))


async def _gcs(fs: Any, path: str) -> Fetched:
    headers, data = await fs._call("GET", fs.url(path))
    return Fetched(data, integrity.from_headers(headers or {}))


async def _azure(fs: Any, path: str) -> Fetched:
    import errno
    import os

    from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

    container, blob, version_id = fs.split_path(fs._strip_protocol(path))
    async with fs.service_client.get_blob_client(container=container, blob=blob) as client:
        try:
            stream = await client.download_blob(
                version_id=version_id,
                max_concurrency=getattr(fs, "max_concurrency", None),
                **getattr(fs, "_timeout_kwargs", {}),
            )
        except ResourceNotFoundError as exc:  # as adlfs's cat_file says it
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from exc
        except HttpResponseError as exc:
            if version_id is not None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from exc
            raise
        data = await stream.readall()
    settings = getattr(stream.properties, "content_settings", None)
    encoding = getattr(settings, "content_encoding", None)
    md5 = None if encoding not in (None, "", "identity") else getattr(settings, "content_md5", None)
    return Fetched(data, integrity.from_content_md5(md5))


async def _http(fs: Any, url: str) -> Fetched:
    session = await fs.set_session()
    encode = getattr(fs, "encode_url", lambda u: u)
    async with session.get(encode(url), **fs.kwargs) as response:
        data = await response.read()
        check = getattr(fs, "_raise_not_found_for_status", None)
        if check is not None:  # fsspec's: 404 as FileNotFoundError, as its cat_file does
            check(response, url)
        else:
            response.raise_for_status()
        headers = dict(response.headers)
    return Fetched(data, integrity.from_headers(headers))


def read_obstore(store: Any, key: str, protocol: str) -> Fetched:
    """Reads `key` of an obstore store with one GET, keeping an S3 ETag as the checksum.

    Raises:
        Exception: obstore's own errors, untranslated (the caller translates them).
    """
    import obstore

    result = obstore.get(store, key)
    data = result.bytes().to_bytes()
    etag = result.meta.get("e_tag") if protocol in S3_PROTOCOLS else None
    return Fetched(data, integrity.from_etag(etag))
