"""Benchmark: building iterators over 100k to 1M objects (listing start-up, requests, memory).

Run `make bench-scale` (or `python bench/scale.py`). Everything runs on
127.0.0.1: trees of tiny valid JPEGs (a few seed files, the rest hard links,
so 300k objects take seconds to create; cached in `bench/.data/scale`) in 10
class folders, served by a real S3 server (`rclone serve s3`) behind a
request-counting proxy per added latency (+0 and +20 ms), and a lakeFS
stand-in (in its own process) holding a smaller commit.

Each measurement runs in a fresh process (Keras on its `numpy` backend, so
no TensorFlow is imported; `KERAS_BACKEND` overrides it), after a warm-up
listing of a tiny prefix; one untimed listing of each tree first puts the
server in the same state (its caches) for every scenario. Each reports
wall seconds, listing requests (counted at the proxy), peak RSS added
(sampled every 10 ms) and the first batch's time after construction.
Scenarios, per size and latency:

- `paginator`: the baseline, a serial botocore `list_objects_v2` paginator
  (what boto3's is) keeping the key strings;
- `directory`: `flow_from_directory("s3://.../scale-N")`;
- `listing only`: the listing it makes (`locations.walk_files`), without the iterator;
- `subsets`: the `"training"` then the `"validation"` subset of one generator;
- `dataframe`: `flow_from_dataframe` of N distinct URLs, `validate_filenames=True`;
- `before ...`: the same with another copy of remote_keras (`--before PATH`, e.g.
  `mkdir /tmp/before && git archive HEAD remote_keras | tar -x -C /tmp/before`),
  for before/after tables in one run;
- `lakefs cold` / `lakefs warm`: `flow_from_directory("lakefs://...")` at a
  commit, then again from a new process with the same listing cache folder.

Ratios are taken between scenarios of the same run (the machine is shared
and noisy). Outputs: a table on stdout, `bench/results/scale-latest.json`
and `bench/results/scale-latest.md`. `--smoke` runs 5k objects (well under
a minute) and checks the listings against a serial one; `--million` adds
1M objects. `--full` runs the user's journey at full size instead (`bench/journey.py
--full`: 400k images in lakeFS, 1M objects on S3).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLASSES = 10
LINKS_PER_SEED = 60_000  # ext4 allows 65,000 links per file
BUCKET = "bench"
LAKEFS_REPO = "scale"


# --------------------------------------------------------------------------- data


def seed_jpegs(folder: Path, count: int) -> list[Path]:
    """Writes `count` distinct 8x8 JPEGs (kept outside the served trees)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"seed-{i}.jpg"
        if not path.exists():
            pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(path, quality=80)
        paths.append(path)
    return paths


def names(count: int, classes: int = CLASSES) -> list[str]:
    """`c<k>/<j>.jpg`: `count // classes` files in each of `classes` folders."""
    per = count // classes
    return [f"c{k}/{j:07d}.jpg" for k in range(classes) for j in range(per)]


def build_tree(data: Path, folder: Path, count: int) -> list[str]:
    """Creates `folder` with `count` objects in class folders (reused once complete)."""
    keys = names(count)
    marker = data / f".built-{folder.name}"  # outside the served tree
    if marker.exists():
        return keys
    seeds = seed_jpegs(data / "seeds", max(4, -(-count // LINKS_PER_SEED)))
    for k in range(CLASSES):
        (folder / f"c{k}").mkdir(parents=True, exist_ok=True)
    for i, key in enumerate(keys):
        target = folder / key
        if target.exists():
            continue
        try:
            os.link(seeds[i % len(seeds)], target)
        except OSError:  # another file system, or too many links: copy
            target.write_bytes(seeds[i % len(seeds)].read_bytes())
    marker.touch()
    return keys


# --------------------------------------------------------------------------- child probes


class PeakRSS:
    """Samples this process's resident memory every 10 ms while active."""

    def __init__(self) -> None:
        self.start = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        process = psutil.Process()
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, process.memory_info().rss)

    def __enter__(self) -> PeakRSS:
        import gc

        import psutil

        gc.collect()
        self.start = self.peak = psutil.Process().memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        import psutil

        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, psutil.Process().memory_info().rss)

    @property
    def added_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def proxy_counts(endpoint: str, reset: bool = True) -> dict:
    """The proxy's request counts (`CountingProxy`'s counts path), reset by default."""
    import urllib.request

    url = endpoint + "/__proxy__/counts" + ("?reset=1" if reset else "")
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def probe(spec: dict) -> dict:
    """Runs one scenario in this (fresh) process; returns its measurements."""
    if spec.get("before"):
        sys.path.insert(0, spec["before"])
    import remote_keras as rk

    kind, proxy = spec["kind"], spec["proxy"]
    options = spec["options"]
    out: dict = {"remote_keras": os.path.dirname(rk.__file__)}
    kw = dict(target_size=(8, 8), batch_size=32, shuffle=False)
    gen = rk.ImageDataGenerator(storage_options=options, progress=False)
    if kind == "paginator":
        return _paginator(spec, out)
    if kind.startswith("lakefs"):
        import fsspec
        import lakefs

        url = spec["url"]
        fs, _ = fsspec.core.url_to_fs(url, **options)  # the instance remote_keras's reads reuse
        lakefs.Reference(LAKEFS_REPO, "main", client=fs.client).get_commit()
    else:
        url = f"s3://{BUCKET}/{spec['prefix']}"
        gen.flow_from_directory(f"s3://{BUCKET}/{spec['warmup']}", **kw).close()  # clients, imports
    proxy_counts(proxy)
    if kind == "dataframe":
        import pandas as pd

        keys = names(spec["count"])
        df = pd.DataFrame(
            {"filename": [f"{url}/{k}" for k in keys], "class": [k[:2] for k in keys]}
        )
        del keys
    with PeakRSS() as rss:
        start = time.perf_counter()
        if kind == "dataframe":
            it = gen.flow_from_dataframe(df, **kw)
        elif kind == "subsets":
            split = rk.ImageDataGenerator(
                validation_split=0.2, storage_options=options, progress=False
            )
            train = split.flow_from_directory(url, subset="training", **kw)
            out["training_s"] = time.perf_counter() - start
            out["training_requests"] = proxy_counts(proxy)
            it = split.flow_from_directory(url, subset="validation", **kw)
            out["validation_requests"] = proxy_counts(proxy)
            out["samples"] = train.samples + it.samples
            train.close()
        elif kind == "listing":
            from remote_keras.storage import locations

            entries = locations.walk_files(url, locations.FileSystems(options))
        else:
            it = gen.flow_from_directory(url, **kw)
        out["startup_s"] = time.perf_counter() - start
    out["requests"] = proxy_counts(proxy)
    for part in ("training_requests", "validation_requests"):
        for name, n in out.get(part, {}).items():
            out["requests"][name] = out["requests"].get(name, 0) + n
    out["rss_added_mb"] = rss.added_mb
    if kind == "listing":
        out["samples"] = len(entries)
        return out
    start = time.perf_counter()
    it[0]
    out["first_batch_s"] = time.perf_counter() - start
    out.setdefault("samples", it.samples)
    if spec.get("check"):
        out["filenames"], out["classes"] = it.filenames, sorted(it.class_indices)
    it.close()
    return out


def _paginator(spec: dict, out: dict) -> dict:
    """The baseline: one serial botocore paginator, keeping the keys."""
    import botocore.session

    options = spec["options"]
    client = botocore.session.get_session().create_client(
        "s3",
        endpoint_url=options["client_kwargs"]["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id=options["key"],
        aws_secret_access_key=options["secret"],
    )
    paginator = client.get_paginator("list_objects_v2")

    def listing(prefix: str) -> list[str]:
        keys: list[str] = []
        for page in paginator.paginate(Bucket=BUCKET, Prefix=prefix + "/"):
            keys += [entry["Key"] for entry in page.get("Contents", ())]
        return keys

    listing(spec["warmup"])
    proxy_counts(spec["proxy"])
    with PeakRSS() as rss:
        start = time.perf_counter()
        keys = listing(spec["prefix"])
        out["startup_s"] = time.perf_counter() - start
    out["requests"] = proxy_counts(spec["proxy"])
    out["rss_added_mb"] = rss.added_mb
    out["samples"] = len(keys)
    if spec.get("check"):
        cut = len(spec["prefix"]) + 1
        out["keys"] = [key[cut:] for key in keys]
    return out


# --------------------------------------------------------------------------- parent


def run_probe(spec: dict, env: dict | None = None, timeout: float = 1800) -> dict:
    """Runs `probe(spec)` in a fresh process and returns its JSON."""
    command = [sys.executable, __file__, "--probe", json.dumps(spec)]
    environment = dict(os.environ, **(env or {}))
    environment.setdefault("KERAS_BACKEND", "numpy")
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    done = subprocess.run(
        command, capture_output=True, text=True, env=environment, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"probe {spec['kind']} failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


class Scale:
    """Holds the servers, data and results of one run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data = Path(args.data)
        self.results: list[dict] = []
        self.checks: dict[str, bool] = {}

    def record(self, size: int, where: str, name: str, result: dict) -> None:
        result = {k: v for k, v in result.items() if k not in ("filenames", "keys", "classes")}
        result.update(size=size, where=where, scenario=name)
        self.results.append(result)
        lists = result.get("requests", {}).get("LIST", 0)
        print(
            f"  {size:>9,} {where:<10} {name:<24} {result['startup_s']:8.2f} s "
            f"{lists:6d} LIST {result['rss_added_mb']:7.1f} MB",
            flush=True,
        )

    def run(self) -> None:
        from remote_keras.testing import CountingProxy, S3Server

        args = self.args
        root = self.data / "s3root"
        (root / BUCKET).mkdir(parents=True, exist_ok=True)
        print(f"Building trees in {root} (cached) ...", flush=True)
        trees = {}
        for size in [args.warmup_size, *args.sizes]:
            started = time.perf_counter()
            trees[size] = build_tree(self.data, root / BUCKET / f"scale-{size}", size)
            print(f"  {size:,} objects: {time.perf_counter() - started:.1f} s", flush=True)
        with S3Server(root) as s3:
            for delay in args.delays:
                with CountingProxy(s3.port, delay_s=delay / 1000) as proxy:
                    options = s3.storage_options
                    options["client_kwargs"] = dict(
                        options["client_kwargs"], endpoint_url=proxy.endpoint_url
                    )
                    for size in args.sizes:
                        self._s3(size, f"s3 +{delay} ms", options, proxy.endpoint_url, trees[size])
        if args.lakefs:
            self._lakefs()

    def _s3(self, size: int, where: str, options: dict, proxy: str, keys: list[str]) -> None:
        args = self.args
        spec = {"options": options, "proxy": proxy, "prefix": f"scale-{size}", "count": size,
                "warmup": f"scale-{args.warmup_size}", "check": args.smoke}  # fmt: skip
        if not args.no_server_warmup:  # the same server state (rclone's caches) for every probe
            run_probe(dict(spec, kind="listing", check=False))
        base = run_probe(dict(spec, kind="paginator"))
        self.record(size, where, "paginator (baseline)", base)
        after = run_probe(dict(spec, kind="directory"))
        self.record(size, where, "directory", after)
        if not args.smoke:  # a process per probe: the smoke runs only those it checks
            listing = run_probe(dict(spec, kind="listing", check=False))
            self.record(size, where, "listing only", listing)
        if args.before:
            self.record(size, where, "before: directory", run_probe(
                dict(spec, kind="directory", before=args.before, check=False)))  # fmt: skip
        self.record(size, where, "subsets", run_probe(dict(spec, kind="subsets", check=False)))
        if not args.no_dataframe:
            self.record(size, where, "dataframe", run_probe(dict(spec, kind="dataframe")))
            if args.before:
                self.record(size, where, "before: dataframe", run_probe(
                    dict(spec, kind="dataframe", before=args.before, check=False)))  # fmt: skip
        if args.smoke:
            expected = sorted(base["keys"], key=lambda k: (k.split("/")[0], k))
            self.checks[f"{where}: order equals a serial listing"] = after[
                "filenames"
            ] == expected == sorted(keys) and after["classes"] == sorted(
                {k.split("/")[0] for k in keys}
            )
        bound = size / 1000 + CLASSES + 2
        self.checks[f"{where} {size}: LIST <= N/1000 + prefixes + 2"] = (
            after["requests"].get("LIST", 0) <= bound
        )

    def _lakefs(self) -> None:
        """The lakeFS stand-in in its own process, a commit of `--lakefs-size` objects."""
        from remote_keras.testing import CountingProxy

        size = self.args.lakefs_size
        with tempfile.TemporaryDirectory(prefix="scale-lakefs-") as tmp:
            server = subprocess.Popen(
                [sys.executable, __file__, "--lakefs-server", tmp],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            try:
                assert server.stdout is not None
                options = json.loads(server.stdout.readline())
                started = time.perf_counter()
                commit = upload_commit(options, size, self.data)
                print(f"  lakeFS commit of {size:,} objects: "
                      f"{time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
                port = int(options["host"].rsplit(":", 1)[1])
                with CountingProxy(port) as proxy:
                    via = dict(options, host=proxy.endpoint_url)
                    spec = {"kind": "lakefs", "options": via, "proxy": proxy.endpoint_url,
                            "url": f"lakefs://{LAKEFS_REPO}/{commit}/train", "count": size}  # fmt: skip
                    env = {"XDG_CACHE_HOME": os.path.join(tmp, "cache")}
                    cold = run_probe(spec, env)
                    self.record(size, "lakefs +0 ms", "lakefs cold", cold)
                    warm = run_probe(spec, env)
                    self.record(size, "lakefs +0 ms", "lakefs warm (cache)", warm)
                    if self.args.before:
                        self.record(size, "lakefs +0 ms", "before: lakefs", run_probe(
                            dict(spec, before=self.args.before), env))  # fmt: skip
            finally:
                if server.stdin:
                    server.stdin.close()
                server.wait(60)
        lists = cold["requests"].get("LIST", 0)
        self.checks[f"lakefs {size}: LIST <= N/1000 + prefixes + 2"] = (
            lists <= size / 1000 + CLASSES + 2
        )
        self.checks[f"lakefs {size}: cache-warm construction makes no listing call"] = (
            warm["requests"].get("LIST", 0) == 0 and warm["samples"] == cold["samples"] == size
        )


def lakefs_server(root: str) -> None:
    """Child process: a lakeFS stand-in until stdin closes; prints its storage options."""
    from remote_keras.testing import LakeFSServer

    with LakeFSServer(root=os.path.join(root, "data")) as server:
        print(json.dumps(server.storage_options), flush=True)
        sys.stdin.read()


def upload_commit(options: dict, size: int, data: Path) -> str:
    """Uploads `size` tiny JPEGs to `lakefs://scale/main/train/` from 16 threads, commits."""
    import lakefs
    from lakefs.client import Client

    client = Client(**options)
    lakefs.Repository(LAKEFS_REPO, client=client).create(storage_namespace=f"local://{LAKEFS_REPO}")
    payloads = [path.read_bytes() for path in seed_jpegs(data / "seeds", 4)]
    api = client.sdk_client.objects_api

    def upload(item: tuple[int, str]) -> None:
        i, key = item
        api.upload_object(LAKEFS_REPO, "main", f"train/{key}", content=payloads[i % 4])

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(upload, enumerate(names(size))))
    return lakefs.Branch(LAKEFS_REPO, "main", client=client).commit("scale").get_commit().id


# --------------------------------------------------------------------------- report


def ratio(
    results: list[dict], size: int, where: str, name: str, base: str, key: str
) -> float | None:
    found = {r["scenario"]: r for r in results if r["size"] == size and r["where"] == where}
    if name in found and base in found and found[base][key]:
        return found[name][key] / found[base][key]
    return None


def table(results: list[dict]) -> str:
    lines = [
        "| objects | where | scenario | start-up s | vs paginator | LIST | peak RSS added MB "
        "| vs paginator | first batch s |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        base = "paginator (baseline)"
        t = ratio(results, r["size"], r["where"], r["scenario"], base, "startup_s")
        m = ratio(results, r["size"], r["where"], r["scenario"], base, "rss_added_mb")
        first = r.get("first_batch_s")
        lines.append(
            f"| {r['size']:,} | {r['where']} | {r['scenario']} | {r['startup_s']:.2f} "
            f"| {f'{t:.2f}x' if t is not None and 'lakefs' not in r['where'] else '-'} "
            f"| {r['requests'].get('LIST', 0)} | {r['rss_added_mb']:.0f} "
            f"| {f'{m:.2f}x' if m is not None and 'lakefs' not in r['where'] else '-'} "
            f"| {f'{first:.2f}' if first is not None else '-'} |"
        )
    return "\n".join(lines)


def targets(results: list[dict]) -> list[str]:
    """The issue's targets, each with the measured value."""
    lines = []
    base = "paginator (baseline)"
    for r in results:
        size, where, name = r["size"], r["where"], r["scenario"]
        if name == "directory" and where.startswith("s3"):
            t = ratio(results, size, where, name, base, "startup_s")
            goal = 0.35 if size >= 300_000 else 0.5
            m = ratio(results, size, where, name, base, "rss_added_mb")
            lines.append(f"{where} {size:,}: construction {t:.2f}x paginator (target <= {goal}x); "
                         f"peak RSS {m:.2f}x (target <= 1.5x at 300k); first batch "
                         f"{r['first_batch_s']:.2f} s (target <= 1 s)")  # fmt: skip
        if name == "listing only" and where.startswith("s3"):
            m = ratio(results, size, where, name, base, "rss_added_mb")
            lines.append(f"{where} {size:,}: peak RSS added by the listing {m:.2f}x paginator "
                         "(target <= 1.5x at 300k)")  # fmt: skip
        if name == "dataframe" and where.startswith("s3"):
            t = ratio(results, size, where, name, base, "startup_s")
            lines.append(
                f"{where} {size:,}: validate_filenames {t:.2f}x paginator (target <= 0.5x)"
            )
        if name == "subsets":
            lines.append(f"{where} {size:,}: validation subset after training: "
                         f"{r['validation_requests'].get('LIST', 0)} LIST (target 0)")  # fmt: skip
        if name == "lakefs cold":
            lines.append(f"lakefs {size:,}: {r['requests'].get('LIST', 0)} LIST "
                         f"(target <= {size / 1000 + CLASSES:.0f})")  # fmt: skip
        if name == "lakefs warm (cache)":
            lines.append(f"lakefs {size:,} cache warm: {r['startup_s']:.2f} s, "
                         f"{r['requests'].get('LIST', 0)} LIST (target <= 1 s at 100k, 0 LIST)")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="5k objects, checked; under a minute")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000])
    parser.add_argument("--million", action="store_true", help="add 1,000,000 objects")
    parser.add_argument("--delays", type=int, nargs="+", default=[0, 20])
    parser.add_argument("--lakefs-size", type=int, default=20_000)
    parser.add_argument("--no-lakefs", dest="lakefs", action="store_false")
    parser.add_argument("--no-dataframe", action="store_true")
    parser.add_argument(
        "--no-server-warmup", action="store_true", help="skip the untimed listing per size"
    )
    parser.add_argument("--before", help="a checkout of remote_keras to measure as 'before'")
    parser.add_argument("--warmup-size", type=int, default=20)
    parser.add_argument("--data", default=str(HERE / ".data" / "scale"))
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument(
        "--full", action="store_true", help="the journey at 400k (lakeFS) and 1M (S3): journey.py"
    )
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--lakefs-server", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(json.loads(args.probe))))
        return
    if args.lakefs_server:
        return lakefs_server(args.lakefs_server)
    if args.full:  # the user's journey at full size (bench/journey.py)
        import journey

        sys.exit(journey.main(["--full", "--data", args.data, "--out", args.out]))
    if args.smoke:
        args.sizes, args.delays, args.lakefs_size = [5000], [0], 3000
        args.no_server_warmup = True
    if args.million:
        args.sizes = [*args.sizes, 1_000_000]
    if args.before:
        args.before = str(Path(args.before).resolve())

    print("Construction at scale (seconds, LIST requests at the proxy, peak RSS added):")
    bench = Scale(args)
    bench.run()
    report = {
        "meta": {
            "when": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(["python", "bench/scale.py", *(argv or sys.argv[1:])]),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "keras_backend": os.environ.get("KERAS_BACKEND", "numpy"),
            "smoke": args.smoke,
            "runs": 1,
        },
        "results": bench.results,
        "targets": targets(bench.results),
        "checks": bench.checks,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale-latest.json").write_text(json.dumps(report, indent=1))
    text = table(bench.results)
    (out / "scale-latest.md").write_text(text + "\n\n" + "\n".join(report["targets"]) + "\n")
    print()
    print(text)
    print()
    print("\n".join(report["targets"]))
    print(
        "\n".join(f"check: {name}: {'ok' if ok else 'FAILED'}" for name, ok in bench.checks.items())
    )
    print(f"\nWrote {out / 'scale-latest.json'} and {out / 'scale-latest.md'}")
    if not all(bench.checks.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
