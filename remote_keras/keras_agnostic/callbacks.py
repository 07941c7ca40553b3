"""Keras callbacks: `InputStallCallback` (time waited for input), `DataVersionCallback`."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from remote_keras.pipeline.stats import LoaderStats
from remote_keras.storage import data_versions


@dataclasses.dataclass(frozen=True)
class EpochInputReport:
    """What one epoch's training waited for, and what the loader did meanwhile.

    Attributes:
        epoch: Epoch number, from 0.
        steps: Training steps in the epoch.
        train_s: Seconds from the epoch's start to its last training step's
            end (validation excluded).
        input_wait_s: Seconds training had asked for its next batch and the
            batch was not ready yet; `None` when not measurable (batches built
            in worker processes, `use_multiprocessing=True`).
        wait_fraction: `input_wait_s / train_s`: above roughly 0.1 the input
            pipeline is what limits training.
        loader: The iterator's `LoaderStats` for this epoch alone (a
            difference of two snapshots; `elapsed_s` and `images_per_s` are
            over `train_s`). Each epoch counts from the end of the one before,
            so the reports of a `fit` add up to all it read. The first epoch
            of a `fit` counts from the end of the iterator's previous epoch
            (or its start): the batches Keras read before that epoch began
            are its own. On TensorFlow these are batches 0 and 1, read to
            infer the tensor spec and handed out again (with those the
            look-ahead read meanwhile); on JAX and PyTorch, the batch Keras
            builds the model from, in a pass it abandons: its files are not
            fetched again (`carried`), but decoded again, so `images` exceeds
            the epoch's samples by one batch there (`requests` does not).
    """

    epoch: int
    steps: int
    train_s: float
    input_wait_s: float | None
    wait_fraction: float | None
    loader: LoaderStats

    def __str__(self) -> str:
        loader = self.loader
        if self.input_wait_s is None:
            waited = "input wait not measured (batches built in worker processes)"
        else:
            waited = (
                f"waited {self.input_wait_s:.2f} s for input in {self.train_s:.2f} s of "
                f"training ({self.wait_fraction:.0%})"
            )
        return (
            f"Epoch {self.epoch + 1}: {waited}; loader: {loader.images} images, "
            f"{loader.load_images_per_s:.1f} images/s while loading ({loader.load_s:.2f} s), "
            f"{loader.bytes / 2**20:.1f} MiB, "
            f"{loader.requests} requests, {loader.retries} retries, "
            f"{loader.cache_hits} cache hits; thread-seconds fetching {loader.fetch_s:.2f}, "
            f"decoding {loader.decode_s:.2f}"
        )


class InputStallCore:
    """What both fronts' `InputStallCallback` do (the Keras base class aside)."""

    def __init__(
        self, iterator: Any, verbose: int = 1, print_fn: Callable[[str], None] | None = None
    ) -> None:
        super().__init__()
        self.iterator = iterator
        iterator.handoffs.enabled = True
        self.verbose = verbose
        self.print_fn = print_fn or print
        self.reports: list[EpochInputReport] = []
        self._epoch_start = 0.0
        self._step_ends: list[float] = []
        self._stats_at_start = LoaderStats()
        self._stats_at_end: LoaderStats | None = None  # the last epoch's, in this `fit`

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._stats_at_end = None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._step_ends = []
        # From the end of the epoch before; in a fit's first, from the iterator's epoch start:
        # what Keras read before this callback hears of the epoch is the epoch's.
        self._stats_at_start = self._stats_at_end or self.iterator.handoffs.epoch_start
        self._epoch_start = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._step_ends.append(time.perf_counter())

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        report = self._report(epoch)
        self.reports.append(report)
        if logs is not None and report.input_wait_s is not None:
            logs["input_wait_s"] = report.input_wait_s
            logs["input_wait_fraction"] = report.wait_fraction
        if self.verbose:
            self.print_fn(str(report))

    def _report(self, epoch: int) -> EpochInputReport:
        steps = len(self._step_ends)
        self._stats_at_end = now = self.iterator.stats
        train_s = (self._step_ends[-1] if steps else time.perf_counter()) - self._epoch_start
        handoffs = self.iterator.handoffs.since(self._epoch_start)[:steps]
        wait: float | None = None
        if handoffs or not steps:
            wait, available = 0.0, 0.0
            asks = [self._epoch_start] + self._step_ends[:-1]
            for asked, (_, handed_out) in zip(asks, handoffs):
                available = max(available, handed_out)
                wait += max(0.0, available - asked)
        return EpochInputReport(
            epoch=epoch,
            steps=steps,
            train_s=train_s,
            input_wait_s=wait,
            wait_fraction=None if wait is None else wait / train_s if train_s else 0.0,
            loader=_difference(now, self._stats_at_start, train_s),
        )


def _difference(now: LoaderStats, before: LoaderStats, elapsed_s: float) -> LoaderStats:
    counts = {
        field.name: getattr(now, field.name) - getattr(before, field.name)
        for field in dataclasses.fields(LoaderStats)
        if field.name not in ("elapsed_s", "images_per_s", "load_images_per_s", "loader")
    }
    images, load_s = counts["images"], counts["load_s"]
    return LoaderStats(
        **counts,
        loader=now.loader,
        elapsed_s=elapsed_s,
        images_per_s=images / elapsed_s if elapsed_s else 0.0,
        load_images_per_s=images / load_s if load_s else 0.0,
    )


class DataVersionCore:
    """What both fronts' `DataVersionCallback` do (the Keras base class aside)."""

    def __init__(
        self,
        iterators: Any,
        filepath: str | os.PathLike,
        storage_options: Mapping[str, Any] | None = None,
        lakefs_refs: bool = True,
    ) -> None:
        super().__init__()
        self.iterators = data_versions.as_list(iterators)
        self.filepath = os.fspath(filepath)
        self.storage_options = storage_options
        self.lakefs_refs = lakefs_refs

    def on_train_begin(self, logs: dict | None = None) -> None:
        data_versions.write_data_version(
            self.iterators, self.filepath, self.storage_options, lakefs_refs=self.lakefs_refs
        )
