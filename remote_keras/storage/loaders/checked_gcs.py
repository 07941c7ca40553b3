"""GCS through gcsfs: the same GET as gcsfs's `cat_file`, keeping `x-goog-hash`."""

from __future__ import annotations

from typing import Any

from remote_keras.storage import integrity
from remote_keras.storage.loaders.fetched import CheckedReader, Fetched


async def read(fs: Any, path: str) -> Fetched:
    """One GET of `path`, with the checksum of its response."""
    headers, data = await fs._call("GET", fs.url(path))
    return Fetched(data, integrity.from_headers(headers or {}))


READER = CheckedReader(("gs", "gcs"), "gcsfs", ("_call", "url"), read)
