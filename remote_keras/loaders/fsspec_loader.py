"""`FsspecLoader`, the default loader: local paths with `open`, URLs through fsspec."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from remote_keras import errors, lakefs, storage
from remote_keras.presign import PresignedReader, presign_mode


class FsspecLoader:
    """The default loader: local paths with `open`, URLs through fsspec.

    Each object is read with a single GET: s3fs is configured not to send
    a HEAD first (`storage.PROTOCOL_DEFAULTS`), and `lakefs://` objects are
    fetched with one API call instead of lakefs-spec's three, or, when the
    lakeFS server presigns, straight from its object store with one GET
    (`remote_keras.presign`).

    Args:
        storage_options: Passed to fsspec for every URL (credentials,
            `endpoint_url`, ...). Never shown in reprs or errors.
            `"pre_sign"` (`None`, `True` or `False`) is remote_keras's own:
            whether `lakefs://` reads use presigned URLs (see
            `remote_keras.presign`).
        timeout_s: Seconds a connection or read of S3 or HTTP may take
            (iterators pass `RetryPolicy.timeout_s`); `None`: the clients'
            defaults. Timeouts in `storage_options` win.
    """

    def __init__(
        self, storage_options: Mapping[str, Any] | None = None, timeout_s: float | None = None
    ) -> None:
        self.filesystems = storage.FileSystems(storage_options, timeout_s)
        self.presigned = PresignedReader(presign_mode(storage_options))

    def __repr__(self) -> str:
        return "FsspecLoader()"

    def __call__(self, path: str) -> bytes:
        """Reads all bytes of `path`.

        Raises:
            FileNotFoundError, PermissionError, ImageLoadError: naming `path`.
        """
        with errors.reading(path):
            if not storage.is_url(path):
                with open(path, "rb") as f:
                    return f.read()
            fs, inner = self.filesystems.resolve(path)
            if lakefs.is_lakefs(path):
                data = self.presigned.read(fs, path)
                return lakefs.get_object(fs, path) if data is None else data
            return fs.cat_file(inner)

    def close(self) -> None:
        """Drops this loader's references to its filesystems; a later read resolves them again.

        The filesystems themselves stay open: fsspec shares one instance (and its
        connections) between every user of the same options.
        """
        self.filesystems = storage.FileSystems(self.filesystems.storage_options)

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
        results: list[bytes | BaseException] = [b""] * len(paths)
        batched: dict[Any, list[tuple[int, str]]] = {}
        one_by_one = []
        for i, path in enumerate(paths):
            if storage.is_url(path) and not lakefs.is_lakefs(path):
                try:
                    fs, inner = self.filesystems.resolve(path)
                except Exception as exc:  # reported per path
                    results[i] = errors.translate(path, exc)
                    continue
                if storage.is_async(fs):
                    batched.setdefault(fs, []).append((i, inner))
                    continue
            one_by_one.append(i)
        for fs, members in batched.items():
            fetched = fs.cat_ranges([p for _, p in members], None, None, on_error="return")
            for (i, _), value in zip(members, fetched):
                bad = isinstance(value, BaseException)
                results[i] = errors.translate(paths[i], value) if bad else value
        mapper = executor.map if executor is not None else map
        for i, value in zip(one_by_one, mapper(self._capture, [paths[i] for i in one_by_one])):
            results[i] = value
        return results

    def _capture(self, path: str) -> bytes | BaseException:
        try:
            return self(path)
        except Exception as exc:  # returned, raised by the caller
            return exc
