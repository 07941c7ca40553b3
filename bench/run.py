"""Benchmark: remote_keras against stock Keras, tf.data and a naive per-file loop.

Run `make bench` (or `python bench/run.py`). Everything runs on 127.0.0.1: a
real S3 server (`rclone serve s3`), one latency-adding, request-counting proxy
process per delay in front of it, and generated photo-like JPEGs (cached in
`bench/.data`). Each scenario gets one untimed warm-up, then `--repeats` timed
epochs with a fresh iterator; medians are reported, and ratios are taken
between scenarios of the same run (the machine is shared and noisy).

Outputs: a table on stdout, `bench/results/latest.json` and
`bench/results/latest.png`. `--smoke` runs a tiny version for CI.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import idfd_rows  # bench/, first on sys.path when this file runs as a script
import numpy as np
import pandas as pd
import psutil

HERE = Path(__file__).resolve().parent
TARGET = (224, 224)
BATCH = 32


# --------------------------------------------------------------------------- data


def make_images(root: Path, count: int, width: int, height: int, seed: int) -> pd.DataFrame:
    """Writes `count` photo-like JPEGs in two class folders (reused if already there)."""
    from remote_keras.testing.data import photo_dataset_frame, write_photo_dataset

    marker = root / f".complete-{count}"
    layout = {"classes": ("n01", "n02"), "digits": 6}
    if marker.exists():
        return photo_dataset_frame(count, **layout)
    df = write_photo_dataset(root, count, width=width, height=height, seed=seed, **layout)
    marker.touch()
    return df


# --------------------------------------------------------------------------- measuring


class PeakRSS:
    """Samples this process's resident memory every 10 ms while active."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        process = psutil.Process()
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, process.memory_info().rss)

    def __enter__(self) -> PeakRSS:
        self.start = self.peak = psutil.Process().memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def run_epochs(
    build: Callable[[], object],
    read_epoch: Callable[[object], list[float]],
    images: int,
    repeats: int,
    proxy=None,
    store_proxy=None,
) -> dict:
    """Times `repeats` epochs (after a warm-up), each on a freshly built iterator.

    Images/s and CPU cover reading the epoch; building the iterator (listing,
    validation, lakeFS pinning) is reported in `first_batch_s` with the
    first batch's wait. `store_proxy` counts the requests that reach the
    object store behind a presigning lakeFS (`store_requests_per_image`).
    """
    results = []
    for attempt in range(repeats + 1):
        with PeakRSS() as rss:
            for counting in (proxy, store_proxy):
                if counting is not None:
                    counting.reset()
            start = time.perf_counter()
            iterator = build()
            built = time.perf_counter() - start
            startup = proxy.reset() if proxy is not None else {}
            cpu, start = time.process_time(), time.perf_counter()
            waits = read_epoch(iterator)
            seconds = time.perf_counter() - start  # construction is in `first_batch_s`
            cpu = time.process_time() - cpu
            steady = proxy.reset() if proxy is not None else {}
            at_store = store_proxy.reset() if store_proxy is not None else None
            stats = dataclasses.asdict(iterator.stats) if hasattr(iterator, "stats") else None
            if hasattr(iterator, "close"):
                iterator.close()
        if attempt == 0:
            continue  # warm-up
        results.append(
            {
                "images_per_s": images / seconds,
                "cpu_ms_per_image": 1000 * cpu / images,
                "first_batch_s": built + waits[0],
                "wait_p50_ms": 1000 * float(np.percentile(waits, 50)),
                "wait_p99_ms": 1000 * float(np.percentile(waits, 99)),
                "peak_rss_mb": rss.peak / 2**20,
                "rss_growth_mb": (rss.peak - rss.start) / 2**20,
                "startup_requests": dict(startup),
                "requests_per_image": {k: v / images for k, v in steady.items()},
                "loader_stats": stats,
            }
        )
        if at_store is not None:
            results[-1]["store_requests_per_image"] = {k: v / images for k, v in at_store.items()}
    return summarize(results)


class _stand_in:
    """The lakeFS stand-in in its own process, on `root`; yields its storage options."""

    def __init__(self, root: str, env: dict, *flags: str) -> None:
        from remote_keras.testing import lakefs_server

        command = [sys.executable, lakefs_server.__file__, "--root", root, *flags]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)

    def __enter__(self) -> dict:
        assert self.process.stdout is not None
        return json.loads(self.process.stdout.readline())

    def __exit__(self, *exc_info: object) -> None:
        from remote_keras.testing.base import terminate

        terminate(self.process)  # killed if it lingers


def _loader_argument(loader: str) -> dict:
    """`{}` for "default" (no `loader=` argument, as a user who only changes the import)."""
    return {} if loader == "default" else {"loader": loader}


def summarize(results: list[dict]) -> dict:
    """Medians of the numeric fields over repeats; request counts from the last one."""
    summary = {"repeats": len(results), "images_per_s_all": [r["images_per_s"] for r in results]}
    for key in ("images_per_s", "cpu_ms_per_image", "first_batch_s", "wait_p50_ms",
                "wait_p99_ms", "peak_rss_mb", "rss_growth_mb"):  # fmt: skip
        values = [r[key] for r in results if r[key] is not None]
        summary[key] = statistics.median(values) if values else None
    summary["startup_requests"] = results[-1]["startup_requests"]
    summary["requests_per_image"] = results[-1]["requests_per_image"]
    if "store_requests_per_image" in results[-1]:
        summary["store_requests_per_image"] = results[-1]["store_requests_per_image"]
    if results[-1]["loader_stats"] is not None:
        summary["loader_stats"] = results[-1]["loader_stats"]  # `iterator.stats`, last repeat
    return summary


def timed_getitem(iterator) -> list[float]:
    """Reads every batch in order by index; returns the wait per batch (first includes setup)."""
    waits = []
    for i in range(len(iterator)):
        start = time.perf_counter()
        iterator[i]
        waits.append(time.perf_counter() - start)
    return waits


def timed_iteration(iterable) -> list[float]:
    waits = []
    iterator = iter(iterable)
    while True:
        start = time.perf_counter()
        try:
            next(iterator)
        except StopIteration:
            return waits
        waits.append(time.perf_counter() - start)


def _brief(stats: dict) -> str:
    return (
        f"{stats['images']} images, {stats['bytes'] / 2**20:.1f} MiB, {stats['requests']} "
        f"requests, {stats['retries']} retries, {stats['cache_hits']} cache hits, "
        f"fetch {stats['fetch_s']:.2f} s, decode {stats['decode_s']:.2f} s (thread-seconds), "
        f"caller waited {stats['wait_s']:.2f} s, {stats['images_per_s']:.0f} images/s"
    )


# --------------------------------------------------------------------------- scenarios


class Bench:
    """Holds the servers, data and results of one benchmark run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.results: dict[str, dict] = {}

    def record(self, name: str, group: str, result: dict, **extra) -> None:
        result.update(group=group, **extra)
        self.results[name] = result
        rate = result.get("images_per_s")
        print(f"  {name:<44} {rate:8.0f} images/s" if rate else f"  {name}", flush=True)
        if "input_report" in result:
            print(f"    InputStallCallback: {result['input_report']}", flush=True)
        elif result.get("loader_stats"):
            print(f"    iterator.stats: {_brief(result['loader_stats'])}", flush=True)

    def run(self) -> dict:
        import s3fs

        from remote_keras.testing import ProxyProcess, S3Server

        args = self.args
        data = Path(args.data)
        print(f"Generating data in {data} (cached) ...", flush=True)
        df = make_images(data / f"imagenet-{args.images}", args.images, 500, 375, seed=0)
        big = make_images(data / f"2mp-{args.big_images}", args.big_images, 1632, 1224, seed=1)
        local = str(data / f"imagenet-{args.images}")
        local_big = str(data / f"2mp-{args.big_images}")

        with S3Server(buckets=("bench",)) as s3:
            fs = s3fs.S3FileSystem(**s3.storage_options)
            fs.put(local + "/", "bench/imagenet/", recursive=True)
            fs.put(local_big + "/", "bench/2mp/", recursive=True)
            proxies = {d: ProxyProcess(s3.port, d / 1000).start() for d in args.delays}
            try:
                self._scenarios(s3, proxies, df, big, local, local_big)
            finally:
                for proxy in proxies.values():
                    proxy.stop()
        return self.results

    def _options(self, s3, proxy) -> dict:
        options = s3.storage_options
        options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=proxy.endpoint_url)
        return options

    def _scenarios(self, s3, proxies, df, big, local, local_big) -> None:
        import keras
        from keras.src.legacy.preprocessing import image as keras_image

        import remote_keras as rk

        args, n = self.args, len(df)
        urls = df.assign(filename="s3://bench/imagenet/" + df["filename"])
        stock_gen = keras_image.ImageDataGenerator(rescale=1 / 255)
        kw = dict(target_size=TARGET, batch_size=BATCH, shuffle=False)
        print("Scenarios (plain loop over every batch):", flush=True)
        if args.only_lakefs:
            self._lakefs_scenario(df, local, kw, s3, proxies)
            return

        def stock():
            return stock_gen.flow_from_dataframe(df, local, **kw)

        self.record("stock Keras, local disk", "local", run_epochs(
            stock, timed_getitem, n, args.repeats))  # fmt: skip
        if args.only_datasets:
            idfd_rows.scenarios(
                self, s3, proxies, local, n, TARGET, BATCH, run_epochs, timed_iteration
            )
            return

        def tfdata():
            ds = keras.utils.image_dataset_from_directory(
                local, image_size=TARGET, batch_size=BATCH, shuffle=False,
                interpolation="nearest", label_mode="categorical", verbose=False,
            )  # fmt: skip
            import tensorflow as tf

            return ds.map(lambda x, y: (x / 255, y)).prefetch(tf.data.AUTOTUNE)

        self.record("tf.data image_dataset_from_directory, local", "local", run_epochs(
            tfdata, timed_iteration, n, args.repeats))  # fmt: skip
        idfd_rows.scenarios(self, s3, proxies, local, n, TARGET, BATCH, run_epochs, timed_iteration)

        def ours_local():
            return rk.ImageDataGenerator(rescale=1 / 255).flow_from_dataframe(df, local, **kw)

        self.record("remote_keras, local disk", "local", run_epochs(
            ours_local, timed_getitem, n, args.repeats))  # fmt: skip

        naive_n = min(args.naive_images, n)
        delay = 20 if 20 in proxies else max(proxies)
        self.record(
            f"naive fs.open().read() loop, s3 +{delay} ms",
            "naive",
            run_epochs(
                lambda: self._naive(s3, proxies[delay], urls["filename"][:naive_n]),
                lambda loop: loop(),
                naive_n,
                max(1, args.repeats - 2),
                proxy=proxies[delay],
            ),
            delay_ms=delay,
        )

        # "default": no `loader=` argument, what a user who only changes the import gets;
        # "fsspec": the default before `loader="auto"`.
        for loader in ("fsspec", "default"):
            for delay, proxy in proxies.items():
                options = self._options(s3, proxy)

                def ours_s3(loader=loader, options=options):
                    gen = rk.ImageDataGenerator(
                        rescale=1 / 255, storage_options=options, **_loader_argument(loader)
                    )
                    return gen.flow_from_dataframe(urls, **kw)

                self.record(
                    f"remote_keras {loader}, s3 +{delay} ms",
                    "s3",
                    run_epochs(ours_s3, timed_getitem, n, args.repeats, proxy=proxy),
                    loader=loader,
                    delay_ms=delay,
                )

        if args.lakefs:
            self._lakefs_scenario(df, local, kw, s3, proxies)

        print("Scenarios in model.fit (tiny CNN, shuffle=True, epoch 2 timed):", flush=True)
        fit_delay = 20 if 20 in proxies else max(proxies)
        self.record("fit: stock Keras, local disk", "fit", self._fit(
            lambda: stock_gen.flow_from_dataframe(df, local, target_size=TARGET), n))  # fmt: skip
        ours_gen = rk.ImageDataGenerator(rescale=1 / 255)
        self.record("fit: remote_keras, local disk", "fit", self._fit(
            lambda: ours_gen.flow_from_dataframe(df, local, target_size=TARGET), n))  # fmt: skip
        for loader in ("fsspec", "default"):
            options = self._options(s3, proxies[fit_delay])
            gen = rk.ImageDataGenerator(
                rescale=1 / 255, storage_options=options, **_loader_argument(loader)
            )
            self.record(
                f"fit: remote_keras {loader}, s3 +{fit_delay} ms",
                "fit",
                self._fit(lambda gen=gen: gen.flow_from_dataframe(urls, target_size=TARGET), n),
                loader=loader,
                delay_ms=fit_delay,
            )

        print("Scenarios on 2-megapixel JPEGs:", flush=True)
        nb = len(big)
        big_urls = big.assign(filename="s3://bench/2mp/" + big["filename"])
        self.record("2MP: stock Keras, local disk", "2mp", run_epochs(
            lambda: stock_gen.flow_from_dataframe(big, local_big, **kw),
            timed_getitem, nb, args.repeats))  # fmt: skip
        for draft in (False, True):
            self.record(
                f"2MP: remote_keras, local disk{', jpeg_draft' if draft else ''}",
                "2mp",
                run_epochs(
                    lambda draft=draft: rk.ImageDataGenerator(
                        rescale=1 / 255, jpeg_draft=draft
                    ).flow_from_dataframe(big, local_big, **kw),
                    timed_getitem, nb, args.repeats,
                ),
            )  # fmt: skip
        options = self._options(s3, proxies[fit_delay])
        self.record(
            f"2MP: remote_keras default, s3 +{fit_delay} ms, jpeg_draft",
            "2mp",
            run_epochs(
                lambda: rk.ImageDataGenerator(
                    rescale=1 / 255, storage_options=options, jpeg_draft=True
                ).flow_from_dataframe(big_urls, **kw),
                timed_getitem, nb, args.repeats, proxy=proxies[fit_delay],
            ),
        )  # fmt: skip

        print("Start-up and memory on large dataframes:", flush=True)
        for rows in args.rows:
            self.results[f"startup: {rows} rows"] = self._probe(s3, proxies[fit_delay], rows, 4)
            print(f"  {rows} rows: {self.results[f'startup: {rows} rows']}", flush=True)
        rows = args.rows[-1]
        deep = self._probe(s3, proxies[fit_delay], rows, 16)
        self.results[f"startup: {rows} rows, prefetch_batches=16"] = deep
        print(f"  {rows} rows, prefetch 16: {deep}", flush=True)

    def _lakefs_scenario(self, df, local, kw, s3, s3_proxies) -> None:
        """lakeFS: the server path, the presigned path and the same files straight from S3.

        The stand-in runs in its own process behind a latency proxy; in presign mode its
        presigned URLs point at `rclone serve s3` (no auth) over its data folder, as a
        lakeFS on S3 hands out S3 URLs, behind a second proxy with the same delay, so
        requests are counted at each server separately.
        """
        import secrets
        import tempfile

        import lakefs
        from lakefs.client import Client
        from lakefs_spec import LakeFSFileSystem

        import remote_keras as rk
        from remote_keras.testing import ProxyProcess, S3Server
        from remote_keras.testing.base import free_port

        root = tempfile.mkdtemp(prefix="bench-lakefs-")
        env = dict(os.environ, REMOTE_KERAS_LAKEFS_SECRET_ACCESS_KEY=secrets.token_urlsafe(30))
        n, repeats = len(df), self.args.repeats
        with _stand_in(root, env) as options:
            client = Client(**options)
            lakefs.Repository("bench", client=client).create(storage_namespace="local://bench")
            fs = LakeFSFileSystem(**options)
            for name in df["filename"]:
                fs.put_file(os.path.join(local, name), f"lakefs://bench/main/imagenet/{name}")
            lakefs.Branch("bench", "main", client=client).commit("images")
        lakefs_urls = df.assign(filename="lakefs://bench/main/imagenet/" + df["filename"])
        s3_urls = df.assign(filename="s3://bench/imagenet/" + df["filename"])

        def iterator(options, urls, loader="fsspec"):
            def build():
                gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=options, loader=loader)
                return gen.flow_from_dataframe(urls, **kw)

            return build

        # The object store behind the presigning stand-in: rclone on its data folder, no auth.
        store_server = S3Server(root, auth=False).start()
        for delay in sorted({0, 20} & set(self.args.delays)):
            lakefs_port = free_port()
            with (
                ProxyProcess(lakefs_port, delay / 1000) as api,
                ProxyProcess(store_server.port, delay / 1000) as store,
            ):
                flags = ["--port", str(lakefs_port)]
                with _stand_in(root, env, *flags) as options:
                    via_proxy = dict(options, host=api.endpoint_url)
                    result = run_epochs(iterator(via_proxy, lakefs_urls), timed_getitem, n,
                                        repeats, proxy=api)  # fmt: skip
                    self.record(f"remote_keras, lakefs server path +{delay} ms", "lakefs",
                                result, delay_ms=delay, path="server")  # fmt: skip
                presign = ["--presign", "--presign-s3-url", store.endpoint_url]
                with _stand_in(root, env, *flags, *presign) as options:
                    via_proxy = dict(options, host=api.endpoint_url)
                    for loader in ("fsspec", "obstore"):  # obstore reads presigned URLs by HTTP
                        result = run_epochs(iterator(via_proxy, lakefs_urls, loader),
                                            timed_getitem, n, repeats, proxy=api,
                                            store_proxy=store)  # fmt: skip
                        self.record(f"remote_keras {loader}, lakefs presigned +{delay} ms",
                                    "lakefs", result, delay_ms=delay, path="presigned",
                                    loader=loader)  # fmt: skip
            if delay in s3_proxies:
                proxy = s3_proxies[delay]
                for loader in ("fsspec", "obstore"):
                    result = run_epochs(iterator(self._options(s3, proxy), s3_urls, loader),
                                        timed_getitem, n, repeats, proxy=proxy)  # fmt: skip
                    self.record(f"remote_keras {loader}, lakefs files from s3 +{delay} ms",
                                "lakefs", result, delay_ms=delay, path="s3",
                                loader=loader)  # fmt: skip
        store_server.close()

    def _naive(self, s3, proxy, urls):
        """What users hand-patch into Keras today: one blocking fs.open().read() per image."""
        import fsspec
        from keras.src.utils import image_utils

        options = s3.storage_options
        options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=proxy.endpoint_url)
        fs = fsspec.filesystem("s3", skip_instance_cache=True, **options)

        def loop() -> list[float]:
            waits = []
            for start in range(0, len(urls), BATCH):
                began = time.perf_counter()
                for url in urls[start : start + BATCH]:
                    with fs.open(url, "rb") as f:
                        img = image_utils.load_img(io.BytesIO(f.read()), target_size=TARGET)
                    image_utils.img_to_array(img) / 255
                waits.append(time.perf_counter() - began)
            return waits

        return loop

    def _fit(self, build: Callable[[], object], images: int) -> dict:
        import keras

        import remote_keras as rk

        class EpochTimer(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.start = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                self.seconds = time.perf_counter() - self.start

        rates, reports = [], []
        for _ in range(max(1, self.args.repeats - 1)):
            keras.utils.set_random_seed(0)
            model = keras.Sequential([
                keras.Input(TARGET + (3,)),
                keras.layers.Conv2D(8, 3, strides=4, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(2, activation="softmax"),
            ])  # fmt: skip
            model.compile("adam", "categorical_crossentropy")
            iterator = build()
            callbacks = [EpochTimer()]
            if isinstance(iterator, rk.DataFrameIterator):
                callbacks.append(rk.InputStallCallback(iterator, verbose=0))
            model.fit(iterator, epochs=2, verbose=0, callbacks=callbacks)
            rates.append(images / callbacks[0].seconds)
            if len(callbacks) > 1:
                reports.append(callbacks[1].reports[-1])  # epoch 2, as timed
            if hasattr(iterator, "close"):
                iterator.close()
        result = {"images_per_s": statistics.median(rates), "images_per_s_all": rates}
        if reports:
            result["input_wait_fraction"] = statistics.median(r.wait_fraction for r in reports)
            result["input_report"] = str(reports[-1])
            result["loader_stats"] = dataclasses.asdict(reports[-1].loader)
        return result

    def _probe(self, s3, proxy, rows: int, prefetch: int) -> dict:
        """Start-up and peak memory of a `rows`-row dataframe, in a fresh process."""
        options = self._options(s3, proxy)
        command = [sys.executable, __file__, "--probe", json.dumps(
            {"rows": rows, "prefetch": prefetch, "options": options, "images": self.args.images,
             "proxy": proxy.endpoint_url})]  # fmt: skip
        out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
        return json.loads(out.stdout.strip().splitlines()[-1])


def probe(spec: dict) -> None:
    """Child process: time to first batch and peak RSS for a large dataframe of S3 URLs."""
    import remote_keras as rk
    from remote_keras.testing.proxy import COUNTS_PATH

    def counts(reset: bool) -> dict:
        import urllib.request

        url = spec["proxy"] + COUNTS_PATH + ("?reset=1" if reset else "")
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)

    names = [f"{('n01', 'n02')[i % 2]}/{i:06d}.jpg" for i in range(spec["images"])]
    urls = [f"s3://bench/imagenet/{names[i % len(names)]}" for i in range(spec["rows"])]
    df = pd.DataFrame({"filename": urls, "class": [u.split("/")[-2] for u in urls]})
    generator_class = rk.ImageDataGenerator  # imports Keras (lazily loaded), before the clock
    counts(reset=True)
    with PeakRSS() as rss:  # ru_maxrss would report the parent's peak, kept across exec
        start = time.perf_counter()
        gen = generator_class(rescale=1 / 255, storage_options=spec["options"])
        it = gen.flow_from_dataframe(
            df, target_size=TARGET, batch_size=BATCH, prefetch_batches=spec["prefetch"], seed=0,
        )  # fmt: skip
        it[0]
        first = time.perf_counter() - start
        startup = counts(reset=True)
        for i in range(1, min(len(it), 40)):
            it[i]
        it.close()
    peak = rss.peak / 2**20
    print(json.dumps({"rows": spec["rows"], "prefetch_batches": spec["prefetch"],
                      "first_batch_s": first, "startup_requests": startup,
                      "peak_rss_mb": peak}))  # fmt: skip


# --------------------------------------------------------------------------- report


def table(results: dict) -> str:
    base = results.get("stock Keras, local disk", {}).get("images_per_s")
    # The client process's own CPU per image against remote_keras's on local disk: what reading
    # over the network costs a user (servers and proxies run in other processes).
    local_cpu = results.get("remote_keras, local disk", {}).get("cpu_ms_per_image")
    lines = [
        "| scenario | images/s | vs stock | GET/img | HEAD/img | store req/img | LIST at start "
        "| CPU ms/img | CPU vs local | wait p50 ms | wait p99 ms | first batch s | RSS growth MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        if name.startswith("startup:"):
            continue
        req = r.get("requests_per_image") or {}
        start = r.get("startup_requests") or {}

        def fmt(value, spec=".1f"):
            return format(value, spec) if isinstance(value, (int, float)) else "-"

        proxied = "requests_per_image" in r and "delay_ms" in r
        store = r.get("store_requests_per_image")
        cpu = r.get("cpu_ms_per_image")
        lines.append(
            f"| {name} | {r['images_per_s']:.0f} "
            f"| {fmt(r['images_per_s'] / base if base else None, '.2f')}x "
            f"| {fmt(req.get('GET', 0) if proxied else None, '.2f')} "
            f"| {fmt(req.get('HEAD', 0) if proxied else None, '.2f')} "
            f"| {fmt(sum(store.values()) if store is not None else None, '.2f')} "
            f"| {fmt(start.get('LIST', 0) if proxied else None, 'd')} "
            f"| {fmt(r.get('cpu_ms_per_image'), '.2f')} "
            f"| {fmt(cpu / local_cpu if cpu and local_cpu else None, '.2f')}x "
            f"| {fmt(r.get('wait_p50_ms'))} "
            f"| {fmt(r.get('wait_p99_ms'))} | {fmt(r.get('first_batch_s'), '.2f')} "
            f"| {fmt(r.get('rss_growth_mb'), '.0f')} |"
        )
    startup = [(k, v) for k, v in results.items() if k.startswith("startup:")]
    if startup:
        lines += ["", "| large dataframe of s3:// URLs, validate_filenames=True | time to first "
                  "batch s | requests at start-up | peak RSS MB |", "|---|---:|---|---:|"]  # fmt: skip
        for name, r in startup:
            lines.append(
                f"| {name.removeprefix('startup: ')} | {r['first_batch_s']:.2f} "
                f"| {r['startup_requests']} | {r['peak_rss_mb']:.0f} |"
            )
    return "\n".join(lines)


def targets(results: dict) -> list[str]:
    """The issue's targets, each with the measured ratio and whether it is met."""
    rate = {k: v["images_per_s"] for k, v in results.items() if "images_per_s" in v}
    lines = idfd_rows.targets(results)
    for delay in (0, 20):
        server = rate.get(f"remote_keras, lakefs server path +{delay} ms")
        for loader in ("fsspec", "obstore"):
            presigned = results.get(f"remote_keras {loader}, lakefs presigned +{delay} ms")
            direct = rate.get(f"remote_keras {loader}, lakefs files from s3 +{delay} ms")
            if presigned and direct:
                at_lakefs = sum(presigned["requests_per_image"].values())
                at_store = sum((presigned.get("store_requests_per_image") or {}).values())
                lines.append(
                    f"{loader} lakefs presigned +{delay} ms vs the same files from s3: "
                    f"{presigned['images_per_s'] / direct:.2f}x (target >= 0.9x at +20 ms); "
                    f"per image {at_lakefs:.3f} requests at lakeFS (target 0), "
                    f"{at_store:.2f} at the store (target 1)"
                )
            if presigned and server:
                lines.append(
                    f"{loader} lakefs presigned +{delay} ms vs the fsspec server path: "
                    f"{presigned['images_per_s'] / server:.2f}x"
                )
    if (
        "stock Keras, local disk" not in rate
        or "tf.data image_dataset_from_directory, local" not in rate
    ):
        return lines
    stock = rate["stock Keras, local disk"]
    tfdata = rate["tf.data image_dataset_from_directory, local"]
    naive = next(v for k, v in rate.items() if k.startswith("naive"))
    cpu = {k: v["cpu_ms_per_image"] for k, v in results.items() if "cpu_ms_per_image" in v}
    local_cpu = cpu.get("remote_keras, local disk")
    tfdata_cpu = cpu.get("tf.data image_dataset_from_directory, local")
    if local_cpu and tfdata_cpu:
        lines.append(
            f"remote_keras local CPU/image vs tf.data's: {local_cpu / tfdata_cpu:.2f}x "
            "(target <= 1.1x)"
        )
    for loader in ("fsspec", "default"):
        at20 = rate.get(f"remote_keras {loader}, s3 +20 ms")
        at100 = rate.get(f"remote_keras {loader}, s3 +100 ms")
        if at20:
            lines.append(f"{loader} s3 +20 ms vs stock local: {at20 / stock:.2f}x (target >= 1.2x)")
            lines.append(f"{loader} s3 +20 ms vs naive loop: {at20 / naive:.0f}x (target >= 30x)")
            lines.append(
                f"{loader} s3 +20 ms vs tf.data local: {at20 / tfdata:.2f}x (stretch >= 0.8x)"
            )
        s3_cpu = cpu.get(f"remote_keras {loader}, s3 +20 ms")
        if s3_cpu and local_cpu:
            lines.append(
                f"{loader} s3 +20 ms client CPU/image vs remote_keras local: "
                f"{s3_cpu / local_cpu:.2f}x (target <= 1.1x)"
            )
        if at20 and at100:
            lines.append(f"{loader} +100 ms vs its +20 ms: {at100 / at20:.2f} (target >= 0.90)")
        in_fit = rate.get(f"fit: remote_keras {loader}, s3 +20 ms")
        stock_fit = rate.get("fit: stock Keras, local disk")
        if in_fit and stock_fit:
            lines.append(
                f"{loader} s3 +20 ms in fit vs stock local in fit: {in_fit / stock_fit:.2f}x "
                "(target >= 1.0x)"
            )
    return lines


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [k for k, v in results.items() if "images_per_s" in v]
    rates = [results[k]["images_per_s"] for k in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw={"width_ratios": [2, 1]})
    left.barh(names[::-1], rates[::-1], color="tab:blue")
    left.set_xlabel("images/s (median)")
    left.set_title("Throughput by scenario")
    for loader in ("fsspec", "default"):
        points = sorted(
            (v["delay_ms"], v["images_per_s"]) for v in results.values()
            if v.get("group") == "s3" and v.get("loader") == loader
        )  # fmt: skip
        if points:
            right.plot(*zip(*points), marker="o", label=f"remote_keras {loader}")
    if "stock Keras, local disk" in results:
        right.axhline(results["stock Keras, local disk"]["images_per_s"], color="gray", ls="--",
                      label="stock Keras, local disk")  # fmt: skip
    right.set_xlabel("added latency per request (ms)")
    right.set_ylabel("images/s")
    right.set_title("Through S3 by latency")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run for CI")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--big-images", type=int, default=200)
    parser.add_argument("--naive-images", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--delays", type=int, nargs="+", default=[0, 20, 100])
    parser.add_argument("--rows", type=int, nargs="+", default=[2000, 100_000])
    parser.add_argument("--data", default=str(HERE / ".data"))
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument(
        "--no-lakefs", dest="lakefs", action="store_false", help="skip the lakeFS scenarios"
    )
    parser.add_argument(
        "--only-lakefs", action="store_true", help="run only the lakeFS scenarios (and S3 direct)"
    )
    parser.add_argument(
        "--only-datasets",
        action="store_true",
        help="run only the image_dataset_from_directory rows (and stock Keras, local disk)",
    )
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        return probe(json.loads(args.probe))
    if args.smoke:
        args.images, args.big_images, args.naive_images = 64, 8, 16
        args.repeats, args.delays, args.rows = 1, [0, 20], [64, 2000]

    results = Bench(args).run()
    report = {
        "meta": {
            "when": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(
                [Path(sys.executable).name, "bench/run.py", *(argv or sys.argv[1:])]
            ),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "images": args.images,
            "repeats": args.repeats,
            "smoke": args.smoke,
        },
        "results": results,
        "targets": targets(results),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(report, indent=1))
    plot(results, out / "latest.png")
    print()
    print(table(results))
    print()
    print("\n".join(report["targets"]))
    print(f"\nWrote {out / 'latest.json'} and {out / 'latest.png'}")


if __name__ == "__main__":
    main()
