"""S3 listing pages through s3fs's own client, parsed for their keys only.

botocore turns every object of a `ListObjectsV2` page into a dict and parses
its timestamp (with dateutil), and recent botocore also parses every S3
response body once more to look for an error embedded in a 200 response.
For a listing only the keys are wanted, so a `before-parse` hook, active
only inside `S3Lister`'s requests, takes the keys out of the body with one
regular expression and hands botocore the body without its `<Contents>`
elements: both parses then read a few hundred bytes. Everything else (the
request, signing, retries, error translation, `EncodingType=url`, common
prefixes) stays botocore's and s3fs's.
"""

from __future__ import annotations

import contextvars
import re
import weakref
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_plus

from remote_keras.storage.listing.listing_pages import Page

# Keys per page asked of S3 (its maximum).
S3_PAGE = 1000

# Set inside the coroutines of `S3Lister`: only their responses are taken apart.
_FAST = contextvars.ContextVar("remote_keras_fast_pages", default=False)
_KEYS = "RemoteKerasKeys"
_KEY = re.compile(rb"<Key>([^<]*)</Key>")
_CONTENTS = re.compile(rb"<Contents>.*?</Contents>", re.S)
_ENTITY = re.compile(r"&(#x[0-9a-fA-F]+|#[0-9]+|amp|lt|gt|quot|apos);")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
_HOOKED: weakref.WeakSet = weakref.WeakSet()  # aiobotocore clients with the hook
_HOOK_ID = "remote_keras-fast-list-pages"


def _unescape(text: str) -> str:
    """Resolves XML's five entities and character references."""

    def one(match: re.Match) -> str:
        name = match.group(1)
        if name[0] != "#":
            return _NAMED[name]
        return chr(int(name[2:], 16) if name[1] == "x" else int(name[1:]))

    return _ENTITY.sub(one, text)


def _take_keys(
    operation_model: Any = None,
    response_dict: dict | None = None,
    customized_response_dict: dict | None = None,
    **_: Any,
) -> None:
    """`before-parse` hook: moves a ListObjectsV2 page's keys out of the body botocore parses."""
    if not _FAST.get() or getattr(operation_model, "name", None) != "ListObjectsV2":
        return
    if response_dict is None or customized_response_dict is None:
        return
    body = response_dict.get("body")
    if response_dict.get("status_code") != 200 or not isinstance(body, bytes):
        return
    keys = _KEY.findall(body)
    if body.count(b"<Contents>") != len(keys):
        return  # not the layout expected: botocore parses it all
    if keys:
        response_dict["body"] = _CONTENTS.sub(b"", body)
    customized_response_dict[_KEYS] = keys


def _hook(client: Any) -> None:
    """Installs `_take_keys` on an aiobotocore S3 client, ahead of botocore's 200-error check.

    Runs on the client's event loop, so no request sees the handlers half moved.
    """
    if client in _HOOKED:
        return
    events = client.meta.events
    check = _builtin_200_check()
    try:
        registered = check is not None and check in events._emitter._handlers.prefix_search(
            "before-parse.s3.ListObjectsV2"
        )
    except AttributeError:  # another emitter layout: hook in without reordering
        registered = False
    if registered:
        events.unregister("before-parse.s3.*", check)
        events.register_first("before-parse.s3.*", _take_keys, unique_id=_HOOK_ID)
        events.register_first("before-parse.s3.*", check)
    else:
        events.register_first("before-parse.s3.ListObjectsV2", _take_keys, unique_id=_HOOK_ID)
    _HOOKED.add(client)


def _builtin_200_check() -> Callable | None:
    try:
        from botocore import handlers
    except ImportError:  # pragma: no cover - s3fs always brings botocore
        return None
    return getattr(handlers, "_handle_200_error", None)


def _decoder(encoded: bool, cut: int) -> Callable[[bytes], str]:
    def decode(raw: bytes) -> str:
        text = raw.decode("utf-8")
        if "&" in text:
            text = _unescape(text)
        return (unquote_plus(text) if encoded else text)[cut:]

    return decode


class S3Lister:
    """Lists S3 pages through an s3fs filesystem's client, keeping only the keys.

    Args:
        fs: An `s3fs.S3FileSystem`.
        bucket: The bucket listed; prefixes are keys within it.
    """

    def __init__(self, fs: Any, bucket: str) -> None:
        self.fs = fs
        self.bucket = bucket
        self.scope: tuple[str, ...] = ("s3", bucket)

    def page(self, prefix: str, delimiter: str, after: str, token: str | None, root: str) -> Page:
        """Lists one page (see `Lister.page`), waiting on the filesystem's event loop."""
        from fsspec.asyn import sync

        return sync(self.fs.loop, self._page, prefix, delimiter, after, token, root)

    async def _page(
        self, prefix: str, delimiter: str, after: str, token: str | None, root: str
    ) -> Page:
        _FAST.set(True)  # this task's context only
        await self.fs.set_session()
        _hook(await self.fs.get_s3(self.bucket))
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": S3_PAGE}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        if token:
            kwargs["ContinuationToken"] = token
        elif after:
            kwargs["StartAfter"] = after
        out = await self.fs._call_s3("list_objects_v2", **kwargs)
        raw = out.get(_KEYS)
        if raw is None:  # the hook did not run: botocore parsed (and decoded) the keys
            full = [entry["Key"] for entry in out.get("Contents") or ()]
            keys = [key[len(root) :] for key in full]
            last = full[-1] if full else ""
        else:
            encoded = out.get("EncodingType") == "url"
            keys = list(map(_decoder(encoded, len(root)), raw))
            last = _decoder(encoded, 0)(raw[-1]) if raw else ""
        prefixes = [entry["Prefix"] for entry in out.get("CommonPrefixes") or ()]
        if prefixes and prefixes[-1] > last:
            last = prefixes[-1]
        more = out.get("IsTruncated") and out.get("NextContinuationToken")
        return Page(keys, prefixes, last, out["NextContinuationToken"] if more else None)
