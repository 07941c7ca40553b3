"""Demo: train from a local S3 server, and compare with stock Keras reading local disk.

Run with `python -m remote_keras.demo` (or `make demo`). It starts a real S3
server (`rclone serve s3`) on 127.0.0.1 behind a proxy that adds latency to
every request, writes synthetic photo-like JPEGs to it, and compares one
epoch of stock Keras on local disk with remote_keras over `s3://` URLs, then
trains a small CNN for an epoch from S3.

The ratios depend on the machine: the S3 server and the proxy run on the
client's cores, and other processes may want them too. Beside the ratios the
demo prints what they depend on, measured in the same run: the CPU per image
of the client, the S3 server and the proxy (theirs with psutil, if
installed), the cores each reading used, the cores and the load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pandas as pd


def make_dataset(root: str, count: int, seed: int = 0) -> pd.DataFrame:
    """Writes `count` photo-like JPEGs under `root/<class>/` and returns their dataframe."""
    from remote_keras.testing.data import write_photo_dataset

    return write_photo_dataset(root, count, classes=("cats", "dogs"), digits=5, seed=seed)


@dataclasses.dataclass(frozen=True)
class Reading:
    """One epoch read, timed: its rate and the CPU each process spent per image.

    Attributes:
        images_per_s: Images over the wall-clock seconds of the epoch.
        client_ms: CPU milliseconds per image of this process (all threads).
        server_ms: Of the S3 server (`rclone`), or `None` without psutil.
        proxy_ms: Of the latency proxy's process, or `None` without psutil.
    """

    images_per_s: float
    client_ms: float
    server_ms: float | None
    proxy_ms: float | None

    @property
    def total_ms(self) -> float:
        """CPU per image of the client, the S3 server and the proxy together."""
        return self.client_ms + (self.server_ms or 0.0) + (self.proxy_ms or 0.0)

    @property
    def cores(self) -> float:
        """Cores the reading kept busy on average: CPU seconds over wall seconds."""
        return self.images_per_s * self.total_ms / 1000


def servers_cpu_s() -> tuple[float, float] | None:
    """CPU seconds so far of this process's S3 server and proxy children; `None` without psutil."""
    try:
        import psutil
    except ImportError:
        return None
    server = proxy = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            name, command, times = child.name(), child.cmdline(), child.cpu_times()
        except psutil.Error:  # exited meanwhile
            continue
        if "rclone" in name:
            server += times.user + times.system
        elif "remote_keras.testing.proxy" in command:
            proxy += times.user + times.system
    return server, proxy


def read_epoch(iterator: Any) -> Reading:
    """Reads one full epoch; returns its rate and the CPU per image of each process."""
    servers_before, cpu, start = servers_cpu_s(), time.process_time(), time.perf_counter()
    for i in range(len(iterator)):
        iterator[i]
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    servers_after, n = servers_cpu_s(), iterator.n
    server = proxy = None
    if servers_before is not None and servers_after is not None:
        server, proxy = (1000 * (b - a) / n for a, b in zip(servers_before, servers_after))
    return Reading(n / seconds, 1000 * cpu / n, server, proxy)


def load_average() -> float | None:
    """The 1-minute load average (runnable processes), where the system reports one."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows
        return None


def core_count() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def explain(
    stock: Reading,
    readings: dict[str, Reading],
    cores: int,
    load_before: float | None,
    load_after: float | None,
) -> list[str]:
    """The lines on what the ratios depend on, from what this run measured.

    A ratio to stock is `(cores used / stock's cores used) x (stock's CPU per
    image / CPU per image here)`, exactly: the second factor is the machine's
    cost per image, the first how many cores each reading got.

    Args:
        stock: Stock Keras's epoch from local disk.
        readings: remote_keras's epochs from `s3://`, by name; the first is the default.
        cores: The machine's cores.
        load_before: The 1-minute load average before the demo began.
        load_after: The same after the epochs.

    Returns:
        Lines to print.
    """
    loads = "1-min load average not reported by this system"
    if load_before is not None and load_after is not None:
        loads = (
            f"1-min load average {load_before:.2f} before the demo, {load_after:.2f} after "
            "these epochs (which count in it)"
        )
    measured = stock.server_ms is not None
    costs = [f"stock Keras {stock.client_ms:.2f} ms"]
    for name, r in readings.items():
        parts = f"{r.client_ms:.2f} ms"
        if measured:
            parts += (
                f" + S3 server {r.server_ms:.2f} + proxy {r.proxy_ms:.2f} = {r.total_ms:.2f} ms"
            )
        costs.append(f"{name} {parts}")
    used = ", ".join(
        f"{name} {r.cores:.2f}" for name, r in {"stock Keras": stock, **readings}.items()
    )
    lines = [
        f"What the ratios depend on (this run, a first epoch each): {cores} cores; {loads}.",
        "  CPU per image: " + "; ".join(costs) + ("" if measured else " (S3 server and proxy "
                                                    "not measured: install psutil)"),
        f"  cores used while reading: {used}",
    ]  # fmt: skip
    if not measured:
        return lines
    name, default = next(iter(readings.items()))
    cost = stock.total_ms / default.total_ms
    ratio = default.images_per_s / stock.images_per_s
    lines.append(
        f"  So the {name} ratio is (cores used / stock's) x (stock's CPU / its CPU per image) = "
        f"{default.cores:.2f} / {stock.cores:.2f} x {stock.total_ms:.2f} / "
        f"{default.total_ms:.2f} = {ratio:.2f}x."
    )
    if default.cores < 0.8 * cores and load_before is not None and load_before > cores / 2:
        short = (
            f"the load average of {load_before:.1f} (other processes want the cores too) left "
            f"it {default.cores:.2f}"
        )
    else:
        short = f"it used {default.cores:.2f}"
    lines.append(
        f"  The S3 server and proxy share the client's {cores} cores: with all {cores} the "
        f"{name} would reach at most {cores} / {stock.cores:.2f} x {cost:.2f} = "
        f"{cores / stock.cores * cost:.2f}x here; {short}. With the store on another machine "
        f"only the client's {default.client_ms:.2f} ms per image would count (at most "
        f"{cores / stock.cores * stock.total_ms / default.client_ms:.2f}x)."
    )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512, help="dataset size (default 512)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added per S3 request")
    parser.add_argument("--size", type=int, default=224, help="target size (default 224)")
    args = parser.parse_args(argv)
    load_before = load_average()  # before the demo's own work

    from remote_keras import _quiet

    with _quiet.tensorflow_start():  # TensorFlow's start-up log kept out of the demo's output
        import keras

    from remote_keras import ImageDataGenerator, errors
    from remote_keras.keras3.keras_src import legacy_image
    from remote_keras.testing import ProxyProcess, S3Server

    try:
        import s3fs
    except ImportError as exc:
        raise errors.missing_backend("s3://demo/", exc) from exc

    target = (args.size, args.size)
    with tempfile.TemporaryDirectory() as local, S3Server(buckets=("demo",)) as s3:
        print(f"Writing {args.images} synthetic JPEGs (500x375) ...", flush=True)
        df = make_dataset(local, args.images)
        s3fs.S3FileSystem(**s3.storage_options).put(local + "/", "demo/train/", recursive=True)

        with ProxyProcess(s3.port, delay_s=args.latency_ms / 1000) as proxy:
            options = s3.storage_options
            options["client_kwargs"]["endpoint_url"] = proxy.endpoint_url
            remote_df = df.assign(filename="s3://demo/train/" + df["filename"])

            stock = legacy_image.ImageDataGenerator(rescale=1 / 255).flow_from_dataframe(
                df, local, target_size=target, shuffle=False
            )
            stock_reading = read_epoch(stock)
            stock_rate = stock_reading.images_per_s
            print(f"\nOne epoch of {args.images} images, batch 32, {target[0]}x{target[1]}:")
            print(f"  stock Keras, local disk                      {stock_rate:8.0f} images/s")
            readings = {}
            for loader in ("auto", "fsspec"):
                gen = ImageDataGenerator(rescale=1 / 255, storage_options=options, loader=loader)
                with gen.flow_from_dataframe(remote_df, target_size=target, shuffle=False) as it:
                    proxy.reset()
                    reading = read_epoch(it)
                    counts = proxy.reset()
                name = "default" if loader == "auto" else 'loader="fsspec"'
                readings[name] = reading
                rate = reading.images_per_s
                print(
                    f"  remote_keras {name:<15}, s3:// +{args.latency_ms:.0f} ms {rate:8.0f} "
                    f"images/s  ({rate / stock_rate:.2f}x stock; {it.loader_choice})"
                )
            per_image = ", ".join(f"{counts[k] / len(df):.2f} {k}" for k in ("GET", "HEAD", "LIST"))
            print(f"  requests per image: {per_image}")
            print()
            lines = explain(stock_reading, readings, core_count(), load_before, load_average())
            print("\n".join(lines), flush=True)

            model = keras.Sequential(
                [
                    keras.Input(target + (3,)),
                    keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                    keras.layers.MaxPooling2D(4),
                    keras.layers.Conv2D(16, 3, activation="relu"),
                    keras.layers.GlobalAveragePooling2D(),
                    keras.layers.Dense(2, activation="softmax"),
                ]
            )
            model.compile("adam", "categorical_crossentropy", metrics=["accuracy"])
            gen = ImageDataGenerator(rescale=1 / 255, storage_options=options)  # the default
            train = gen.flow_from_dataframe(remote_df, target_size=target, seed=0)
            with train:
                start = time.perf_counter()
                history = model.fit(train, epochs=1, verbose=2)
                seconds = time.perf_counter() - start
            print(
                f"\nmodel.fit, 1 epoch from s3:// (the default loader): {seconds:.1f} s "
                f"({train.n / seconds:.0f} images/s), "
                f"loss {history.history['loss'][-1]:.3f}"
            )


if __name__ == "__main__":
    main()
