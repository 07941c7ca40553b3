"""Direct reads of `lakefs://` objects through presigned URLs, bypassing the lakeFS server.

When the lakeFS server reports `pre_sign_support` (an S3, GCS or Azure
blockstore), `objects/ls?presign=true` returns each object's
`physical_address` as an HTTP(S) URL of the underlying store, valid until
`physical_address_expiry`. `PresignedReader` lists a folder that way once
(pages of 1,000), keeps the addresses, and reads every image with one GET
to the store: no request reaches the lakeFS server per image.

Addresses are renewed in bulk: when one is about to expire, or the store
answers 403 to one that has been in use for `FRESH_S` or more (it expired
by the store's clock, which may run ahead of ours), the whole folder is
listed again, once, and every thread waiting on that folder reads with the
new addresses. A 403 to a freshly signed address is a `PermissionError`.

`storage_options={"pre_sign": ...}` chooses: `None` (or absent, the
default) presigns when the server supports it, `True` requires it, `False`
always reads through the lakeFS server (`GET .../objects`). The option is
remote_keras's own; it never reaches lakefs-spec.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from remote_keras import errors, lakefs

OPTION = "pre_sign"
# lakeFS's default lifetime of a presigned URL, for servers that send no expiry.
DEFAULT_LIFETIME_S = 900.0
# Renew this long before the expiry: a tenth of the lifetime, at most 30 s.
MARGIN_FRACTION, MAX_MARGIN_S = 0.1, 30.0
# A 403 to an address signed at least this long ago counts as its expiry, not as a refusal.
FRESH_S = 1.0


class StoreResponseError(OSError):
    """The object store answered a presigned GET with an error status.

    Attributes:
        status: The HTTP status (retried when transient: 408, 429, 5xx).
    """

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message, status)
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0])


def presign_mode(storage_options: Mapping[str, Any] | None) -> bool | None:
    """Returns the `pre_sign` storage option: `None` (automatic), `True` or `False`.

    Raises:
        ValueError: the option is not `None`, `True` or `False`.
    """
    mode = (storage_options or {}).get(OPTION)
    if mode not in (None, True, False):
        raise ValueError(
            f"storage_options['{OPTION}'] must be None (automatic), True or False. "
            f"Received: {mode!r}"
        )
    return mode


class _Address:
    __slots__ = ("expiry", "issued", "margin", "url")

    def __init__(self, url: str, expiry: float | None, now: float) -> None:
        self.url = url
        self.issued = now
        self.expiry = float(expiry) if expiry else now + DEFAULT_LIFETIME_S
        self.margin = min(MAX_MARGIN_S, MARGIN_FRACTION * max(0.0, self.expiry - now))

    def expired(self, now: float) -> bool:
        return now >= self.expiry - self.margin


class PresignedReader:
    """Reads `lakefs://` objects from their presigned addresses, one GET each.

    One reader serves a loader; it is thread-safe, pickles without its
    addresses and connections, and starts afresh after a fork.

    Args:
        mode: `None` (presign when the server supports it), `True` (require
            it) or `False` (never; `read` always returns `None`).
    """

    def __init__(self, mode: bool | None = None) -> None:
        self.mode = mode
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._support_lock = threading.Lock()
        self._folder_locks: dict[tuple[str, str, str, str], threading.Lock] = {}
        self._folders: dict[tuple[str, str, str, str], dict[str, _Address]] = {}
        self._support: dict[str, bool] = {}
        self._http: Any = None
        self.listings = 0  # folder listings made, in this process

    def __repr__(self) -> str:
        return f"PresignedReader(mode={self.mode!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"mode": self.mode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.mode = state["mode"]
        self._reset()

    def read(self, fs: Any, url: str) -> bytes | None:
        """Reads `url` from its presigned address, or returns `None` to read through lakeFS.

        Args:
            fs: The `lakefs_spec.LakeFSFileSystem` serving `url`.
            url: `lakefs://repo/ref/path` (pinned to a commit by the iterators).

        Returns:
            The object's bytes, or `None` when presigning is off or unsupported.

        Raises:
            FileNotFoundError, PermissionError, ImageLoadError: naming `url`
                (never the presigned URL, which is a credential).
            StoreResponseError: a transient status of the store (retried).
        """
        if self.mode is False:
            return None
        if self._pid != os.getpid():
            self._reset()  # the parent's locks and connections are not ours
        host = str(fs.client.config.host)
        if not self._supported(fs, host, url):
            return None
        repository, ref, path = lakefs.split(url)
        folder = path.rpartition("/")[0]
        key = (host, repository, ref, folder + "/" if folder else "")
        address = self._address(fs, key, path, url, renew_before=None)
        if address is None:
            return None
        for _ in range(3):  # the first read, then at most two renewals after expiry
            status, data = self._get(address.url, url)
            if status == 200:
                return data
            if status == 403 and time.time() - address.issued >= FRESH_S:  # expired
                renewed = self._address(fs, key, path, url, renew_before=address)
                if renewed is None:
                    return None
                address = renewed
                continue
            raise self._status_error(url, status)
        raise self._status_error(url, 403)

    # ------------------------------------------------------------------ internals

    def _supported(self, fs: Any, host: str, url: str) -> bool:
        supported = self._support.get(host)
        if supported is None:
            with self._support_lock:  # one `GET /config` however many threads start at once
                supported = self._support.get(host)
                if supported is None:
                    with errors.reading(url):
                        supported = lakefs.presign_supported(fs)
                    self._support[host] = supported
        if not supported and self.mode is True:
            raise ValueError(
                f"storage_options['{OPTION}']=True, but the lakeFS server of "
                f"{errors.redact(url)!r} does not support presigned URLs "
                "(its storage config has pre_sign_support=false)"
            )
        return supported

    def _address(
        self,
        fs: Any,
        key: tuple[str, str, str, str],
        path: str,
        url: str,
        renew_before: _Address | None,
    ) -> _Address | None:
        """The address of `path`, listing its folder again if absent, expired or `renew_before`."""
        with self._lock:
            lock = self._folder_locks.setdefault(key, threading.Lock())
        with lock:
            now = time.time()
            addresses = self._folders.get(key, {})
            found = addresses.get(path)
            stale = found is None or found.expired(now) or found is renew_before
            if stale:
                _, repository, ref, prefix = key
                with errors.reading(url):
                    listed = lakefs.list_presigned(fs, repository, ref, prefix)
                self.listings += 1
                now = time.time()
                addresses = {p: _Address(u, e, now) for p, (u, e) in listed.items()}
                self._folders[key] = addresses
                found = addresses.get(path)
        if found is None:
            raise FileNotFoundError(f"No such file or object: {errors.redact(url)!r}")
        if not found.url.startswith(("http://", "https://")):
            return None  # the server presigns, but not this object's store: read through it
        return found

    def _get(self, address: str, url: str) -> tuple[int, bytes]:
        if self._http is None:
            import urllib3

            with self._lock:
                if self._http is None:
                    self._http = urllib3.PoolManager(
                        maxsize=lakefs.POOL_CONNECTIONS,
                        retries=False,
                        timeout=urllib3.Timeout(*lakefs.REQUEST_TIMEOUT_S),
                    )
        try:
            response = self._http.request("GET", address, preload_content=True)
        except Exception as exc:  # the presigned URL is a credential: name the lakeFS URL
            error = errors.translate(url, _without_address(exc))
        else:
            return response.status, response.data
        raise error  # outside `except`: urllib3's error, which holds the URL, is not chained

    @staticmethod
    def _status_error(url: str, status: int) -> BaseException:
        shown = errors.redact(url)
        if status == 404:
            return FileNotFoundError(f"No such file or object: {shown!r} (404 from the store)")
        if status in (401, 403):
            return PermissionError(
                f"Access denied to {shown!r}: the object store refused a freshly presigned URL "
                f"({status}); check the store's policy, or read through the "
                f"lakeFS server with storage_options={{'{OPTION}': False}}"
            )
        message = f"the object store answered {status} to a presigned GET"
        return errors.translate(url, StoreResponseError(message, status))


def _without_address(exc: BaseException) -> BaseException:
    """A connection error without the URL (and its signature) that urllib3 puts in messages."""
    kind = type(exc).__name__
    if isinstance(exc, TimeoutError) or "Timeout" in kind:
        return TimeoutError(f"{kind} reading from the object store")
    return ConnectionError(f"{kind} reading from the object store")
