"""HTTP(S) through fsspec's filesystem: the same GET as its `cat_file`, keeping the headers."""

from __future__ import annotations

from typing import Any

from remote_keras.storage import integrity
from remote_keras.storage.loaders.fetched import CheckedReader, Fetched


async def read(fs: Any, url: str) -> Fetched:
    """One GET of `url`, with the checksum of its response's headers."""
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


READER = CheckedReader(("http", "https"), "fsspec", ("set_session", "kwargs"), read)
