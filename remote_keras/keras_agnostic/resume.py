"""Exact resume: an iterator's state, and checking that a state fits an iterator.

An iterator's batch `b` of epoch `e` is a pure function of `(seed, e, b)`, so
its state is small: the epoch, how many of its batches were consumed, and
what identifies the data (seed, shard, lakeFS commits, a fingerprint of the
file list). The order `fit(shuffle=True)` asks for batches in is replayed by
`remote_keras.keras_lines`; the callback that saves and restores states with
Keras's backups is `remote_keras.keras3.backup.BackupAndRestore`.
"""

from __future__ import annotations

import hashlib
from typing import Any

# Version of the dictionaries `state_dict()` returns.
STATE_FORMAT = 1


def fingerprint(iterator: Any) -> dict[str, Any]:
    """What identifies an iterator's samples: their count and a hash of names and labels.

    Args:
        iterator: A remote_keras iterator.

    Returns:
        `{"samples": n, "sha256": hex digest}`; the digest covers the file
        names in order, the class indices and the batch size.
    """
    digest = hashlib.sha256()
    for name in iterator._filenames:
        digest.update(name.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(repr(sorted(getattr(iterator, "class_indices", {}).items())).encode())
    digest.update(f"batch_size={iterator.batch_size}".encode())
    return {"samples": int(iterator.n), "sha256": digest.hexdigest()}


def check_compatible(iterator: Any, state: dict[str, Any]) -> None:
    """Raises `ValueError` naming what differs when `state` was saved by another dataset.

    Args:
        iterator: The iterator the state is being loaded into.
        state: A dictionary from `state_dict()`.
    """
    if state.get("format") != STATE_FORMAT:
        raise ValueError(
            f"Unknown iterator state format {state.get('format')!r} (this version reads "
            f"format {STATE_FORMAT})."
        )
    mine = {
        "seed": iterator.seed,
        "shuffle": bool(iterator.shuffle),
        "batch_size": int(iterator.batch_size),
        "shard": [iterator.shard.index, iterator.shard.count],
    }
    for key, value in mine.items():
        if state.get(key) != value:
            raise ValueError(
                f"The saved iterator state has {key}={state.get(key)!r} but this iterator "
                f"has {key}={value!r}: it would not continue the same data stream. Build "
                "the iterator with the arguments of the run that saved the state."
            )
    saved, now = state["fingerprint"], fingerprint(iterator)
    if saved != now:
        raise ValueError(
            f"The saved iterator state is for a dataset of {saved['samples']} samples "
            f"(file list sha256 {saved['sha256'][:12]}...), but this iterator reads "
            f"{now['samples']} samples (sha256 {now['sha256'][:12]}...) from "
            f"{iterator.directory!r}: the files, their order, the classes or the batch "
            "size changed. Resume from the data the run was started on."
        )


def same_run(iterator: Any, state: dict[str, Any]) -> bool:
    """Whether `iterator` may be the one of a run whose process saved `state` (any shard)."""
    return int(iterator.shard.count) == int(state["shard"][1]) or iterator.shard.count == 1


def own_shard(state: dict[str, Any], iterator: Any, mid_epoch: bool) -> dict[str, Any]:
    """`state`, saved by one process of a run, for the shard this `iterator` reads.

    Every process of a run is at the same position of the same stream, each in
    its own shard, so one process's record serves all. With another number of
    processes, a run continues at an epoch's start (the next epoch is split
    among the processes there are); in the middle of an epoch it cannot: the
    samples left belong to shards that no longer exist.

    Args:
        state: An iterator's `state_dict()`, from any process of the run.
        iterator: This process's iterator.
        mid_epoch: Whether `state` resumes in the middle of an epoch.

    Raises:
        ValueError: The process count differs and `state` is mid-epoch,
            naming both counts.
    """
    recorded, current = int(state["shard"][1]), int(iterator.shard.count)
    if recorded != current and mid_epoch:
        raise ValueError(
            f"The backup was taken in the middle of epoch {state['epoch']} by a run of "
            f"{recorded} process(es), each reading its shard of the data, but this run has "
            f"{current}: the samples that epoch has left belong to {recorded} shards. Restart "
            f"with {recorded} process(es) to finish it (a backup at an epoch's end, "
            '`save_freq="epoch"`, resumes with any number), or start afresh in another '
            "backup folder."
        )
    return {**state, "shard": [iterator.shard.index, current]}
