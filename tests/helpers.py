"""Helpers shared by the test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fsspec.exceptions import FSTimeoutError
from PIL import Image

# Keras's PyTorch backend: not a dev dependency (pip's `torch` is a CUDA build of GBs). .ci/run
# installs the CPU build into .venv and `make test` sets RK_REQUIRE_TORCH there in CI, so the
# main suite fails rather than skips without it; the oldest-pair and nightly venvs lack it.
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None and not os.environ.get("RK_REQUIRE_TORCH"),
    reason="PyTorch is not installed (not a dev dependency: `pip install torch` to test "
    "Keras's torch backend; CI installs it)",
)
# Keras's JAX backend: a dev dependency; the oldest-pair venv (Keras 3.8) has no JAX.
needs_jax = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None,
    reason="JAX is not installed in this venv (the oldest pair's has none)",
)

# Every augmentation Keras's ImageDataGenerator offers, at values that change pixels.
AUGMENT = dict(
    rotation_range=25,
    width_shift_range=0.2,
    height_shift_range=0.1,
    shear_range=5,
    zoom_range=0.2,
    channel_shift_range=10.0,
    brightness_range=(0.7, 1.3),
    horizontal_flip=True,
    vertical_flip=True,
    rescale=1 / 255,
)


def assert_same_batch(stock, ours) -> None:
    """Asserts two batches (`x`, `(x, y)`, `(x, y, w)`, multi-output lists) are array-equal."""
    if isinstance(stock, tuple):
        assert isinstance(ours, tuple) and len(stock) == len(ours)
        for a, b in zip(stock, ours):
            assert_same_batch(a, b)
    elif isinstance(stock, list):
        assert len(stock) == len(ours)
        for a, b in zip(stock, ours):
            np.testing.assert_array_equal(a, b)
    else:
        assert stock.dtype == ours.dtype
        np.testing.assert_array_equal(stock, ours)


def png_bytes(pixels: np.ndarray) -> bytes:
    """Encodes a `uint8` array (height, width[, channels]) as PNG."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def noise_png(seed: int, size: int = 6) -> bytes:
    """A `size` x `size` RGB PNG of random pixels, the same for the same `seed`."""
    rng = np.random.default_rng(seed)
    return png_bytes(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))


def truncated_jpeg(seed: int, size: int = 6) -> bytes:
    """A `size` x `size` RGB JPEG of random pixels cut half-way through its scan.

    Pillow opens it (its header is whole) and fails only when it decodes the pixels:
    "image file is truncated".
    """
    buffer = io.BytesIO()
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buffer, "JPEG")
    data = buffer.getvalue()
    scan = data.index(b"\xff\xda")  # the start-of-scan marker
    return data[: (scan + len(data)) // 2]


def put_objects(fs, objects: Mapping[str, bytes], timeout_s: float = 30, attempts: int = 3) -> None:
    """Writes test objects one at a time through an fsspec filesystem, each bounded in time.

    Concurrent PUTs of odd keys to `rclone serve s3` have twice gone unanswered in CI, once
    hanging the whole run; one at a time, with a write that gets no answer in `timeout_s`
    sent again, test setup cannot hang.
    """
    for path, data in objects.items():
        for attempt in range(attempts):
            try:
                fs.pipe_file(path, data, timeout=timeout_s)
                break
            except FSTimeoutError:
                if attempt == attempts - 1:
                    raise


def put_folder(fs, local: str, prefix: str) -> None:
    """Copies the files under `local` to `prefix` with `put_objects` (bounded, one at a time)."""
    root = Path(local)
    put_objects(
        fs,
        {f"{prefix}/{p.relative_to(root).as_posix()}": p.read_bytes()
         for p in sorted(root.rglob("*")) if p.is_file()},
    )  # fmt: skip


def epoch(it, before_batch: Callable[[int], None] | None = None) -> list:
    """Every batch of `it`, in order; `before_batch(i)` runs before batch `i` is asked for."""
    batches = []
    for i in range(len(it)):
        if before_batch is not None:
            before_batch(i)
        batches.append(it[i])
    return batches


class SlowLoader:
    """Reads local files after `delay` seconds each, recording concurrency and what it read."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.active = 0
        self.peak = 0
        self.calls = 0
        self.paths: dict[str, int] = {}  # path -> reads
        self._changed = threading.Condition()

    def __call__(self, path: str) -> bytes:
        with self._changed:
            self.active += 1
            self.calls += 1
            self.paths[path] = self.paths.get(path, 0) + 1
            self.peak = max(self.peak, self.active)
            self._changed.notify_all()
        try:
            self.wait(path)
            with open(path, "rb") as f:
                return f.read()
        finally:
            with self._changed:
                self.active -= 1
                self._changed.notify_all()

    def wait(self, path: str) -> None:
        time.sleep(self.delay)

    def wait_for_calls(self, calls: int, timeout_s: float = 60) -> bool:
        """Whether `calls` reads have started (the timeout guards against a hang only)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.calls >= calls, timeout_s)

    def wait_for_active(self, active: int, timeout_s: float = 60) -> bool:
        """Whether `active` reads are in progress at once (the timeout guards against a hang)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.active >= active, timeout_s)


class GatedLoader(SlowLoader):
    """A `SlowLoader` whose reads all wait until `gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def wait(self, path: str) -> None:
        assert self.gate.wait(60), "the test never opened the gate"


def fit_record(iterator: Any, epochs: int, shuffle: bool = False) -> list[tuple[str, tuple]]:
    """What `model.fit` trained on, step by step: a digest of `x`, and the labels in `y`.

    The labels are the class of each one-hot row (`class_mode="categorical"`), else `y`'s
    values as integers. The model is tiny and runs eagerly, so that every step is seen.
    """
    import keras
    import numpy as np

    outputs = len(iterator.class_indices) if iterator.class_mode == "categorical" else 1

    class RecordingModel(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.flatten = keras.layers.Flatten()
            self.dense = keras.layers.Dense(outputs)
            self.seen: list[tuple[str, tuple]] = []

        def call(self, x: Any) -> Any:
            return self.dense(self.flatten(x))

        def train_step(self, data: Any) -> Any:
            x, y = np.asarray(data[0]), np.asarray(data[1])
            labels = y.argmax(axis=1) if y.ndim == 2 else y
            self.seen.append((hashlib.sha256(x.tobytes()).hexdigest(), tuple(map(int, labels))))
            return super().train_step(data)

    model = RecordingModel()
    model.compile("sgd", "mse", run_eagerly=True)
    model.fit(iterator, epochs=epochs, shuffle=shuffle, verbose=0)
    return model.seen


@contextlib.contextmanager
def lakefs_repo_with(local: str, folder: str) -> Iterator[tuple[Any, str, str, Any]]:
    """A lakeFS target whose new repository has `local`'s files committed under `folder` on main.

    Yields:
        `(target, repository name, commit id, lakefs-spec filesystem)`.
    """
    import lakefs
    from lakefs.client import Client
    from lakefs_spec import LakeFSFileSystem

    from remote_keras.testing.lakefs_server import lakefs_target

    with lakefs_target() as target:
        client = Client(**target.storage_options)
        name = f"rk-{uuid.uuid4().hex[:8]}"
        prefix = "local://" if target.is_stand_in else "s3://"
        lakefs.Repository(name, client=client).create(storage_namespace=prefix + name)
        fs = LakeFSFileSystem(**target.storage_options)
        under = f"lakefs://{name}/main/" + (folder.strip("/") + "/" if folder.strip("/") else "")
        for parent, _, files in os.walk(local):
            for file in files:
                path = os.path.join(parent, file)
                fs.put_file(path, under + os.path.relpath(path, local))
        commit = lakefs.Branch(name, "main", client=client).commit("images").get_commit().id
        yield target, name, commit, fs


def run_script(script: str, cwd: Any, **env: str) -> subprocess.CompletedProcess:
    """Runs `script` in a new Python process in `cwd`, this checkout importable, with `env` set."""
    root = str(Path(__file__).resolve().parents[1])
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=root, **env),
    )


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports on 127.0.0.1 (all bound at once, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
