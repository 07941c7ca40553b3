"""Benchmark: what checking bodies against the store's checksum catches, and what it costs.

Run `python bench/integrity.py` (about 3 minutes on a 2-core machine). Everything runs on
127.0.0.1: a real S3 server (`rclone serve s3`) holding photo-like 224x224 JPEGs, and,
for (a), the fault proxy in its own process flipping 3 bytes in the middle of 2% of
bodies (same status, same length). Both loaders (fsspec, obstore) are measured.

(a) Caught: 3 epochs over the images through the flipping proxy; images whose pixels
    differ from a clean run's (or that did not decode), with `verify_checksums=False`
    and with `True`.
(b) Cost: client CPU per image (process CPU seconds, every thread, over images decoded)
    of one epoch read straight from the server, verification on and off alternating,
    medians of `--repeats` epochs of each in the same run. The proxy is not in the way.
(c) Hash cost alone: each algorithm over the same bodies, microseconds per image.

Objects are uploaded with obstore, which sends no checksum header: both loaders then
check the ETag (MD5), the case of most S3 objects. `--crc32` also uploads a copy with
s3fs (whose botocore sends a CRC32 that the server keeps and returns) and reports the
fsspec loader on it, which then checks the cheaper CRC32. Prints a table; `--json PATH`
also writes the numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
import zlib
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
KW = dict(target_size=(224, 224), batch_size=32, shuffle=False, validate_filenames=False)


def make_bodies(count: int, seed: int) -> dict[str, bytes]:
    """`count` photo-like 224x224 JPEGs by name, alternating between two class folders."""
    from remote_keras.testing.data import photo_like_jpeg

    rng = np.random.default_rng(seed)
    return {f"{'ab'[i % 2]}/{i:05d}.jpg": photo_like_jpeg(rng, 224, 224) for i in range(count)}


def upload(server, bodies: dict[str, bytes], prefix: str, client: str) -> None:
    if client == "s3fs":
        import s3fs

        fs = s3fs.S3FileSystem(**server.storage_options, skip_instance_cache=True)
        fs.pipe({f"data/{prefix}/{name}": body for name, body in bodies.items()})
        return
    import obstore
    from obstore.store import S3Store

    store = S3Store("data", endpoint=server.endpoint_url, region="us-east-1",
                    access_key_id=server.access_key, secret_access_key=server.secret_key,
                    client_options={"allow_http": True})  # fmt: skip
    for name, body in bodies.items():
        obstore.put(store, f"{prefix}/{name}", body)


def options_via(server, endpoint: str) -> dict:
    options = server.storage_options
    options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=endpoint)
    return options


def read_epochs(options: dict, url: str, df: pd.DataFrame, loader: str, epochs: int,
                verify: bool) -> tuple[list[list[np.ndarray | None]], object]:  # fmt: skip
    """Each epoch's images in order (`None` for a skipped one), and the final stats."""
    import remote_keras as rk

    policy = rk.RetryPolicy(backoff_s=0.01, max_backoff_s=0.1)
    gen = rk.ImageDataGenerator(storage_options=options, loader=loader, retries=policy,
                                verify_checksums=verify, on_error="skip")  # fmt: skip
    runs = []
    with gen.flow_from_dataframe(df, url, **KW) as it:
        for _ in range(epochs):
            skipped_before = len(it.skipped)
            images: list[np.ndarray | None] = []
            for i in range(len(it)):
                images.extend(it[i][0])
            lost = {u for u, _ in it.skipped[skipped_before:]}
            paths = [f"{url}/{name}" for name in df["filename"]]
            found = iter(images)
            runs.append([None if p in lost else next(found) for p in paths])
            it.on_epoch_end()
        return runs, it.stats


def caught(server, bodies, url, df, epochs: int, rate: float) -> dict:
    """(a): images differing from a clean run, verification off and on, per loader."""
    from remote_keras.testing.proxy import FaultPlan, ProxyProcess

    results = {}
    with ProxyProcess(server.port) as proxy:
        options = options_via(server, proxy.endpoint_url)
        for loader in ("fsspec", "obstore"):
            clean, _ = read_epochs(options, url, df, loader, 1, verify=True)
            for verify in (False, True):
                proxy.set_faults(FaultPlan(rate=rate, seed=7, kinds=("flip",)))
                proxy.reset()
                runs, stats = read_epochs(options, url, df, loader, epochs, verify)
                flipped = proxy.faults_injected()["flip"]
                proxy.set_faults(None)
                differing = sum(
                    image is None or not np.array_equal(image, reference)
                    for run in runs for image, reference in zip(run, clean[0])
                )  # fmt: skip
                results[f"{loader}, verify_checksums={verify}"] = {
                    "images_read": epochs * len(df), "bodies_flipped": flipped,
                    "images_differing_or_lost": differing,
                    "lost": sum(image is None for run in runs for image in run),
                    "checksum_mismatches": stats.checksum_mismatches, "retries": stats.retries,
                    "verified": stats.verified, "unverified": stats.unverified,
                }  # fmt: skip
    return results


def cpu_per_image(options: dict, url: str, df: pd.DataFrame, loader: str, verify: bool) -> float:
    """Client CPU ms per image of one epoch (process CPU time: every thread)."""
    import remote_keras as rk

    gen = rk.ImageDataGenerator(storage_options=options, loader=loader, verify_checksums=verify)
    with gen.flow_from_dataframe(df, url, **KW) as it:
        it[0]  # clients, pools and connections up before the clock starts
        start = time.process_time()
        images = sum(len(it[i][0]) for i in range(1, len(it)))
        spent = time.process_time() - start
        assert (it.stats.verified > 0) == verify, it.stats
    return 1000 * spent / images


def costs(server, url: str, df: pd.DataFrame, repeats: int, loaders: dict[str, str]) -> dict:
    """(b): median CPU ms per image, on and off alternating, per loader."""
    options = server.storage_options
    results = {}
    for label, (loader, where) in loaders.items():
        samples: dict[bool, list[float]] = {True: [], False: []}
        cpu_per_image(options, where, df, loader, True)  # warm-up: imports, page cache
        for _ in range(repeats):
            for verify in (False, True):
                samples[verify].append(cpu_per_image(options, where, df, loader, verify))
        off, on = statistics.median(samples[False]), statistics.median(samples[True])
        results[label] = {"cpu_ms_per_image_off": off, "cpu_ms_per_image_on": on,
                          "increase": on / off - 1,
                          "min_increase": min(samples[True]) / min(samples[False]) - 1,
                          "samples_off": samples[False], "samples_on": samples[True]}  # fmt: skip
    return results


def hash_costs(bodies: list[bytes], rounds: int = 20) -> dict:
    """(c): microseconds per image of each algorithm alone, median of `rounds` passes."""
    hashers: dict[str, Callable[[bytes], object]] = {
        "md5": lambda b: hashlib.md5(b, usedforsecurity=False).digest(),
        "crc32 (zlib)": zlib.crc32,
        "sha256": lambda b: hashlib.sha256(b).digest(),
    }
    try:
        import google_crc32c

        hashers[f"crc32c (google-crc32c, {google_crc32c.implementation})"] = google_crc32c.value
    except ImportError:
        pass
    try:
        import crc32c

        hashers["crc32c (crc32c)"] = crc32c.crc32c
    except ImportError:
        pass
    size = sum(map(len, bodies))
    results = {}
    for name, hasher in hashers.items():
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            for body in bodies:
                hasher(body)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        results[name] = {
            "us_per_image": 1e6 * median / len(bodies),
            "mb_per_s": size / median / 1e6,
        }
    return results


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of both integrity benchmarks (this one and `integrity_lakefs.py`)."""
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=0.02, help="fraction of bodies flipped")
    parser.add_argument("--repeats", type=int, default=5, help="epochs per setting in (b)")
    parser.add_argument("--json", type=Path, help="also write the results here")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--crc32", action="store_true", help="also fsspec on CRC32 objects")
    args = parser.parse_args()

    from remote_keras.testing import S3Server

    bodies = make_bodies(args.images, seed=0)
    names = list(bodies)
    df = pd.DataFrame({"filename": names, "class": [n[0] for n in names]})
    with S3Server(buckets=("data",)) as server:
        upload(server, bodies, "md5", "obstore")
        url = "s3://data/md5"
        loaders = {"fsspec (ETag MD5)": ("fsspec", url), "obstore (ETag MD5)": ("obstore", url)}
        if args.crc32:
            upload(server, bodies, "crc32", "s3fs")
            loaders["fsspec (x-amz-checksum-crc32)"] = ("fsspec", "s3://data/crc32")
        report = {
            "images": args.images,
            "mean_jpeg_bytes": sum(map(len, bodies.values())) / len(bodies),
            "caught": caught(server, bodies, url, df, args.epochs, args.rate),
            "cpu": costs(server, url, df, args.repeats, loaders),
            "hash": hash_costs(list(bodies.values())),
        }
    print(f"\n{args.images} JPEGs 224x224, mean {report['mean_jpeg_bytes'] / 1000:.1f} KB\n")
    print(f"(a) {args.epochs} epochs, {args.rate:.0%} of bodies flipped by the proxy")
    print("| loader, setting | bodies flipped | images differing or lost | mismatches caught |")
    print("|---|---|---|---|")
    for name, r in report["caught"].items():
        print(f"| {name} | {r['bodies_flipped']} | {r['images_differing_or_lost']} of "
              f"{r['images_read']} ({r['lost']} lost) | {r['checksum_mismatches']} |")  # fmt: skip
    print(f"\n(b) client CPU per image, median of {args.repeats} epochs each (and of the minima)")
    print("| loader | off ms/img | on ms/img | change of medians | change of minima |")
    print("|---|---|---|---|---|")
    for name, r in report["cpu"].items():
        print(f"| {name} | {r['cpu_ms_per_image_off']:.3f} | {r['cpu_ms_per_image_on']:.3f} | "
              f"{r['increase']:+.1%} | {r['min_increase']:+.1%} |")  # fmt: skip
    print("\n(c) hashing alone")
    print("| algorithm | us/image | MB/s |")
    print("|---|---|---|")
    for name, r in report["hash"].items():
        print(f"| {name} | {r['us_per_image']:.1f} | {r['mb_per_s']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
