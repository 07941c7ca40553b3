"""What a loader is: any callable `path -> bytes | file-like | PIL.Image | ndarray`.

A loader may also offer `load_many(paths, executor)` to fetch a whole batch
at once (`BatchLoader`), `exists(path) -> bool`, which
`validate_filenames=True` asks for protocols fsspec does not know, and
`read_checked` / `load_many_checked`, which also return the checksum the
store sent (`CheckedLoader`, `CheckedBatchLoader`; see `remote_keras.storage.integrity`).
The built-in loaders share their arguments and their checks (`BuiltinLoader`), held
in one `ClientSettings`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, Protocol, runtime_checkable

from remote_keras.storage.lakefs.presign import presign_mode, refuse_in_storage_options

LoaderOutput = Any  # bytes | file-like | PIL.Image.Image | numpy.ndarray
Loader = Callable[[str], LoaderOutput]


@runtime_checkable
class BatchLoader(Protocol):
    """A loader that can also fetch many paths in one call.

    `load_many` gets the iterator's fetch thread pool as `executor`, for
    reads that block a thread each.
    """

    def __call__(self, path: str) -> LoaderOutput: ...

    def load_many(
        self, paths: Sequence[str], executor: Executor | None = None
    ) -> list[LoaderOutput | BaseException]: ...


@runtime_checkable
class CheckedLoader(Protocol):
    """A loader that can also return the checksum the store sent with a body.

    `read_checked(path)` returns `checked_reads.Fetched(data, checksum)`;
    iterators call it instead of the loader itself when `verify_checksums`
    is on, and check the body against the checksum.
    """

    def __call__(self, path: str) -> LoaderOutput: ...

    def read_checked(self, path: str) -> Any: ...


@runtime_checkable
class CheckedBatchLoader(Protocol):
    """A `BatchLoader` whose `load_many_checked` returns `Fetched` (or exceptions) per path."""

    def __call__(self, path: str) -> LoaderOutput: ...

    def load_many_checked(
        self, paths: Sequence[str], executor: Executor | None = None
    ) -> list[Any]: ...


def offers_checked(loader: Any, plain: str, checked: str) -> bool:
    """Whether `loader.<checked>` reads as its `loader.<plain>` does.

    A subclass of a built-in loader that overrides only `load_many` (or
    `__call__`) inherits the parent's checked method, which would bypass the
    override: its reads then go through the plain method and count as
    unverified.

    Args:
        loader: The loader.
        plain: `"load_many"` or `"__call__"`.
        checked: `"load_many_checked"` or `"read_checked"`.

    Returns:
        True when the class that defines the checked method is the one that
        defines the plain method, or a subclass of it.
    """
    mro = type(loader).__mro__
    plain_owner = next((c for c in mro if plain in vars(c)), None)
    checked_owner = next((c for c in mro if checked in vars(c)), None)
    if plain_owner is None or checked_owner is None:
        return checked_owner is not None
    return issubclass(checked_owner, plain_owner)


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    """What the built-in loaders make their clients with: one object through every layer.

    The model is httpx's `Timeout` and `Limits` (`remote_keras.storage.connections`).

    Args:
        storage_options: fsspec-style options for every URL (credentials,
            `endpoint_url`, ...). Never shown in reprs or errors.
        timeout_s: Seconds one request may take (iterators pass
            `RetryPolicy.timeout_s`); `None`: the clients' defaults.
        pre_sign: Whether `lakefs://` reads use presigned URLs: `None` when
            the server supports them, `True` always, `False` never
            (`remote_keras.storage.lakefs.presign`).

    Raises:
        TypeError: `storage_options` holds `pre_sign`.
        ValueError: `pre_sign` is not `None`, `True` or `False`.
    """

    storage_options: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    timeout_s: float | None = None
    pre_sign: bool | None = None

    def __post_init__(self) -> None:
        refuse_in_storage_options(self.storage_options)
        object.__setattr__(self, "storage_options", dict(self.storage_options or {}))
        presign_mode(self.pre_sign)

    @classmethod
    def of(cls, given: ClientSettings | Mapping[str, Any] | None) -> ClientSettings:
        """`given` itself, or settings with `given` as the storage options.

        Args:
            given: `ClientSettings`, or fsspec-style storage options, or `None`.

        Returns:
            The `ClientSettings`.
        """
        return given if isinstance(given, ClientSettings) else cls(given or {})


class BuiltinLoader:
    """The arguments of the built-in loaders (`FsspecLoader`, `ObstoreLoader`), checked once.

    Each subclass builds its clients' state from them in `_open`. The
    arguments are those of `ClientSettings` (held as `settings`), and so are
    the errors raised for them; `from_settings` takes the object itself.
    """

    def __init__(
        self,
        storage_options: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
        pre_sign: bool | None = None,
    ) -> None:
        self.settings = ClientSettings(storage_options or {}, timeout_s, pre_sign)
        self._open()

    @classmethod
    def from_settings(cls, settings: ClientSettings) -> Any:
        """The loader made with `settings` (`ClientSettings`), the object itself kept."""
        loader = cls.__new__(cls)
        loader.settings = settings
        loader._open()
        return loader

    @property
    def storage_options(self) -> Mapping[str, Any]:
        """The storage options its clients are made with (never shown)."""
        return self.settings.storage_options

    @property
    def timeout_s(self) -> float | None:
        """Seconds one request may take; `None`: the clients' defaults."""
        return self.settings.timeout_s

    @property
    def pre_sign(self) -> bool | None:
        """Whether `lakefs://` reads use presigned URLs (`None`: when the server supports them)."""
        return self.settings.pre_sign

    def _open(self) -> None:
        """Builds the loader's state from `storage_options`, `timeout_s` and `pre_sign`."""
        raise NotImplementedError
