"""Whether HTTP(S) URLs exist, without downloading them: one HEAD each, many in flight.

fsspec's `HTTPFileSystem.exists` (and `isfile`) sends a GET and closes the response
unread, while the server sends the whole body anyway: checking a dataframe of HTTP URLs
cost a GET per row, so the first epoch read every image twice. Here a URL costs one
HEAD (`IN_FLIGHT` at a time). A server that answers a HEAD with an error other than
404 or 410 (405 or 501: no HEAD; 403: a presigned URL signed for GET only) is asked
again with a GET of the first byte (`Range: bytes=0-0`), as fsspec's check would,
at most one byte of body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from fsspec import AbstractFileSystem

# HEAD requests in flight at once per filesystem.
IN_FLIGHT = 32
# Statuses of a HEAD that say the URL does not exist, with no need to ask again by GET.
ABSENT = frozenset({404, 410})
# 416 Range Not Satisfiable: the object exists and is empty.
_EMPTY = 416


def exist_many(fs: AbstractFileSystem, paths: Sequence[str]) -> list[bool | BaseException]:
    """Whether each of `paths` exists on the HTTP filesystem `fs`.

    Args:
        fs: An fsspec `HTTPFileSystem`; its storage options (headers, auth, ...) are sent.
        paths: URLs as `fs` takes them.

    Returns:
        One entry per path, in order: whether it exists (a status below 400), or the
        exception that asking raised (refused connection, timeout, ...), for the caller to
        translate naming the URL.
    """
    from fsspec.asyn import sync

    return list(sync(fs.loop, _exist_all, fs, list(paths)))


def exists(fs: AbstractFileSystem, path: str) -> bool:
    """`exist_many` for one path; raises what asking raised."""
    result = exist_many(fs, [path])[0]
    if isinstance(result, BaseException):
        raise result
    return result


async def _exist_all(fs: Any, paths: list[str]) -> list[bool | BaseException]:
    session = await fs.set_session()
    limit = asyncio.Semaphore(IN_FLIGHT)

    async def one(path: str) -> bool | BaseException:
        async with limit:
            try:
                return await _exists(session, fs, path)
            except Exception as exc:  # returned: the caller names the URL
                return exc

    return list(await asyncio.gather(*(one(path) for path in paths)))


async def _exists(session: Any, fs: Any, path: str) -> bool:
    url = fs.encode_url(path)
    options = dict(fs.kwargs)
    options["allow_redirects"] = options.get("allow_redirects", True)
    async with session.head(url, **options) as response:
        if response.status < 400:
            return True
        if response.status in ABSENT:
            return False
    options["headers"] = {**(options.get("headers") or {}), "Range": "bytes=0-0"}
    async with session.get(url, **options) as response:
        return response.status < 400 or response.status == _EMPTY
