"""Benchmark: lakeFS reads checked against the checksums lakeFS sends, and what that costs.

Run `python bench/integrity_lakefs.py` (a few minutes on a 2-core machine). Everything
runs on 127.0.0.1: the lakeFS stand-in in its own process, presigning to its data server,
holding photo-like 224x224 JPEGs; fault proxies in their own processes in front of the
lakeFS server and of the data server. Reads through the server (`pre_sign=False`) and
presigned (straight from the store) are measured.

(a) Caught: `--epochs` epochs with the proxy flipping 3 bytes in the middle of `--rate` of
    object bodies (same status, same length): in front of the lakeFS server for reads
    through it, in front of the store for presigned reads. Batches with pixels other than
    a clean read's (or with a sample lost), `verify_checksums` off and on.
(b) Cost: client CPU per image (process CPU seconds, every thread, over images decoded)
    of one epoch, no faults, verification off and on alternating, medians of `--repeats`
    epochs of each. The servers' CPU is not the client's.

Prints a table; `--json PATH` also writes the numbers. Runs on older versions of the
package too (to compare with `PYTHONPATH=<a checkout>`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pandas as pd
from integrity import add_common_arguments  # bench/, first on sys.path when run as a script

KW = dict(target_size=(224, 224), batch_size=32, shuffle=False, validate_filenames=False)
REPO = "bench"
MODES = {"through the server": False, "presigned": None}


def make_data(root: Path, count: int, seed: int) -> tuple[pd.DataFrame, str]:
    """`count` photo-like JPEGs committed to a stand-in on `root`; returns (df, access key)."""
    from remote_keras.testing.data import photo_like_jpeg
    from remote_keras.testing.lakefs import LakeFSServer
    from remote_keras.testing.lakefs.bulk import import_files

    rng = np.random.default_rng(seed)
    sources = root.parent / "sources"
    sources.mkdir()
    files = []
    for i in range(count):
        name = f"{'ab'[i % 2]}/{i:05d}.jpg"
        (sources / f"{i:05d}.jpg").write_bytes(photo_like_jpeg(rng, 224, 224))
        files.append((f"train/{name}", sources / f"{i:05d}.jpg"))
    with LakeFSServer(root, secret_access_key=os.environ["SECRET"]) as server:
        import lakefs
        from lakefs.client import Client

        client = Client(**server.storage_options)
        lakefs.Repository(REPO, client=client).create(storage_namespace=f"local://{REPO}")
        import_files(server, REPO, "main", files, "images")
        key = server.access_key_id
    names = [name.removeprefix("train/") for name, _ in files]
    return pd.DataFrame({"filename": names, "class": [n[0] for n in names]}), key


def serve(root: Path, key: str, data_port: int, presign_url: str) -> tuple[subprocess.Popen, dict]:
    """The stand-in on `root` in its own process, presigning to `presign_url`.

    Raises:
        OSError: the stand-in could not listen on `data_port` (another socket took it
            after it was found free).
    """
    env = dict(os.environ, REMOTE_KERAS_LAKEFS_ACCESS_KEY_ID=key,
               REMOTE_KERAS_LAKEFS_SECRET_ACCESS_KEY=os.environ["SECRET"])  # fmt: skip
    command = [sys.executable, "-m", "remote_keras.testing.lakefs", "--root", str(root),
               "--presign", "--data-server", "--data-port", str(data_port),
               "--presign-url", presign_url]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:  # it exited: the port was taken meanwhile (its traceback is on stderr)
        process.wait(10)
        raise OSError(f"the lakeFS stand-in could not start on port {data_port}")
    return process, json.loads(line)


def serve_behind_proxy(
    root: Path, key: str, attempts: int = 3
) -> tuple[Any, subprocess.Popen, dict]:
    """The stand-in and the proxy in front of its data server: `(proxy, process, options)`.

    The data server's port is chosen before the proxy and the stand-in start; on a busy
    machine another socket may take it meanwhile, and then a new port is tried.
    """
    from remote_keras.testing.base import free_port
    from remote_keras.testing.proxy import ProxyProcess

    for attempt in range(attempts):
        data_port = free_port()
        proxy = ProxyProcess(data_port).start()
        try:
            process, options = serve(root, key, data_port, proxy.endpoint_url)
        except OSError:
            proxy.close()
            if attempt == attempts - 1:
                raise
            continue
        return proxy, process, options
    raise AssertionError("unreachable")


def read_epochs(options, df, pre_sign, epochs, verify) -> tuple[list[list[np.ndarray]], object]:
    """Each epoch's batches (images only), and the final stats."""
    import remote_keras as rk

    policy = rk.RetryPolicy(backoff_s=0.01, max_backoff_s=0.1)
    gen = rk.ImageDataGenerator(storage_options=options, retries=policy, pre_sign=pre_sign,
                                verify_checksums=verify, on_error="skip")  # fmt: skip
    runs = []
    with gen.flow_from_dataframe(df, f"lakefs://{REPO}/main/train", **KW) as it:
        for _ in range(epochs):
            runs.append([it[i][0] for i in range(len(it))])
            it.on_epoch_end()
        return runs, it.stats


def caught(options, df, proxies, epochs: int, rate: float) -> dict:
    """(a): batches differing from a clean read's, per mode, verification off and on."""
    from remote_keras.testing.proxy import FaultPlan

    results = {}
    for mode, pre_sign in MODES.items():
        proxy = proxies[mode]
        (clean,), _ = read_epochs(options, df, pre_sign, 1, True)
        for verify in (False, True):
            proxy.set_faults(FaultPlan(rate=rate, seed=7, kinds=("flip",)))
            proxy.reset()
            runs, stats = read_epochs(options, df, pre_sign, epochs, verify)
            flipped = proxy.faults_injected()["flip"]
            proxy.set_faults(None)
            wrong = sum(
                a.shape != b.shape or not np.array_equal(a, b)
                for run in runs for a, b in zip(run, clean)
            )  # fmt: skip
            results[f"{mode}, verify_checksums={verify}"] = {
                "batches": epochs * len(clean), "bodies_flipped": flipped,
                "batches_wrong": wrong, "checksum_mismatches": stats.checksum_mismatches,
                "verified": stats.verified, "unverified": stats.unverified,
                "skipped": stats.skipped,
            }  # fmt: skip
    return results


def cpu_per_image(options, df, pre_sign, verify: bool) -> float:
    """Client CPU ms per image of one epoch (process CPU time: every thread)."""
    import remote_keras as rk

    gen = rk.ImageDataGenerator(storage_options=options, pre_sign=pre_sign,
                                verify_checksums=verify)  # fmt: skip
    with gen.flow_from_dataframe(df, f"lakefs://{REPO}/main/train", **KW) as it:
        it[0]  # clients, pools, connections and addresses up before the clock starts
        start = time.process_time()
        images = sum(len(it[i][0]) for i in range(1, len(it)))
        spent = time.process_time() - start
    return 1000 * spent / images


def costs(options, df, repeats: int) -> dict:
    """(b): median CPU ms per image, verification off and on alternating, per mode."""
    results = {}
    for mode, pre_sign in MODES.items():
        samples: dict[bool, list[float]] = {True: [], False: []}
        cpu_per_image(options, df, pre_sign, True)  # warm-up: imports, page cache
        for _ in range(repeats):
            for verify in (False, True):
                samples[verify].append(cpu_per_image(options, df, pre_sign, verify))
        off, on = statistics.median(samples[False]), statistics.median(samples[True])
        results[mode] = {"cpu_ms_per_image_off": off, "cpu_ms_per_image_on": on,
                         "increase": on / off - 1,
                         "samples_off": samples[False], "samples_on": samples[True]}  # fmt: skip
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--skip-caught", action="store_true", help="only (b)")
    args = parser.parse_args()

    from remote_keras.testing.proxy import ProxyProcess

    os.environ.setdefault("SECRET", "bench-secret-" + os.urandom(8).hex())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "lakefs"
        df, key = make_data(root, args.images, seed=0)
        store_proxy, process, options = serve_behind_proxy(root, key)
        with store_proxy:
            try:
                api_port = int(options["host"].rsplit(":", 1)[1])
                with ProxyProcess(api_port) as api_proxy:
                    proxied = dict(options, host=api_proxy.endpoint_url)
                    proxies = {"through the server": api_proxy, "presigned": store_proxy}
                    report = {"images": args.images, "epochs": args.epochs, "rate": args.rate}
                    if not args.skip_caught:
                        report["caught"] = caught(proxied, df, proxies, args.epochs, args.rate)
                report["cpu"] = costs(options, df, args.repeats)
            finally:
                process.terminate()
                process.wait(10)
    if "caught" in report:
        print(f"\n(a) {args.epochs} epochs of {args.images} images, {args.rate:.0%} of bodies "
              "flipped by the proxy")  # fmt: skip
        print("| mode, setting | bodies flipped | batches with wrong pixels | mismatches caught |")
        print("|---|---|---|---|")
        for name, r in report["caught"].items():
            print(f"| {name} | {r['bodies_flipped']} | {r['batches_wrong']} of {r['batches']} | "
                  f"{r['checksum_mismatches']} |")  # fmt: skip
    print(f"\n(b) client CPU per image, median of {args.repeats} epochs each")
    print("| mode | off ms/img | on ms/img | change of medians |")
    print("|---|---|---|---|")
    for name, r in report["cpu"].items():
        print(f"| {name} | {r['cpu_ms_per_image_off']:.3f} | {r['cpu_ms_per_image_on']:.3f} | "
              f"{r['increase']:+.1%} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
