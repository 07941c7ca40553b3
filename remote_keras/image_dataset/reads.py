"""The fetching side of `image_dataset_from_directory`'s `tf.data` pipeline (`tf_graph`).

Per pass over the dataset (an epoch):

1. `range(n).shuffle(buffer, seed)` gives the epoch's order of samples, the
   same op Keras's function shuffles with, so the same seed and the same number
   of passes give the same order (`reshuffle_each_iteration`); the whole order
   is taken as one tensor.
2. A Python generator (`EpochReader.epoch`) fetches the files in that order in
   chunks, `prefetch_batches` chunks ahead of the consumer, each chunk's files
   concurrently through the package's `Fetcher` (retries, disk cache,
   checksums). A failed read is remembered and handed on as empty bytes
   (`on_error="skip"`: a gap that later samples fill), or, with `"raise"`,
   as a placeholder that decodes, so that its batch is accounted for (and
   raises) as soon as its chunk arrives, however many files fail after it.
3. TensorFlow decodes and resizes with Keras's ops (`tf_graph.decode_resize`) in a
   parallel map; samples whose decode fails are dropped (`ignore_errors`).
4. Keras's JAX and PyTorch trainers build an unbuilt model from the first
   batch of a pass they then abandon, after TensorFlow's prefetch has pulled
   several chunks (a small dataset's whole epoch). The bytes a pass fetched
   in its first `_CARRIED_CHUNKS` look-aheads are kept (`pipeline.carried`);
   if its consumer took at most `_ABANDONED_AT` batches by the time the next
   pass begins (counted after the last prefetch, `consumed`), the next pass
   takes them instead of a second GET (its order differs, its files do not),
   and drops what it does not take; otherwise they are dropped then.
5. After batching, `EpochReader.observe` sees which positions of the order
   arrived: a gap or a placeholder is a sample that failed, raised (naming its URL) with
   `on_error="raise"`, recorded in `dataset.skipped` with `"skip"`. A
   sentinel sample after the last one closes the epoch's account.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from remote_keras import errors
from remote_keras.keras_lines import dataset_passes
from remote_keras.pipeline import interrupts
from remote_keras.pipeline.engine import ReadEngine
from remote_keras.pipeline.executors import DaemonExecutor
from remote_keras.pipeline.skips import SkipLog

if TYPE_CHECKING:
    pass

# A 1x1 grayscale PNG: the sentinel after an epoch's last sample (decodes to any channels).
# It must decode: `ignore_errors` would drop it, and the failures after the last sample that
# arrived would go unaccounted (tests/test_image_dataset.py checks a failure in last place).
_SENTINEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010800000000"
    "3a7e9b550000000a4944415408d76360000000020001e221bc330000000049454e44ae426082"
)
SKIP_FATE = (
    "are left out of the stream (later samples fill the batch) and listed in `dataset.skipped`"
)
_KEPT_EPOCHS = 8  # epochs whose account is kept (passes abandoned half-way are dropped)
# Look-aheads (`prefetch_batches` chunks each) of a pass whose bytes are kept for the next
# pass, should this one be abandoned: TensorFlow's prefetch pulls chunks past the look-ahead
# before Keras's JAX and PyTorch trainers abandon the pass they build the model from.
_CARRIED_CHUNKS = 2
# Batches a pass may hand to its consumer and still be one Keras abandons (to build the model).
_ABANDONED_AT = 2


class EpochReader:
    """Fetches one subset's files per epoch and keeps the account of what arrived.

    Args:
        files: The dataset's `ReadEngine` (shared by its subsets).
        urls: The URLs (pinned) read, one per sample.
        shown: The paths named in errors and `skipped` (as the user named them).
        chunk: Samples fetched together.
    """

    def __init__(self, files: ReadEngine, urls: list[str], shown: list[str], chunk: int) -> None:
        self.files, self.urls, self.shown, self.chunk = files, urls, shown, chunk
        self._tokens = itertools.count(1)
        self._epochs: dict[int, _Account] = {}
        self._lock = threading.Lock()
        self.passes = dataset_passes.Passes()
        self.skips = SkipLog()  # this dataset's own (`subset="both"` makes two readers)
        self._consumed = 0  # batches the consumer took from the pass in progress
        # TensorFlow's reason a body does not decode (set by `build`), for the error.
        self.explain: Callable[[bytes], str | None] | None = None

    def epoch(self, order: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
        """Yields `(token, positions, indices, bytes)` chunks of one epoch, then the sentinel."""
        token = next(self._tokens)
        self.passes.read()
        account = _Account(order)
        with self._lock:
            self._epochs[token] = account
            for old in sorted(self._epochs)[:-_KEPT_EPOCHS]:
                del self._epochs[old]
        opts = self.files.options
        depth = max(1, opts.prefetch_batches)
        # Daemon threads: a request that stalls never holds up the exit after Ctrl-C.
        chunks = DaemonExecutor(depth, "remote_keras-dataset-chunk")
        requests = DaemonExecutor(opts.max_in_flight, "remote_keras-dataset-fetch")
        stop = threading.Event()  # ends the retries of an epoch abandoned
        pending: deque[Any] = deque()
        starts = iter(range(0, len(order), self.chunk))
        since = interrupts.count()
        carried = self.files.fetcher.carried
        with self._lock:  # the last pass is over for its consumer: was it abandoned at once?
            abandoned, self._consumed = 0 < self._consumed <= _ABANDONED_AT, 0
        carried.end_pass(cut_short_at_one=abandoned)
        carried.record()  # kept for the next pass if Keras abandons this one (module docstring)
        submitted = 0
        try:
            while True:
                for start in itertools.islice(starts, depth - len(pending)):
                    paths = [self.urls[i] for i in order[start : start + self.chunk]]
                    pending.append(
                        (start, chunks.submit(self.files.fetcher.fetch, paths, requests, stop))
                    )
                    submitted += 1
                    if submitted > _CARRIED_CHUNKS * depth:
                        carried.stop_recording()
                if not pending:
                    break
                start, future = pending.popleft()
                try:
                    results = interrupts.wait(future, since)
                except interrupts.Interrupted:
                    return  # the main thread raises its KeyboardInterrupt once TensorFlow returns
                yield self._chunk(token, account, start, results)
            end = len(order)
            yield (
                np.array([token]),
                np.array([end]),
                np.array([-1]),
                np.array([_SENTINEL], dtype=object),
            )
        finally:
            stop.set()
            chunks.shutdown(wait=False, cancel_futures=True)
            requests.shutdown(wait=False, cancel_futures=True)
            self.files.rest()

    def _chunk(
        self, token: int, account: _Account, start: int, results: list[Any]
    ) -> tuple[np.ndarray, ...]:
        data = np.empty(len(results), dtype=object)
        positions = np.arange(start, start + len(results))
        indices = account.order[positions].copy()
        raising = self.files.options.on_error == "raise"
        for j, result in enumerate(results):
            body = body_of(self.urls[account.order[start + j]], result)
            if not isinstance(body, BaseException):
                account.bodies[start + j] = body  # until accounted: a decode failure's reason
            else:
                account.failures[start + j] = body
                if raising:  # a placeholder that decodes: its batch is accounted for at once
                    body, indices[j] = _SENTINEL, -1
                else:  # fails to decode: a gap, which later samples fill
                    body = b""
            data[j] = body
        return np.full(len(results), token), positions, indices, data

    def consumed(self) -> np.bool_:
        """The consumer took a batch (called after the dataset's last prefetch)."""
        with self._lock:
            self._consumed += 1
        return np.bool_(True)

    def observe(self, tokens: np.ndarray, positions: np.ndarray) -> np.bool_:
        """Accounts for a batch's positions: gaps before them failed (raise, or skip).

        Raises:
            ImageLoadError: (or the read's own error) with `on_error="raise"`.
            ImageDecodeError: TensorFlow could not decode a file, with `on_error="raise"`.
        """
        if not len(tokens):
            return np.bool_(True)
        token = int(tokens[0])
        with self._lock:
            account = self._epochs.get(token)
        if account is None:
            return np.bool_(True)
        for position in positions.tolist():
            while account.next < position:
                self._failed(token, account, account.next)
                account.next += 1
            if position in account.failures:  # a placeholder (`on_error="raise"`)
                self._failed(token, account, position)
            account.bodies.pop(position, None)
            account.next = max(account.next, position + 1)
        if account.next > len(account.order):  # the sentinel arrived: the epoch is complete
            with self._lock:
                self._epochs.pop(token, None)
        return np.bool_(True)

    def _failed(self, token: int, account: _Account, position: int) -> None:
        index = int(account.order[position])
        shown = errors.redact(self.shown[index])
        cause = account.failures.pop(position, None)
        body = account.bodies.pop(position, None)
        if cause is None:
            why = self.explain(body) if self.explain is not None and body is not None else None
            hint = "corrupt, truncated, or not BMP, GIF, JPEG or PNG"
            if why:  # TensorFlow's reason first: the arguments may not suit a good file
                hint = f"{why.rstrip('.')}. It may be {hint}, or `color_mode` may not suit it"
            cause = errors.ImageDecodeError(
                shown, f"Cannot decode image {shown!r} with TensorFlow: {hint}"
            )
        if self.files.options.on_error == "raise":
            raise cause
        reason = f"{type(cause).__name__}: {cause}"
        self.skips.add(shown, reason, epoch=token, fate=SKIP_FATE)


class _Account:
    """One epoch's order, the reads that failed, and the next position expected."""

    def __init__(self, order: np.ndarray) -> None:
        self.order = order
        self.failures: dict[int, BaseException] = {}
        self.bodies: dict[int, bytes] = {}  # read, not accounted for yet
        self.next = 0


def body_of(url: str, result: Any) -> bytes | BaseException:
    """The encoded bytes a loader returned, or the failure (a read error, or not bytes)."""
    if isinstance(result, BaseException):
        return result
    if isinstance(result, (bytes, bytearray, memoryview)):
        return bytes(result)
    read = getattr(result, "read", None)
    if callable(read):
        with errors.reading(url):
            return bytes(read())
    return errors.ImageLoadError(
        url,
        f"The loader returned a {type(result).__name__} for {errors.redact(url)!r}: "
        "image_dataset_from_directory decodes with TensorFlow and needs the file's bytes "
        "(or a binary file-like object)",
    )


class Skipped(Sequence):
    """`(path, reason)` of each file one dataset dropped with `on_error="skip"` (live).

    Each file is listed once, in the order first skipped, with its latest
    reason, however many epochs skipped it.
    """

    def __init__(self, skips: SkipLog) -> None:
        self._skips = skips

    def _records(self) -> list[tuple[str, str]]:
        latest: dict[str, str] = {}
        for path, reason in self._skips.records():
            latest[path] = reason
        return list(latest.items())

    def __len__(self) -> int:
        return len(self._records())

    def __getitem__(self, index: Any) -> Any:
        return self._records()[index]

    def __repr__(self) -> str:
        return repr(self._records())
