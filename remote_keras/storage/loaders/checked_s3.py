"""S3 through s3fs: botocore's `get_object`, as s3fs's `cat_file` calls it (no HEAD).

Keeps the response's ETag, encryption and `x-amz-checksum-*` fields.
"""

from __future__ import annotations

from typing import Any

from remote_keras.storage import integrity
from remote_keras.storage.loaders.fetched import CheckedReader, Fetched


async def read(fs: Any, path: str) -> Fetched:
    """One `get_object` of `path`, with the checksum of its response."""
    bucket, key, version = fs.split_path(path)
    extra = {"VersionId": version} if version else {}
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **extra)
    body = response["Body"]
    try:
        data = await body.read()
    finally:
        body.close()
    return Fetched(data, integrity.from_s3_response(response))


READER = CheckedReader(("s3", "s3a"), "s3fs", ("split_path", "_call_s3"), read)
