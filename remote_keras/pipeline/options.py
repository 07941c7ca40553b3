"""remote_keras's own arguments: one options class, documented, typed and checked once.

`LoaderOptions` holds every keyword argument that remote_keras adds to
Keras's `ImageDataGenerator`, `flow_from_*` and iterators. The generator keeps
one as its defaults; each `flow_from_*` call (and each iterator) takes
overrides by the same names (`LoaderOverrides`, for type checkers and IDEs).
An argument that is not given inherits; one given as `None` means that
option's documented `None` (e.g. `cache_dir=None` turns a generator's disk
cache off for one call).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from remote_keras.storage.lakefs.presign import presign_mode, refuse_in_storage_options
from remote_keras.storage.loaders import LOADER_NAMES, Loader
from remote_keras.storage.retry import RetryPolicy, as_policy

OnError = Literal["raise", "skip"]
ShardRemainder = Literal["pad", "drop"]

DEFAULT_CACHE_MAX_BYTES = 10 * 2**30


@dataclasses.dataclass(frozen=True)
class LoaderOptions:
    """How an iterator reads, decodes, retries, caches and shards (all keyword arguments).

    Args:
        loader: Callable `path -> bytes | file-like | PIL.Image | ndarray`
            that does all reading, or a name: `"auto"` (the default:
            `"obstore"` for `s3://`, `gs://` and `az://` when obstore is
            installed and can express the storage options and environment,
            else `"fsspec"`; `iterator.loader_choice` says which and why),
            `"fsspec"` (`FsspecLoader`) or `"obstore"` (`ObstoreLoader`,
            faster on S3/GCS/Azure).
        storage_options: Passed to fsspec (credentials, `endpoint_url`, ...);
            never shown in reprs or errors. `None`: none.
        workers: Threads (or processes) Keras's `fit` uses to request
            batches; each builds a different batch. Defaults to 4. On Keras
            3's JAX and PyTorch backends Keras asks from its own thread
            (its worker queue would hand one pass's batches to the next)
            and the iterator reads `prefetch_batches` ahead itself.
        use_multiprocessing: Passed to `keras.utils.PyDataset` (TensorFlow
            only, as `workers`).
        max_queue_size: Passed to `keras.utils.PyDataset`. Defaults to 10.
        prefetch_batches: Batches built ahead when they are asked for in
            order. Defaults to 4.
        max_in_flight: Requests in flight for loaders without `load_many`
            (custom loaders, `"obstore"`). Defaults to 128.
        decode_workers: Decoding threads; `None` (the default) for one per core.
        jpeg_draft: Decode large JPEGs at reduced scale (`PIL.Image.draft`)
            when that still covers `target_size`: about 3x faster on
            2-megapixel photos, but pixels differ from stock Keras's.
            Defaults to `False`.
        cache_dir: Local folder caching fetched files, so later epochs make
            no requests for them; `None` (the default) for no cache. Files
            go in its `remote_keras_cache/` subfolder (nothing else in the
            folder is touched), each with a checksum: a damaged one is read
            again from storage. A folder that cannot be written warns once
            and is only read. Safe to share between processes; assumes
            objects do not change.
        cache_max_bytes: Size limit of the cache's files; least recently
            used files are evicted. Defaults to 10 GiB.
        retries: How transient failures (resets, timeouts, 5xx, 429) are
            retried: a `RetryPolicy`, or a number of attempts per file;
            `None` (the default) for `RetryPolicy()`.
        verify_checksums: Check every body read against the checksum the
            store sent with it, where there is one (`True`, the default): an
            S3 ETag (MD5) or `x-amz-checksum-*` header, GCS's `x-goog-hash`,
            Azure's or HTTP's `Content-MD5`, lakeFS's ETag (its checksum of
            the object) or, presigned, the store's headers (see
            `remote_keras.storage.integrity` for what each loader can check).
            A mismatch is retried like a failed read, then raises
            `ChecksumMismatchError` (or skips the sample with
            `on_error="skip"`). With `loader="obstore"`, S3 objects encrypted
            with SSE-KMS or SSE-C, whose ETag is not their MD5, need `False`;
            `iterator.stats` counts `verified` and `unverified` reads.
        on_error: `"raise"` (default) raises for an unreadable sample;
            `"skip"` drops it from its batch, warns once per epoch and
            records it in `iterator.skipped`.
        num_shards: Number of workers sharing the data; each reads only its
            own shard (see `remote_keras.pipeline.sharding`). `None` (the default):
            detected from `tf.distribute`, `TF_CONFIG` or
            `keras.distribution` unless `shard_index` is given; `1` turns
            sharding off.
        shard_index: This worker's shard, `0 <= shard_index < num_shards`.
        shard_remainder: `"pad"` (default) repeats a few samples so that
            every shard has `ceil(n / num_shards)` samples per epoch;
            `"drop"` leaves out `n % num_shards` samples per epoch instead.
        progress: Show a progress bar (`tqdm`) when listing or checking files
            takes more than 2 seconds. Defaults to `True`.
        listing_cache_s: Seconds a listing of a mutable store (S3, GCS, Azure,
            ...) cached on disk is used instead of listing again; `None` (the
            default) never caches them (objects can change). lakeFS listings at
            a commit are cached regardless (a commit never changes).
        listing_cache_dir: Folder of the listing cache. `None` (the default):
            `listings/` in `cache_dir` when one is given, else
            `$XDG_CACHE_HOME/remote_keras/listings` (`~/.cache/remote_keras/listings`).
            `False` turns the disk listing cache off, for lakeFS too.
        pre_sign: Whether `lakefs://` images are read from presigned URLs of
            the lakeFS server's object store (one GET each, not through the
            lakeFS server): `None` (the default) when the server supports
            them, `True` always (an error where it does not), `False` never.
            A keyword of its own, never inside `storage_options`. Applies to
            the named loaders (`"auto"`, `"fsspec"`, `"obstore"`).
    """

    loader: Loader | str = "auto"
    storage_options: Mapping[str, Any] | None = None
    workers: int = 4
    use_multiprocessing: bool = False
    max_queue_size: int = 10
    prefetch_batches: int = 4
    max_in_flight: int = 128
    decode_workers: int | None = None
    jpeg_draft: bool = False
    cache_dir: str | os.PathLike[str] | None = None
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES
    retries: RetryPolicy | int | None = None
    verify_checksums: bool = True
    on_error: OnError = "raise"
    num_shards: int | None = None
    shard_index: int | None = None
    shard_remainder: ShardRemainder = "pad"
    progress: bool = True
    listing_cache_s: float | None = None
    listing_cache_dir: str | os.PathLike[str] | Literal[False] | None = None
    pre_sign: bool | None = None

    def __post_init__(self) -> None:
        _check(self)

    def __repr__(self) -> str:  # storage options hold secrets: never shown
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if f.name != "storage_options" and getattr(self, f.name) != f.default
        )
        return f"LoaderOptions({shown})"

    @property
    def retry_policy(self) -> RetryPolicy:
        """`retries` as a `RetryPolicy`."""
        return as_policy(self.retries)

    def merged(self, overrides: Mapping[str, Any]) -> LoaderOptions:
        """Returns a copy with `overrides` (option names only) applied.

        Raises:
            TypeError: an override is not an option (Keras-style message).
        """
        unknown = sorted(set(overrides) - set(NAMES))
        if unknown:
            raise TypeError(f"Unknown remote_keras option(s): {unknown}. Known: {sorted(NAMES)}")
        return dataclasses.replace(self, **overrides) if overrides else self


class LoaderOverrides(TypedDict, total=False):
    """The `LoaderOptions` fields as keyword arguments, each optional (see `LoaderOptions`)."""

    loader: Loader | str
    storage_options: Mapping[str, Any] | None
    workers: int
    use_multiprocessing: bool
    max_queue_size: int
    prefetch_batches: int
    max_in_flight: int
    decode_workers: int | None
    jpeg_draft: bool
    cache_dir: str | os.PathLike[str] | None
    cache_max_bytes: int
    retries: RetryPolicy | int | None
    verify_checksums: bool
    on_error: OnError
    num_shards: int | None
    shard_index: int | None
    shard_remainder: ShardRemainder
    progress: bool
    listing_cache_s: float | None
    listing_cache_dir: str | os.PathLike[str] | Literal[False] | None
    pre_sign: bool | None


NAMES = tuple(field.name for field in dataclasses.fields(LoaderOptions))

ON_ERROR = ("raise", "skip")
SHARD_REMAINDERS = ("pad", "drop")
# Integer options and the least value each accepts.
_AT_LEAST = {
    "workers": 1,
    "max_queue_size": 1,
    "prefetch_batches": 0,
    "max_in_flight": 1,
    "decode_workers": 1,
    "cache_max_bytes": 1,
    "num_shards": 1,
    "shard_index": 0,
}


def split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Splits keyword arguments into `(options, the rest)` by option name."""
    ours = {k: v for k, v in kwargs.items() if k in NAMES}
    return ours, {k: v for k, v in kwargs.items() if k not in NAMES}


def keras_arguments(given: dict[str, Any], *kept_back: str) -> dict[str, Any]:
    """A front's Keras arguments, from `locals()` taken first thing in its `__init__`/`flow_from_*`.

    The fronts spell out Keras's signatures (for users, IDEs and Keras's
    defaults); the values pass on unchanged, so they are gathered here once
    rather than listed a second time.

    Args:
        given: `locals()` at the top of the function: only its parameters.
        kept_back: Parameters passed on separately (positional ones).

    Returns:
        The parameters but `self`, `options`, the `**overrides` and `kept_back`.
    """
    left_out = {"self", "__class__", "options", "overrides", *kept_back}
    return {name: value for name, value in given.items() if name not in left_out}


def _check(options: LoaderOptions) -> None:
    """Raises for an invalid option, with a Keras-style message naming it.

    Raises:
        TypeError: a value of the wrong type (`loader`, `storage_options`,
            `retries`, `verify_checksums`, `cache_dir`), or `pre_sign` inside
            `storage_options`.
        ValueError: a value out of range (`on_error`, `shard_remainder`,
            `pre_sign`, the integer options).
    """
    loader = options.loader
    if not callable(loader) and not (isinstance(loader, str) and loader in LOADER_NAMES):
        raise TypeError(
            "`loader` must be a callable taking a path and returning bytes, a file-like "
            f"object, a PIL image or a numpy array, or one of {sorted(LOADER_NAMES)}. "
            f"Received: loader={loader!r}"
        )
    if options.storage_options is not None and not isinstance(options.storage_options, Mapping):
        raise TypeError(
            "`storage_options` must be a dict of fsspec options (credentials, endpoint, ...). "
            f"Received: storage_options of type {type(options.storage_options).__name__}"
        )
    refuse_in_storage_options(options.storage_options)
    presign_mode(options.pre_sign)
    if options.on_error not in ON_ERROR:
        raise ValueError(f'`on_error` must be "raise" or "skip". Received: {options.on_error!r}')
    if options.shard_remainder not in SHARD_REMAINDERS:
        raise ValueError(
            f'`shard_remainder` must be "pad" or "drop". Received: {options.shard_remainder!r}'
        )
    as_policy(options.retries)
    if not isinstance(options.verify_checksums, bool):
        raise TypeError(
            f"`verify_checksums` must be True or False. Received: {options.verify_checksums!r}"
        )
    cache_dir = options.cache_dir
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"`cache_dir` must be a local folder path or None. Received: {cache_dir!r}")
    seconds = options.listing_cache_s
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or seconds < 0):  # fmt: skip
        raise ValueError(
            f"`listing_cache_s` must be a number of seconds >= 0 or None. Received: {seconds!r}"
        )
    folder = options.listing_cache_dir
    if folder is not None and folder is not False and not isinstance(folder, (str, os.PathLike)):
        raise TypeError(
            f"`listing_cache_dir` must be a folder path, False or None. Received: {folder!r}"
        )
    for name, least in _AT_LEAST.items():
        value = getattr(options, name)
        if value is None and name in ("decode_workers", "num_shards", "shard_index"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"`{name}` must be an integer >= {least}. Received: {name}={value!r}")
