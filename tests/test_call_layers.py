"""At run time, calls go down the layers, and CONTRIBUTING's walk of one batch is what runs.

The import contracts (`make lint`) say which module may import which; these
tests trace what one batch actually calls, on every thread (`sys.setprofile`
and `threading.setprofile`, set before the iterator starts its threads), and
check that no storage function calls into the pipeline or a front, that no
pipeline function calls into a front except through the callables a front
hands it (named below), and that the walk CONTRIBUTING documents is a chain of
calls that were made, at most 12 of them.
"""

from __future__ import annotations

import collections
import re
import sys
import threading
from pathlib import Path

import pytest

import remote_keras as rk
from remote_keras.pipeline.reader import BatchReader

ROOT = Path(__file__).resolve().parent.parent
# The fronts (both Keras fronts and their shared core) over the pipeline over storage over
# the errors; the package root (lazy names) over all.
LAYERS = {
    "storage": 1, "pipeline": 2, "keras_agnostic": 3, "image_dataset": 3, "keras3": 3, "keras2": 3
}  # fmt: skip
# Front behaviour the pipeline runs through a typed callable it is handed, never by name.
HANDED_DOWN = frozenset({"remote_keras.keras_agnostic.pixels.keras_pixels.<locals>.augment"})


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "remote_keras" or parts[1:2] == ["testing"]:
        return None
    return 4 if len(parts) == 1 else LAYERS.get(parts[1], 0)


class CallTrace:
    """Every call of a package function while active: `(caller, callee, thread)` counted.

    `caller` is the calling frame's `module.qualname` (any module: a pool's
    worker is `concurrent.futures.thread._WorkItem.run`).
    """

    def __init__(self) -> None:
        self.calls: collections.Counter[tuple[str, str, str]] = collections.Counter()

    def _profile(self, frame, event, _arg):
        if event != "call" or _layer(frame.f_globals.get("__name__", "")) is None:
            return
        back = frame.f_back
        caller = "" if back is None else _name(back)
        self.calls[(caller, _name(frame), threading.current_thread().name)] += 1

    def __enter__(self) -> CallTrace:
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc_info: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    def upward(self) -> list[tuple[str, str]]:
        """Calls from a lower layer into a higher one, other than the handed-down callables."""
        found = []
        for caller, callee, _ in self.calls:
            below = _layer(caller.rsplit(".", 1)[0]) if caller else None
            module = callee.split(".<locals>")[0].rsplit(".", 1)[0]
            while module and _layer(module) is None:
                module = module.rsplit(".", 1)[0]
            if below is None or not module:
                continue
            if _layer(module) > below and callee not in HANDED_DOWN:  # type: ignore[operator]
                found.append((caller, callee))
        return sorted(set(found))


def _name(frame) -> str:
    return f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname}"


def _walk() -> list[tuple[str, int, str, bool]]:
    """CONTRIBUTING's walk: `(thread, indent, step, handed_off)` per line."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text.split("## One batch, walked", 1)[1].split("```", 2)[1]
    steps = []
    for line in block.strip("\n").splitlines():
        match = re.match(r"(\w+)(\s+)(=> )?(\S+)", line)
        assert match, line
        thread, gap, handed, step = match.groups()
        steps.append((thread, len(thread) + len(gap), step, handed is not None))
    return steps


def _on(thread: str, label: str) -> bool:
    return thread == "MainThread" if label == "main" else f"-{label}_" in thread


@pytest.fixture
def augmented(s3_images, s3_options):
    url, df = s3_images
    gen = rk.ImageDataGenerator(rescale=1 / 255, horizontal_flip=True, rotation_range=10)
    return gen, url, df, s3_options


@pytest.mark.parametrize("loader", ["fsspec", "obstore"])
def test_one_batch_calls_down_the_layers_only(augmented, loader):
    gen, url, df, options = augmented
    it = gen.flow_from_dataframe(
        df, url, target_size=(8, 8), batch_size=4, storage_options=options, loader=loader
    )
    with it, CallTrace() as trace:  # the pools start inside, so their threads are traced
        it[0], it[1]
    assert any("Fetcher._once" in callee for _, callee, _ in trace.calls)
    assert any("augment" in callee for _, callee, _ in trace.calls)  # the handed-down one ran
    assert trace.upward() == []


def test_the_batch_reader_calls_down_the_layers_only(s3_images, s3_options):
    url, df = s3_images
    paths = [f"{url}/{name}" for name in df["filename"]]
    with BatchReader(paths, batch_size=4, storage_options=s3_options) as reader:
        with CallTrace() as trace:
            batches = list(reader.epoch_batches(0))
    assert sum(len(b[0] if isinstance(b, tuple) else b) for b in batches) == len(paths)
    assert any("Fetcher._once" in callee for _, callee, _ in trace.calls)
    assert trace.upward() == []


def test_a_call_up_a_layer_is_found():
    trace = CallTrace()
    trace.calls[
        (
            "remote_keras.storage.retry.fetch_with_retries",
            "remote_keras.pipeline.fetching.Fetcher._once",
            "x",
        )
    ] = 1
    trace.calls[
        (
            "remote_keras.pipeline.batches._sample",
            "remote_keras.keras_agnostic.pixels.keras_pixels.<locals>.augment",
            "x",
        )
    ] = 1
    trace.calls[
        ("remote_keras.keras_agnostic.scheduling.f", "remote_keras.storage.retry.g", "x")
    ] = 1
    assert trace.upward() == [
        (
            "remote_keras.storage.retry.fetch_with_retries",
            "remote_keras.pipeline.fetching.Fetcher._once",
        )
    ]


def test_contributings_walk_of_one_batch_is_what_runs(augmented):
    gen, url, df, options = augmented
    it = gen.flow_from_dataframe(
        df, url, target_size=(8, 8), batch_size=4, storage_options=options, loader="fsspec"
    )
    with it, CallTrace() as trace:
        it[0]
    walk = _walk()
    assert 1 < len(walk) <= 12
    seen = {(caller, callee, thread) for caller, callee, thread in trace.calls}

    def called(step: str, label: str, by: str | None) -> bool:
        return any(
            callee.endswith("." + step)
            and _on(thread, label)
            and (caller.endswith("." + by) if by else _layer(caller.split(".")[0]) is None)
            for caller, callee, thread in seen
        )

    for n, (label, indent, step, handed) in enumerate(walk):
        parents = [w for w in walk[:n] if w[1] < indent]
        if not parents:
            assert called(step, label, None), step  # entered from the test
            continue
        parent_label, _, parent, _ = parents[-1]
        if handed:  # run by a pool's worker, on another thread than the step handing it over
            assert label != parent_label and called(step, label, None), step
        else:
            assert label == parent_label and called(step, label, parent), (parent, step)
