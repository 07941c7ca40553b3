"""`FsspecLoader`, the default loader: local paths with `open`, URLs through fsspec."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from remote_keras import client_logs, errors
from remote_keras.storage import lakefs, locations
from remote_keras.storage.lakefs.presign import PresignedReader
from remote_keras.storage.loaders import checked_reads
from remote_keras.storage.loaders.fetched import Fetched
from remote_keras.storage.loaders.protocol import BuiltinLoader


class FsspecLoader(BuiltinLoader):
    """The default loader: local paths with `open`, URLs through fsspec.

    Each object is read with a single GET: s3fs is configured not to send
    a HEAD first (`locations.PROTOCOL_DEFAULTS`), and `lakefs://` objects are
    fetched with one API call instead of lakefs-spec's three, or, when the
    lakeFS server presigns, straight from its object store with one GET
    (`remote_keras.storage.lakefs.presign`). `read_checked` and `load_many_checked` also
    return the checksum each response carried (`remote_keras.storage.integrity`).

    Args:
        storage_options: Passed to fsspec for every URL (credentials,
            `endpoint_url`, ...). Never shown in reprs or errors.
        timeout_s: Seconds a connection or read of S3 or HTTP may take
            (iterators pass `RetryPolicy.timeout_s`); `None`: the clients'
            defaults. Timeouts in `storage_options` win.
        pre_sign: Whether `lakefs://` reads use presigned URLs: `None` (the
            default) when the server supports them, `True` always (an error
            where the server does not), `False` never (see
            `remote_keras.storage.lakefs.presign`).

    Raises:
        TypeError: `storage_options` holds `pre_sign`.
        ValueError: `pre_sign` is not `None`, `True` or `False`.
    """

    def _open(self) -> None:
        self.filesystems = locations.FileSystems(self.storage_options, self.timeout_s)
        self.presigned = PresignedReader(self.pre_sign)

    def __repr__(self) -> str:
        return "FsspecLoader()"

    def __call__(self, path: str) -> bytes:
        """Reads all bytes of `path`.

        Raises:
            FileNotFoundError, PermissionError, ImageLoadError: naming `path`.
        """
        return self._read(path, checked=False).data

    def read_checked(self, path: str) -> Fetched:
        """Reads all bytes of `path`, with the checksum the store sent with them.

        Returns:
            `Fetched(data, checksum)`; `checksum` is `None` where the store or
            client gives none (local files, multipart ETags, ...).

        Raises:
            OSError: `FileNotFoundError`, `PermissionError` or
                `ImageLoadError`, naming `path`.
        """
        return self._read(path, checked=True)

    def _read(self, path: str, checked: bool) -> Fetched:
        with errors.reading(path):
            if not locations.is_url(path):
                with open(path, "rb") as f:
                    return Fetched(f.read(), None)
            fs, inner = self.filesystems.resolve(path)
            if lakefs.is_lakefs(path):
                found = self.presigned.read(fs, path)
                return Fetched(*(lakefs.get_object(fs, path) if found is None else found))
            if checked and locations.is_async(fs):
                return checked_reads.read_one(fs, inner)
            return Fetched(fs.cat_file(inner), None)

    def close(self) -> None:
        """Drops this loader's references to its filesystems; a later read resolves them again.

        The filesystems themselves stay open: fsspec shares one instance (and its
        connections) between every user of the same options.
        """
        self.filesystems = locations.FileSystems(self.filesystems.storage_options)

    def load_many(
        self, paths: Sequence[str], executor: Executor | None = None
    ) -> list[bytes | BaseException]:
        """Reads several paths concurrently.

        Async backends (s3fs, gcsfs, adlfs, HTTP) get the whole batch in one
        `cat_ranges` call, all requests in flight together on fsspec's event
        loop; other paths are read one per thread of `executor`.

        Args:
            paths: Paths or URLs, possibly repeated.
            executor: Threads for blocking reads; serial without one.

        Returns:
            One entry per path, in order: its bytes, or the exception
            (already naming the path) that reading it raised.
        """
        return [
            r.data if isinstance(r, Fetched) else r
            for r in self._load_many(paths, executor, checked=False)
        ]

    def load_many_checked(
        self, paths: Sequence[str], executor: Executor | None = None
    ) -> list[Fetched | BaseException]:
        """`load_many`, keeping the checksum each response carried (see `read_checked`).

        Async backends get the whole batch at once on fsspec's event loop, as
        in `load_many`, with the same single GET per object.

        Returns:
            One entry per path, in order: `Fetched(data, checksum)`, or the
            exception (already naming the path) that reading it raised.
        """
        return self._load_many(paths, executor, checked=True)

    def _load_many(
        self, paths: Sequence[str], executor: Executor | None, checked: bool
    ) -> list[Fetched | BaseException]:
        results: list[Fetched | BaseException] = [Fetched(b"", None)] * len(paths)
        batched: dict[Any, list[tuple[int, str]]] = {}
        one_by_one = []
        for i, path in enumerate(paths):
            if locations.is_url(path) and not lakefs.is_lakefs(path):
                try:
                    fs, inner = self.filesystems.resolve(path)
                except Exception as exc:  # reported per path
                    results[i] = errors.translate(path, exc)
                    continue
                if locations.is_async(fs):
                    batched.setdefault(fs, []).append((i, inner))
                    continue
            one_by_one.append(i)
        for fs, members in batched.items():
            inner_paths = [p for _, p in members]
            with client_logs.own_calls():  # each failure is translated below, naming its URL
                fetched: list[Any] = (
                    checked_reads.read_batch(fs, inner_paths)
                    if checked
                    else fs.cat_ranges(inner_paths, None, None, on_error="return")
                )
            for (i, _), value in zip(members, fetched):
                if isinstance(value, BaseException):
                    results[i] = errors.translate(paths[i], value)
                else:
                    results[i] = value if isinstance(value, Fetched) else Fetched(value, None)
        mapper = executor.map if executor is not None else map
        read = self._capture_checked if checked else self._capture
        for i, value in zip(one_by_one, mapper(read, [paths[i] for i in one_by_one])):
            results[i] = value
        return results

    def _capture(self, path: str) -> Fetched | BaseException:
        try:
            return self._read(path, checked=False)
        except Exception as exc:  # returned, raised by the caller
            return exc

    def _capture_checked(self, path: str) -> Fetched | BaseException:
        try:
            return self._read(path, checked=True)
        except Exception as exc:  # returned, raised by the caller
            return exc
