"""Direct reads of `lakefs://` objects through presigned URLs, bypassing the lakeFS server.

When the lakeFS server reports `pre_sign_support` (an S3, GCS or Azure
blockstore), `objects/ls?presign=true` returns each object's
`physical_address` as an HTTP(S) URL of the underlying store, valid until
`physical_address_expiry`. `PresignedReader` lists a folder that way once
(pages of 1,000), keeps the addresses, and reads every image with one GET
to the store: no request reaches the lakeFS server per image. Each read
keeps the checksum in the store's headers (`integrity.from_headers`).

The iterators name the URLs they will read (`expect`): the first read then
starts listing all their folders in the background and renewing them
half-way through their lifetime (`remote_keras.storage.lakefs.presign_ahead`), so a
lakeFS server outage does not stop reads from the store while the
addresses are valid.

Addresses are also renewed in bulk when needed: when one is about to
expire, or the store answers 403 to one that has been in use for `FRESH_S`
or more (it expired by the store's clock, which may run ahead of ours), the
whole folder is listed again, once, and every thread waiting on that folder
reads with the new addresses. A 403 to a freshly signed address is a
`PermissionError`. A listing the lakeFS server does not answer is a
`ConnectionError` naming that server, retried up to the retry policy's
deadline like any transient failure.

The `pre_sign` option (a keyword argument of the generator, its
`flow_from_*` methods and `image_dataset_from_directory`, and of
`FsspecLoader`) chooses: `None` (the default) presigns when the server
supports it, `True` requires it, `False` always reads through the lakeFS
server (`GET .../objects`). It is remote_keras's own, not a storage option:
inside `storage_options` it is refused with a message saying where it goes.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from remote_keras import errors
from remote_keras.errors import StoreResponseError
from remote_keras.storage import connections, integrity, lakefs, retry
from remote_keras.storage.lakefs.presign_ahead import PresignAhead
from remote_keras.storage.packed_paths import AddressTable, PrefixedPaths

OPTION = "pre_sign"
# lakeFS's default lifetime of a presigned URL, for servers that send no expiry.
DEFAULT_LIFETIME_S = 900.0
# Renew this long before the expiry: a tenth of the lifetime, at most 30 s.
MARGIN_FRACTION, MAX_MARGIN_S = 0.1, 30.0
# A 403 to an address signed at least this long ago counts as its expiry, not as a refusal.
FRESH_S = 1.0


def presign_mode(mode: Any) -> bool | None:
    """Returns `mode` checked as a `pre_sign` value: `None` (automatic), `True` or `False`.

    Raises:
        ValueError: `mode` is not `None`, `True` or `False`.
    """
    if mode is not None and mode is not True and mode is not False:
        raise ValueError(
            f"`{OPTION}` must be None (automatic), True or False. Received: {OPTION}={mode!r}"
        )
    return mode


def refuse_in_storage_options(storage_options: Mapping[str, Any] | None) -> None:
    """Raises if `storage_options` holds `pre_sign`, remote_keras's own keyword argument.

    Raises:
        TypeError: naming the keyword argument to use instead.
    """
    if storage_options is not None and OPTION in storage_options:
        raise TypeError(
            f"`{OPTION}` is a keyword argument of remote_keras, not a storage option: pass "
            f"`{OPTION}={storage_options[OPTION]!r}` next to `storage_options` (to the "
            "generator, `flow_from_*`, `image_dataset_from_directory` or `FsspecLoader`)"
        )


class _Folder:
    """The presigned addresses of one folder's objects, from one listing."""

    __slots__ = ("expiry", "issued", "margin", "urls")

    def __init__(self, urls: dict[str, str], expiry: float | None, now: float) -> None:
        self.urls = AddressTable(urls)  # path -> presigned URL, packed
        self.issued = now
        self.expiry = float(expiry) if expiry else now + DEFAULT_LIFETIME_S
        self.margin = min(MAX_MARGIN_S, MARGIN_FRACTION * max(0.0, self.expiry - now))

    def expired(self, now: float) -> bool:
        return now >= self.expiry - self.margin

    def renew_at(self) -> float:
        """When the background renews it: half-way through its lifetime."""
        return self.issued + (self.expiry - self.issued) / 2


class PresignedReader:
    """Reads `lakefs://` objects from their presigned addresses, one GET each.

    One reader serves a loader; it is thread-safe, pickles without its
    addresses, threads and connections, and starts afresh after a fork.

    Args:
        mode: `None` (presign when the server supports it), `True` (require
            it) or `False` (never; `read` always returns `None`).
    """

    def __init__(self, mode: bool | None = None) -> None:
        self.mode = mode
        self._expected: list[tuple[str, str, str]] = []  # (repository, ref, folder)
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._support_lock = threading.Lock()
        self._folder_locks: dict[tuple[str, str, str, str], threading.Lock] = {}
        self._folders: dict[tuple[str, str, str, str], _Folder] = {}
        self._support: dict[str, bool] = {}
        self._http: Any = None
        self._ahead: PresignAhead | None = None
        self.clock = time.time  # the clock addresses expire by (tests move it)
        self.listings = 0  # folder listings made, in this process

    def __repr__(self) -> str:
        return f"PresignedReader(mode={self.mode!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"mode": self.mode, "expected": self._expected}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.mode = state["mode"]
        self._expected = state.get("expected", [])
        self._reset()

    def expect(self, urls: Iterable[str]) -> None:
        """Names the `lakefs://` URLs to be read, in reading order, to list their folders ahead.

        At the first read, every folder they are in is listed in the
        background (in the order first needed) and its addresses kept, then
        renewed half-way through their lifetime while reads go on: a lakeFS
        server outage does not stop reads while the addresses are valid.

        Args:
            urls: Paths and URLs; those that are not `lakefs://` are ignored.
        """
        folders: dict[str, None] = {}
        if isinstance(urls, PrefixedPaths):  # one prefix: only the names' folders vary
            if lakefs.is_lakefs(urls.prefix):
                prefix = urls.prefix
                heads = dict.fromkeys(name.rpartition("/")[0] for name in urls.names)
                folders = {prefix + head + "/" if head else prefix: None for head in heads}
            urls = ()
        for url in urls:
            if lakefs.is_lakefs(url):
                folders.setdefault(url.rpartition("/")[0] + "/")
        self._expected = [lakefs.split(folder) for folder in folders]

    def close(self) -> None:
        """Stops listing ahead (the next read starts again)."""
        if self._ahead is not None:
            self._ahead.stop()

    @property
    def ahead(self) -> PresignAhead | None:
        """The background lister of this process, once a read started it."""
        return self._ahead

    def read(self, fs: Any, url: str) -> tuple[bytes, integrity.Checksum | None] | None:
        """Reads `url` from its presigned address, or returns `None` to read through lakeFS.

        Args:
            fs: The `lakefs_spec.LakeFSFileSystem` serving `url`.
            url: `lakefs://repo/ref/path` (pinned to a commit by the iterators).

        Returns:
            The object's bytes and the checksum in the store's headers (its
            ETag where it is an MD5), or `None` when presigning is off or unsupported.

        Raises:
            FileNotFoundError, PermissionError, ImageLoadError: naming `url`
                (never the presigned URL, which is a credential).
            ConnectionError: the lakeFS server, named, did not list the
                addresses (retried).
            StoreResponseError: a transient status of the store (retried).
        """
        if self.mode is False:
            return None
        if self._pid != os.getpid():
            self._reset()  # the parent's locks, threads and connections are not ours
        host = str(fs.client.config.host)
        if not self._supported(fs, host, url):
            return None
        if self._expected:
            self._start_ahead(fs, host)
        repository, ref, path = lakefs.split(url)
        folder = path.rpartition("/")[0]
        key = (host, repository, ref, folder + "/" if folder else "")
        found = self._address(fs, key, path, url, renew_before=None)
        if found is None:
            return None
        for _ in range(3):  # the first read, then at most two renewals after expiry
            address, listing = found
            status, data, headers = self._get(address, url)
            if status == 200:
                return data, integrity.from_headers(headers, etag="ETag")
            if status == 403 and self.clock() - listing.issued >= FRESH_S:  # expired
                found = self._address(fs, key, path, url, renew_before=listing)
                if found is None:
                    return None
                continue
            raise self._status_error(url, status)
        raise self._status_error(url, 403)

    def renew_at(self, key: tuple[str, str, str, str]) -> float:
        """When folder `key` is due for listing (`0.0`: not listed yet), for `PresignAhead`."""
        listing = self._folders.get(key)
        return 0.0 if listing is None else listing.renew_at()

    def list_folder(self, fs: Any, key: tuple[str, str, str, str]) -> None:
        """Lists the folder `key` unless it is not due (see `renew_at`); used by `PresignAhead`.

        Args:
            fs: The filesystem of its host.
            key: `(host, repository, ref, folder)`.
        """
        with self._folder_lock(key):
            if self.clock() >= self.renew_at(key):
                _, repository, ref, folder = key
                self._list(fs, key, f"lakefs://{repository}/{ref}/{folder}")

    # ------------------------------------------------------------------ internals

    def _start_ahead(self, fs: Any, host: str) -> None:
        current = self._ahead
        if current is not None and current.alive():
            current.touch()
            return
        with self._lock:
            if self._ahead is None or not self._ahead.alive():
                keys = [(host, *folder) for folder in self._expected]
                self._ahead = PresignAhead(self, fs, keys)
                self._ahead.start()

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
                f"{OPTION}=True, but the lakeFS server of "
                f"{errors.redact(url)!r} does not support presigned URLs "
                "(its storage config has pre_sign_support=false)"
            )
        return supported

    def _folder_lock(self, key: tuple[str, str, str, str]) -> threading.Lock:
        with self._lock:
            return self._folder_locks.setdefault(key, threading.Lock())

    def _address(
        self,
        fs: Any,
        key: tuple[str, str, str, str],
        path: str,
        url: str,
        renew_before: _Folder | None,
    ) -> tuple[str, _Folder] | None:
        """The address of `path`, listing its folder again if absent, expired or `renew_before`."""
        with self._folder_lock(key):
            listing = self._folders.get(key)
            if listing is None or listing.expired(self.clock()) or listing is renew_before:
                listing = self._list(fs, key, url)
        address = listing.urls.get(path)
        if address is None:
            raise FileNotFoundError(f"No such file or object: {errors.redact(url)!r}")
        if not address.startswith(("http://", "https://")):
            return None  # the server presigns, but not this object's store: read through it
        return address, listing

    def _list(self, fs: Any, key: tuple[str, str, str, str], url: str) -> _Folder:
        """Lists the folder `key` with presigned addresses (its lock held) and keeps them."""
        host, repository, ref, prefix = key
        try:
            listed = lakefs.list_presigned(fs, repository, ref, prefix)
        except Exception as exc:
            raise _listing_error(url, host, exc) from exc
        self.listings += 1
        expiries = [expiry for _, expiry in listed.values() if expiry]
        urls = {path: address for path, (address, _) in listed.items()}
        listing = _Folder(urls, min(expiries) if expiries else None, self.clock())
        self._folders[key] = listing
        return listing

    def _get(self, address: str, url: str) -> tuple[int, bytes, Any]:
        if self._http is None:
            import urllib3

            with self._lock:
                if self._http is None:
                    self._http = urllib3.PoolManager(
                        maxsize=connections.LIMITS.per_host,
                        retries=False,
                        timeout=urllib3.Timeout(*lakefs.REQUEST_TIMEOUT_S),
                    )
        try:
            response = self._http.request("GET", address, preload_content=True)
        except Exception as exc:  # the presigned URL is a credential: name the lakeFS URL
            error = errors.translate(url, _without_address(exc))
        else:
            return response.status, response.data, response.headers
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
                f"lakeFS server with {OPTION}=False"
            )
        message = f"the object store answered {status} to a presigned GET"
        return errors.translate(url, StoreResponseError(message, status))


def expect(loader: Any, urls: Iterable[str]) -> None:
    """Tells `loader`'s presigned reader, if it has one, the URLs it will read (`expect`)."""
    reader = _reader_of(loader)
    if reader is not None:
        reader.expect(urls)


def close(loader: Any) -> None:
    """Stops the background listing of `loader`'s presigned reader, if it has one."""
    reader = _reader_of(loader)
    if reader is not None:
        reader.close()


def _reader_of(loader: Any) -> PresignedReader | None:
    """The reader of an `FsspecLoader`, or of the one an `ObstoreLoader` reads lakeFS with."""
    for candidate in (loader, getattr(loader, "_fallback", None)):
        reader = getattr(candidate, "presigned", None)
        if isinstance(reader, PresignedReader):
            return reader
    return None


def _listing_error(url: str, host: str, exc: BaseException) -> BaseException:
    """A failed presigned listing, naming the object and the lakeFS server (both redacted)."""
    translated = errors.translate(url, exc)
    if isinstance(translated, (FileNotFoundError, PermissionError, ValueError)):
        return translated
    server = errors.redact(host)
    cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    message = (
        f"The lakeFS server {server!r} did not list the presigned addresses needed to read "
        f"{errors.redact(url)!r} ({cause})"
    )
    if retry.is_transient(exc):
        return ConnectionError(message)
    return errors.ImageLoadError(errors.redact(url), message)


def _without_address(exc: BaseException) -> BaseException:
    """A connection error without the URL (and its signature) that urllib3 puts in messages."""
    kind = type(exc).__name__
    if isinstance(exc, TimeoutError) or "Timeout" in kind:
        return TimeoutError(f"{kind} reading from the object store")
    return ConnectionError(f"{kind} reading from the object store")
