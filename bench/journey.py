"""The user's journey at full size: 400k images in lakeFS (presigned reads), 1M objects on S3.

Run `make bench-scale ARGS=--full` (the same as `python bench/scale.py --full`, or
`python bench/journey.py --full`); `--smoke` is the small version that
`tests/test_journey.py` runs. Everything runs on 127.0.0.1.

lakeFS: a stand-in in its own process, in presign mode with a separate data server,
holds a repository `journey` whose `main` branch has `train/cXXXX/NNNNNN.jpg` (tiny
valid JPEGs, `--folders` class folders) and `labels.csv` (filename, class), in one
commit built with `remote_keras.testing.lakefs.bulk.import_files` (the data is staged
in the stand-in's state directly, as lakeFS's import does, instead of 400k uploads).
Each stage runs in a fresh process and reports its wall time, the lakeFS API calls it
made (counted by the stand-in, by route), the presigned reads (counted by the data
server) and the peak RSS it added after its imports (sampled every 10 ms):

- `construct cold`: `flow_from_dataframe("lakefs://journey/main/labels.csv",
  "lakefs://journey/main/train")`, labels read at the commit `main` is pinned to, the
  folder listed (pages of 1,000, written to the listing cache), then the first batch
  (which starts listing every folder's presigned addresses ahead of the reads; the
  stage waits for that to finish and counts its calls);
- `construct warm`: the same in a new process with the same listing cache folder;
- `fit epoch`: one uninterrupted epoch of `fit` (a tiny model at 8x8) with
  `rk.BackupAndRestore` and `rk.DataVersionCallback`: images/s; every step's labels
  and pixels are hashed, as the reference stream;
- `fit killed`: the same run in a new process, killed with SIGKILL mid-epoch;
- `fit resumed`: a new process resumes from the backup; it must read exactly the
  reference's remaining steps, reading each of their images once and nothing else;
- `record`: the `.lakefs_ref.yaml` the callback wrote, and the pinned URL it gives back.

S3: `rclone serve s3` over a tree of `--s3` objects in `--s3-folders` folders (the
trees of `bench/scale.py`, cached in `bench/.data/scale`): a serial botocore paginator
keeping the keys (the baseline), then `flow_from_directory` cold (`listing_cache_s`
on, an empty cache folder) and warm (same folder, new process), each through the first
batch. Results: stdout, `bench/results/journey-latest.json` and `.md`.

`--no-fit` stops the lakeFS journey after the start-up stages; with `JOURNEY_PROFILE=DIR`
set, each stage writes its cProfile statistics to `DIR/<stage>-<pid>.prof`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
REPO = "journey"
BATCH = 64
LINKS_PER_SEED = 60_000  # ext4 allows 65,000 links per file


# --------------------------------------------------------------------------- data


def lakefs_names(count: int, folders: int) -> list[tuple[str, str]]:
    """`(train/cKKKK/NNNNNN.jpg, cKKKK)`: `count` files spread evenly over `folders`."""
    return [(f"c{i % folders:04d}/{i // folders:06d}.jpg", f"c{i % folders:04d}")
            for i in range(count)]  # fmt: skip


def serve_lakefs(root: str, count: int, folders: int, data: str) -> None:
    """Child process: a presigning stand-in holding the journey's repository.

    Prints one JSON line (storage options, commit, build timings), then answers each line
    read from stdin with the request counts since the last one (API by route, data reads).
    """
    import lakefs
    import psutil
    from lakefs.client import Client
    from scale import seed_jpegs

    from remote_keras.testing import LakeFSServer
    from remote_keras.testing.lakefs.bulk import import_files

    seeds = seed_jpegs(Path(data) / "seeds", max(8, -(-count // LINKS_PER_SEED)))
    with LakeFSServer(root=os.path.join(root, "data"), presign=True, data_server=True) as server:
        options = server.storage_options
        lakefs.Repository(REPO, client=Client(**options)).create(
            storage_namespace=f"local://{REPO}"
        )
        rows = lakefs_names(count, folders)
        labels = Path(root) / "labels.csv"
        labels.write_text("filename,class\n" + "".join(f"{f},{c}\n" for f, c in rows))
        files = [(f"train/{name}", seeds[i % len(seeds)]) for i, (name, _) in enumerate(rows)]
        files.append(("labels.csv", labels))
        files += [(f"warmup/{c}/0.jpg", seeds[0]) for c in "ab"]  # imports and threads, untimed
        del rows
        started = time.perf_counter()
        commit = import_files(server, REPO, "main", files, f"{count} images")
        import_s = time.perf_counter() - started
        del files
        assert server.api is not None
        with server.api.lock:  # what one listing page costs at this size (sorted once)
            started = time.perf_counter()
            sorted_paths = len(server.api.repos[REPO].commits[commit].tree.paths)
            sort_s = time.perf_counter() - started
        assert sorted_paths == count + 3
        server.reset()
        assert server.data is not None
        server.data.reset()
        print(json.dumps({"options": options, "commit": commit, "import_s": import_s,
                          "sort_s": sort_s, "server_rss_mb": psutil.Process().memory_info().rss
                          / 2**20}), flush=True)  # fmt: skip
        for _ in sys.stdin:
            api, reads = server.reset(), server.data.reset()
            print(json.dumps({"api": dict(api), "reads": sum(reads.values())}), flush=True)


# --------------------------------------------------------------------------- stages


class PeakRSS:
    """Peak resident memory of this process above where it stood at `start()`."""

    def __init__(self) -> None:
        import psutil

        self._process = psutil.Process()
        self.start_rss = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def start(self) -> PeakRSS:
        import gc

        gc.collect()
        self.start_rss = self.peak = self._process.memory_info().rss
        self._thread.start()
        return self

    def added_mb(self) -> float:
        self.peak = max(self.peak, self._process.memory_info().rss)
        return (self.peak - self.start_rss) / 2**20


def _digest(*arrays) -> str:
    import numpy as np

    digest = hashlib.sha256()
    for part in arrays:
        digest.update(np.ascontiguousarray(part).tobytes())
    return digest.hexdigest()[:16]


def lakefs_stage(spec: dict) -> dict:
    """One stage of the lakeFS journey, in this (fresh) process."""
    import keras
    import numpy as np

    import remote_keras as rk
    from remote_keras.storage.lakefs import presign

    stage, options = spec["stage"], spec["options"]
    out: dict = {}
    if stage == "paginator":
        return lakefs_paginator(spec)
    gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=options, progress=False)
    with gen.flow_from_directory(f"lakefs://{REPO}/main/warmup", target_size=(8, 8)) as warmup:
        warmup[0]  # what any iterator imports and starts, outside the measurement
    print("WARMED", flush=True)  # the parent resets the server's counts, then answers
    sys.stdin.readline()
    rss = PeakRSS().start()
    started = time.perf_counter()
    kw = dict(target_size=(8, 8), batch_size=BATCH, class_mode="sparse", seed=7,
              listing_cache_dir=spec["cache"])  # fmt: skip
    if spec.get("labels"):  # the labels CSV, read at the commit `main` is pinned to
        it = gen.flow_from_dataframe(
            f"lakefs://{REPO}/main/labels.csv", f"lakefs://{REPO}/main/train", **kw
        )
        out["table_url"] = it.table_url
    else:
        it = gen.flow_from_directory(f"lakefs://{REPO}/main/train", **kw)
    out["construct_s"] = time.perf_counter() - started
    out["samples"] = it.samples
    out["construct_rss_mb"] = rss.added_mb()
    if stage == "construct":
        started = time.perf_counter()
        x, _ = it[0]
        out["first_batch_s"] = time.perf_counter() - started
        out["startup_s"] = out["construct_s"] + out["first_batch_s"]
        out["first_batch_shape"] = list(x.shape)
        reader = presign._reader_of(it.loader)
        if reader is not None and reader.ahead is not None:
            reader.ahead.ready.wait(600)  # every folder's addresses listed: count them too
            out["presign_listings"] = reader.listings
        out["rss_mb"] = rss.added_mb()
        it.close()
        return out
    keras.utils.set_random_seed(0)
    record = open(spec["record"], "a", buffering=1)  # one line per step: survives SIGKILL

    def write(y, x) -> None:
        record.write(json.dumps([_digest(np.asarray(y)), _digest(np.asarray(x))]) + "\n")

    # Each step's labels and pixels, as the step sees them. On TensorFlow the step stays
    # compiled (a `py_function` inside it); other backends run eagerly (about 3x slower).
    compiled = keras.backend.backend() == "tensorflow"

    class Recording(keras.Sequential):
        def train_step(self, data):
            x, y = data[0], data[1]
            if compiled:
                import tensorflow as tf

                tf.py_function(lambda y, x: write(y.numpy(), x.numpy()), [y, x], [])
            else:
                write(y, x)
            return super().train_step(data)

    classes = len(it.class_indices)
    model = Recording([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                       keras.layers.Dense(classes)])  # fmt: skip
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=not compiled, jit_compile=False)  # fmt: skip
    steps = len(it)
    callbacks: list = [
        rk.BackupAndRestore(spec["backup"], save_freq=spec["save_freq"]),
        rk.DataVersionCallback(it, os.path.join(spec["backup"] + "-record", "data_version.json")),
    ]
    first: list[float] = []

    class Marks(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if not first:
                first.append(time.perf_counter())
            if spec.get("kill_after") is not None and batch == spec["kill_after"]:
                os.kill(os.getpid(), signal.SIGKILL)

    # A 64-bit hash of every path the iterator fetched (to tell re-reads from extras): 8 bytes
    # each, where keeping the paths themselves would add ~150 bytes per image to the RSS measured.
    fetched = array("q")
    fetch = it.engine.fetcher.fetch

    def counting_fetch(paths, executor, stop=None):
        fetched.extend(hash(path) for path in paths)
        return fetch(paths, executor, stop)

    it.engine.fetcher.fetch = counting_fetch
    started = time.perf_counter()
    model.fit(it, epochs=1, callbacks=[*callbacks, Marks()], verbose=0)
    ended = time.perf_counter()
    out["fetched"], out["fetched_distinct"] = len(fetched), len(np.unique(np.asarray(fetched)))
    done = sum(1 for _ in open(spec["record"]))
    out.update(steps_per_epoch=steps, steps_run=done, fit_s=ended - started,
               first_step_s=(first[0] - started) if first else None,
               rss_mb=rss.added_mb())  # fmt: skip
    images = min(it.samples, done * BATCH)
    out["images"] = images
    out["images_per_s"] = images / (ended - started)
    it.close()
    return out


def lakefs_paginator(spec: dict) -> dict:
    """The baseline: the lakeFS SDK's listing, serial, pages of 1,000, keeping the paths."""
    from lakefs.client import Client

    api = Client(**spec["options"]).sdk_client.objects_api
    api.list_objects(REPO, spec["commit"], prefix="warmup/")  # imports, connection: untimed
    rss = PeakRSS().start()
    started = time.perf_counter()
    paths: list[str] = []
    after = ""
    while True:
        page = api.list_objects(REPO, spec["commit"], prefix="train/", after=after, amount=1000)
        paths += [r.path for r in page.results]
        if not page.pagination.has_more:
            break
        after = page.pagination.next_offset
    return {"samples": len(paths), "startup_s": time.perf_counter() - started,
            "rss_mb": rss.added_mb()}  # fmt: skip


def s3_stage(spec: dict) -> dict:
    """Construction and first batch from S3 (`kind` "directory"), or the paginator baseline."""
    from scale import PeakRSS as ScalePeak
    from scale import _paginator

    if spec["kind"] == "paginator":
        return _paginator(dict(spec, check=False), {})
    import remote_keras as rk

    gen = rk.ImageDataGenerator(storage_options=spec["options"], progress=False)
    kw = dict(target_size=(8, 8), batch_size=BATCH, shuffle=False, listing_cache_s=3600,
              listing_cache_dir=spec["cache"])  # fmt: skip
    gen.flow_from_directory(f"s3://bench/{spec['warmup']}", **kw).close()  # imports, clients
    _counts(spec["proxy"])
    out: dict = {}
    with ScalePeak() as rss:
        started = time.perf_counter()
        it = gen.flow_from_directory(f"s3://bench/{spec['prefix']}", **kw)
        out["construct_s"] = time.perf_counter() - started
        out["requests"] = _counts(spec["proxy"])
        started = time.perf_counter()
        it[len(it) // 2]
        out["first_batch_s"] = time.perf_counter() - started
    out["startup_s"] = out["construct_s"] + out["first_batch_s"]
    out["rss_added_mb"], out["samples"] = rss.added_mb, it.samples
    it.close()
    return out


def _counts(proxy: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(proxy + "/__proxy__/counts?reset=1", timeout=30) as response:
        return json.load(response)


# --------------------------------------------------------------------------- parent


def run_stage(spec: dict, env: dict | None = None, warmed=None) -> tuple[dict, int]:
    """Runs a stage in a fresh process; returns its JSON (empty if killed) and exit status.

    `warmed()` is called when the stage says it has warmed up (before it measures).
    """
    command = [sys.executable, __file__, "--stage", json.dumps(spec)]
    environment = dict(os.environ, **(env or {}))
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(HERE.parent), *filter(None, [environment.get("PYTHONPATH")])]
    )
    with tempfile.TemporaryFile("w+") as errors, subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True,
        env=environment,
    ) as child:  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        lines = []
        for line in child.stdout:
            if line.strip() == "WARMED":
                if warmed is not None:
                    warmed()
                child.stdin.write("\n")
                child.stdin.flush()
            else:
                lines.append(line)
        code = child.wait()
        errors.seek(0)
        if code not in (0, -signal.SIGKILL) or (code == 0 and not lines):
            raise RuntimeError(f"stage failed ({code}):\n{errors.read()[-4000:]}")
    return (json.loads(lines[-1]) if code == 0 else {}), code


class Journey:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rows: list[dict] = []
        self.checks: dict[str, bool] = {}
        self.meta: dict = {}

    def row(self, where: str, stage: str, **values) -> None:
        self.rows.append(dict(where=where, stage=stage, **values))
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in values.items())
        print(f"  {where:<14} {stage:<18} {shown}", flush=True)

    def lakefs(self) -> None:
        args, n, folders = self.args, self.args.lakefs, self.args.folders
        Path(args.data).mkdir(parents=True, exist_ok=True)  # blobs hard-link to its seeds
        with tempfile.TemporaryDirectory(prefix="journey-", dir=args.data) as tmp:
            started = time.perf_counter()
            server = subprocess.Popen(
                [sys.executable, __file__, "--serve-lakefs", tmp, "--lakefs", str(n),
                 "--folders", str(folders), "--data", args.data],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                env=dict(os.environ, PYTHONPATH=str(HERE.parent)),
            )  # fmt: skip
            assert server.stdin is not None and server.stdout is not None
            try:
                info = json.loads(server.stdout.readline())
                self.row("lakefs", "build repository", objects=n, folders=folders,
                         wall_s=time.perf_counter() - started, import_commit_s=info["import_s"],
                         sort_paths_s=info["sort_s"], server_rss_mb=info["server_rss_mb"])  # fmt: skip

                def counts() -> dict:
                    server.stdin.write("\n")  # type: ignore[union-attr]
                    server.stdin.flush()  # type: ignore[union-attr]
                    return json.loads(server.stdout.readline())  # type: ignore[union-attr]

                self._lakefs_stages(tmp, info["options"], counts, info["commit"])
            finally:
                server.stdin.close()
                server.wait(120)

    def _lakefs_stages(self, tmp: str, options: dict, counts, commit: str) -> None:
        n, folders = self.args.lakefs, self.args.folders
        base = {"options": options, "cache": os.path.join(tmp, "listings")}
        env = {"KERAS_BACKEND": "numpy"}
        base_rss = self._lakefs_paginator(base, env, counts, commit)
        for name in ("construct cold", "construct warm"):
            out, _ = run_stage(dict(base, stage="construct"), env, counts)
            seen = counts()
            calls = sum(seen["api"].values())
            self.row("lakefs", name, samples=out["samples"], construct_s=out["construct_s"],
                     first_batch_s=out["first_batch_s"], startup_s=out["startup_s"],
                     api_calls=calls, presign_listings=out.get("presign_listings"),
                     reads=seen["reads"], rss_mb=out["rss_mb"],
                     rss_vs_paginator=out["rss_mb"] / base_rss, api=seen["api"])  # fmt: skip
            self.checks[f"{name}: {n} samples"] = out["samples"] == n
            if name == "construct cold":
                # The target is N/1000 + folders; the listing's parallel ranges (at most
                # `listers.CONCURRENCY`) each cost up to one more request.
                bound = n / 1000 + folders + 32 + 4
                self.checks[f"cold: API calls {calls} <= N/1000 + folders + 36 = {bound:.0f}"] = (
                    calls <= bound
                )
            else:
                lists = sum(v for k, v in seen["api"].items() if k.endswith("/objects/ls"))
                # The warm start lists only presigned addresses, one call per folder.
                self.checks[f"warm: folder listings {lists} == folders"] = lists == folders
        out, _ = run_stage(dict(base, stage="construct", labels=True), env, counts)
        seen = counts()
        self.row("lakefs", "labels CSV", samples=out["samples"], construct_s=out["construct_s"],
                 first_batch_s=out["first_batch_s"], startup_s=out["startup_s"],
                 api_calls=sum(seen["api"].values()), reads=seen["reads"], rss_mb=out["rss_mb"],
                 api=seen["api"])  # fmt: skip
        self.checks["labels CSV read at the images' commit"] = (
            out["table_url"] == f"lakefs://{REPO}/{commit}/labels.csv" and out["samples"] == n
        )
        if not self.args.fit:
            return
        steps = -(-n // BATCH)
        save_freq = max(1, steps // 8)
        fit = dict(base, stage="fit", save_freq=save_freq, backup=os.path.join(tmp, "ref"),
                   record=os.path.join(tmp, "reference.jsonl"))  # fmt: skip
        env = {"KERAS_BACKEND": self.args.backend}
        out, _ = run_stage(fit, env, counts)
        seen = counts()
        self.row("lakefs", "fit epoch", images=out["images"], fit_s=out["fit_s"],
                 images_per_s=out["images_per_s"], api_calls=sum(seen["api"].values()),
                 reads=seen["reads"], rss_mb=out["rss_mb"],
                 rss_vs_paginator=out["rss_mb"] / base_rss)  # fmt: skip
        self.checks["fit: every image read once"] = seen["reads"] == n
        kill_after = steps // 2
        crash = dict(fit, backup=os.path.join(tmp, "backup"), kill_after=kill_after,
                     record=os.path.join(tmp, "killed.jsonl"))  # fmt: skip
        _, rc = run_stage(crash, env, counts)
        seen = counts()
        killed = _lines(crash["record"])
        self.row("lakefs", "fit killed", exit=rc, steps_run=len(killed), reads=seen["reads"],
                 api_calls=sum(seen["api"].values()))  # fmt: skip
        self.checks["killed with SIGKILL mid-epoch"] = rc == -signal.SIGKILL
        restart = (kill_after + 1) // save_freq * save_freq  # the last backup's step
        resumed_spec = dict(crash, kill_after=None, record=os.path.join(tmp, "resumed.jsonl"))
        out, _ = run_stage(resumed_spec, env, counts)
        seen = counts()
        reference, resumed = _lines(fit["record"]), _lines(resumed_spec["record"])
        expected_reads = min(n, steps * BATCH) - restart * BATCH
        self.row("lakefs", "fit resumed", restart_step=restart, steps_run=len(resumed),
                 construct_s=out["construct_s"], first_step_s=out["first_step_s"],
                 images_per_s=out["images_per_s"], reads=seen["reads"],
                 fetched=out["fetched"], fetched_distinct=out["fetched_distinct"],
                 api_calls=sum(seen["api"].values()), rss_mb=out["rss_mb"])  # fmt: skip
        self.checks["killed run read the reference's steps"] = killed == reference[: len(killed)]
        self.checks["resumed run continues the stream"] = resumed == reference[restart:]
        # Each image of the remaining steps once; a batch more has been seen (an open issue:
        # the extra reads are distinct images the resumed run does not train on).
        self.checks[f"resumed run read its {expected_reads} images once (+ at most a batch)"] = (
            expected_reads <= seen["reads"] <= expected_reads + BATCH
            and out["fetched"] == out["fetched_distinct"]
        )
        self._record(resumed_spec["backup"] + "-record", commit)

    def _lakefs_paginator(self, base: dict, env: dict, counts, commit: str) -> float:
        out, _ = run_stage(dict(base, stage="paginator", commit=commit), env)
        seen = counts()
        self.row("lakefs", "paginator", samples=out["samples"], startup_s=out["startup_s"],
                 api_calls=sum(seen["api"].values()), rss_mb=out["rss_mb"])  # fmt: skip
        return max(out["rss_mb"], 0.1)

    def _record(self, backup: str, commit: str) -> None:
        import remote_keras as rk

        found = sorted(Path(backup).rglob(".lakefs_ref.yaml"))
        text = found[0].read_text() if found else ""
        urls = rk.pinned_urls(str(found[0])) if found else []
        self.row("lakefs", "record", files=[str(p.relative_to(backup)) for p in found],
                 lakefs_ref_yaml=text.strip(), pinned_urls=urls)  # fmt: skip
        self.checks["record pins the commit"] = f"lakefs://{REPO}/{commit}/train/" in urls

    def s3(self) -> None:
        from scale import build_tree

        from remote_keras.testing import CountingProxy, S3Server

        args = self.args
        root = Path(args.data) / "s3root"
        started = time.perf_counter()
        trees = {size: build_tree(Path(args.data), root / "bench" / f"scale-{size}", size)
                 for size in (20, args.s3)}  # fmt: skip
        self.row("s3", "build tree", objects=args.s3, wall_s=time.perf_counter() - started)
        with tempfile.TemporaryDirectory(prefix="journey-s3-") as tmp, S3Server(root) as s3:
            with CountingProxy(s3.port) as proxy:
                options = s3.storage_options
                options["client_kwargs"] = dict(
                    options["client_kwargs"], endpoint_url=proxy.endpoint_url
                )
                spec = {"options": options, "proxy": proxy.endpoint_url, "count": args.s3,
                        "prefix": f"scale-{args.s3}", "warmup": "scale-20",
                        "cache": os.path.join(tmp, "listings")}  # fmt: skip
                env = {"KERAS_BACKEND": "numpy"}
                base, _ = run_stage(dict(spec, kind="paginator"), env)
                self.row("s3", "paginator", samples=base["samples"], startup_s=base["startup_s"],
                         lists=base["requests"].get("LIST", 0), rss_mb=base["rss_added_mb"])  # fmt: skip
                for name in ("construct cold", "construct warm"):
                    out, _ = run_stage(dict(spec, kind="directory"), env)
                    self.row("s3", name, samples=out["samples"], construct_s=out["construct_s"],
                             first_batch_s=out["first_batch_s"],
                             vs_paginator=out["construct_s"] / base["startup_s"],
                             lists=out["requests"].get("LIST", 0), rss_mb=out["rss_added_mb"],
                             rss_vs_paginator=out["rss_added_mb"] / base["rss_added_mb"])  # fmt: skip
                    self.checks[f"s3 {name}: {args.s3} samples"] = out["samples"] == len(
                        trees[args.s3]
                    )
                    if name == "construct warm":
                        self.checks["s3 warm: no LIST"] = out["requests"].get("LIST", 0) == 0


def _lines(path: str) -> list:
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def table(rows: list[dict]) -> str:
    keys = ["objects", "samples", "construct_s", "first_batch_s", "startup_s", "images_per_s",
            "api_calls", "lists", "reads", "rss_mb", "vs_paginator", "rss_vs_paginator"]  # fmt: skip
    lines = ["| where | stage | " + " | ".join(keys) + " |", "|---|---|" + "---:|" * len(keys)]
    for r in rows:
        cells = [_fmt(r[k]) if r.get(k) is not None else "-" for k in keys]
        lines.append(f"| {r['where']} | {r['stage']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="400k lakeFS, 1M S3 (about an hour)")
    parser.add_argument("--smoke", action="store_true", help="a few thousand objects")
    parser.add_argument("--lakefs", type=int, default=20_000, help="lakeFS images")
    parser.add_argument("--folders", type=int, default=100, help="lakeFS class folders")
    parser.add_argument("--s3", type=int, default=100_000, help="S3 objects (10 folders)")
    parser.add_argument("--no-s3", dest="with_s3", action="store_false")
    parser.add_argument("--no-lakefs", dest="with_lakefs", action="store_false")
    parser.add_argument("--no-fit", dest="fit", action="store_false",
                        help="lakeFS: start-up stages only (no fit, kill, resume)")  # fmt: skip
    parser.add_argument("--backend", default=os.environ.get("KERAS_BACKEND", "tensorflow"))
    parser.add_argument("--data", default=str(HERE / ".data" / "scale"))
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--serve-lakefs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage:
        spec = json.loads(args.stage)
        stage = lakefs_stage if "stage" in spec else s3_stage
        profile_dir = os.environ.get("JOURNEY_PROFILE")  # a folder: one cProfile file per stage
        if profile_dir:
            import cProfile

            profiler = cProfile.Profile()
            out = profiler.runcall(stage, spec)
            name = f"{spec.get('stage', spec.get('kind'))}-{os.getpid()}.prof"
            profiler.dump_stats(os.path.join(profile_dir, name))
        else:
            out = stage(spec)
        print(json.dumps(out), flush=True)
        return 0
    if args.serve_lakefs:
        serve_lakefs(args.serve_lakefs, args.lakefs, args.folders, args.data)
        return 0
    if args.full:
        args.lakefs, args.folders, args.s3 = 400_000, 1_000, 1_000_000
    if args.smoke:
        args.lakefs, args.folders, args.s3 = 2_000, 20, 5_000
    journey = Journey(args)
    started = time.perf_counter()
    print(f"Journey: lakeFS {args.lakefs:,} images in {args.folders:,} folders, "
          f"S3 {args.s3:,} objects", flush=True)  # fmt: skip
    if args.with_lakefs:
        journey.lakefs()
    if args.with_s3:
        journey.s3()
    report = {
        "meta": {
            "when": time.strftime("%Y-%m-%d %H:%M:%S"),
            "cpus": os.cpu_count(),
            "command": " ".join(["python", "bench/journey.py", *(argv or sys.argv[1:])]),
            "python": platform.python_version(),
            "wall_s": time.perf_counter() - started,
            "runs": 1,
        },  # fmt: skip
        "rows": journey.rows,
        "checks": journey.checks,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "journey-smoke" if args.smoke else "journey-latest"
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    text = table(journey.rows)
    (out / f"{name}.md").write_text(text + "\n")
    print("\n" + text + "\n")
    print("\n".join(f"check: {k}: {'ok' if ok else 'FAILED'}" for k, ok in journey.checks.items()))
    print(f"\nWrote {out / name}.json and .md ({report['meta']['wall_s']:.0f} s)")
    return 0 if all(journey.checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
