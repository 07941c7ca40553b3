"""Azure through adlfs: the same `download_blob` as adlfs's `cat_file`, keeping `Content-MD5`."""

from __future__ import annotations

from typing import Any

from remote_keras.storage import integrity
from remote_keras.storage.loaders.fetched import CheckedReader, Fetched


async def read(fs: Any, path: str) -> Fetched:
    """One `download_blob` of `path`, with the blob's `Content-MD5`."""
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


READER = CheckedReader(
    ("abfs", "az", "abfss"), "adlfs", ("split_path", "_strip_protocol", "service_client"), read
)
