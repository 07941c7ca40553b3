"""What a loader is: any callable `path -> bytes | file-like | PIL.Image | ndarray`.

A loader may also offer `load_many(paths, executor)` to fetch a whole batch
at once (`BatchLoader`), and `exists(path) -> bool`, which
`validate_filenames=True` asks for protocols fsspec does not know.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any, Protocol, runtime_checkable

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
