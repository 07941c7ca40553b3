"""Peak RSS added at construction, before and after a change, against a serial paginator.

`python bench/memory_before_after.py --before /tmp/before --size 300000` (with
`mkdir /tmp/before && git archive <old commit> remote_keras | tar -x -C /tmp/before`):
one run each of the paginator (keys kept), `flow_from_directory` of this checkout and
of `--before`, each in a fresh process after a warm-up, on the `bench/scale.py` tree of
`--size` objects in 10 folders (`rclone serve s3`, no added latency).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scale import BUCKET, build_tree, run_probe  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=300_000)
    parser.add_argument("--before", required=True)
    parser.add_argument("--data", default=str(HERE / ".data" / "scale"))
    args = parser.parse_args()
    from remote_keras.testing import CountingProxy, S3Server

    root = Path(args.data) / "s3root"
    (root / BUCKET).mkdir(parents=True, exist_ok=True)
    for size in (20, args.size):
        build_tree(Path(args.data), root / BUCKET / f"scale-{size}", size)
    with S3Server(root) as s3, CountingProxy(s3.port) as proxy:
        options = s3.storage_options
        options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=proxy.endpoint_url)
        spec = {"options": options, "proxy": proxy.endpoint_url, "prefix": f"scale-{args.size}",
                "count": args.size, "warmup": "scale-20", "check": False}  # fmt: skip
        rows = [
            ("paginator (keys kept)", run_probe(dict(spec, kind="paginator"))),
            ("flow_from_directory, after", run_probe(dict(spec, kind="directory"))),
            (
                "flow_from_directory, before",
                run_probe(dict(spec, kind="directory", before=args.before)),
            ),  # fmt: skip
            ("listing only", run_probe(dict(spec, kind="listing"))),
        ]
    base = rows[0][1]["rss_added_mb"]
    print(f"| {args.size:,} objects | peak RSS added MB | vs paginator | start-up s |")
    print("|---|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['rss_added_mb']:.1f} | {r['rss_added_mb'] / base:.2f}x "
              f"| {r['startup_s']:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
