"""`save_to_dir`: augmented samples written as image files, locally as Keras does or to a URL.

A local `save_to_dir` is written exactly as stock Keras writes it
(`os.path.join` and `PIL.Image.save`). A URL `save_to_dir` takes a plain
`save_prefix` only: one with `/`, `\\` or `::` could name another folder,
bucket or filesystem (`"../x"`, `"s3://other/x"`), so it is refused when
the iterator is made. Each file is one PUT, bounded like a read by the
retry policy: a request past `timeout_s` is cancelled and, like any
transient failure, tried again until `deadline_s`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from remote_keras import errors
from remote_keras.storage import locations, retry

_SEPARATORS = ("/", "\\", "::")


def check_save_prefix(save_to_dir: Any, save_prefix: Any) -> None:
    """Refuses a `save_prefix` that could leave a URL `save_to_dir`.

    Raises:
        ValueError: `save_to_dir` is a URL and `save_prefix` holds `/`, `\\` or `::`.
    """
    if not save_to_dir or not locations.is_url(os.fspath(save_to_dir)):
        return  # local: as stock Keras (`os.path.join`)
    prefix = str(save_prefix)
    if any(separator in prefix for separator in _SEPARATORS):
        raise ValueError(
            f"save_prefix={prefix!r} would write outside save_to_dir="
            f"{errors.redact(os.fspath(save_to_dir))!r}: with a URL save_to_dir, "
            "save_prefix must be a plain file-name prefix (no '/', '\\\\' or '::'). "
            "Put sub-folders in save_to_dir instead."
        )


@dataclasses.dataclass(frozen=True)
class SaveTarget:
    """Where `save_to_dir` writes, and what writes it.

    Attributes:
        directory: Keras's `save_to_dir`: a local folder or a URL.
        format: Keras's `save_format` (`"png"`, `"jpeg"`, ...).
        filesystems: The fsspec filesystems a URL is written through.
        policy: Retries and timeouts of each PUT (`retry.RetryPolicy`).
        executor: Gives the threads the PUTs run on.
    """

    directory: str | os.PathLike[str]
    format: str
    filesystems: locations.FileSystems
    policy: retry.RetryPolicy
    executor: Callable[[], Executor]


def save(target: SaveTarget, images: Sequence[Any], names: Sequence[str]) -> None:
    """Writes `images` (PIL images) as `names` in `target.directory`.

    Raises:
        OSError: a file could not be written (naming it), after retries.
    """
    directory = os.fspath(target.directory)
    if not locations.is_url(directory):
        for img, name in zip(images, names):
            img.save(os.path.join(directory, name))
        return
    payloads = {}
    for img, name in zip(images, names):
        buffer = io.BytesIO()
        img.save(buffer, format=target.format)
        payloads[locations.join(directory, name)] = buffer.getvalue()
    policy, executor, filesystems = target.policy, target.executor(), target.filesystems

    def once(urls: list[str]) -> list[Any]:
        futures = [
            executor.submit(_put, filesystems, url, payloads[url], policy.timeout_s) for url in urls
        ]
        deadline = time.monotonic() + policy.timeout_s + 1.0  # `_put` ends its own by then
        results: list[Any] = []
        for url, future in zip(urls, futures):
            try:
                results.append(future.result(timeout=max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                future.cancel()
                stalled = TimeoutError(f"no answer within {policy.timeout_s} s")
                results.append(errors.translate(url, stalled))
            except Exception as exc:  # returned: retried if transient
                results.append(errors.translate(url, exc))
        return results

    results, _ = retry.fetch_with_retries(once, list(payloads), policy)
    for result in results:
        if isinstance(result, BaseException):
            if isinstance(result, errors.ImageLoadError):
                message = str(result).replace("Gave up reading", "Gave up saving", 1)
                raise errors.ImageLoadError(result.url, message) from result
            raise result


def _put(filesystems: locations.FileSystems, url: str, data: bytes, timeout: float) -> None:
    """Writes one object; on fsspec's event loop, cancelled after `timeout` seconds."""
    fs, path = filesystems.resolve(url)
    with errors.reading(url):
        if locations.is_async(fs):
            from fsspec.asyn import sync

            sync(fs.loop, _bounded, fs._pipe_file, path, data, timeout)
        else:
            fs.pipe_file(path, data)


async def _bounded(pipe: Any, path: str, data: bytes, timeout: float) -> None:
    try:
        await asyncio.wait_for(pipe(path, data), timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(f"no answer within {timeout} s") from None
