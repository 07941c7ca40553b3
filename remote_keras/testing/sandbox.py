"""The docs' world on this machine: the buckets and lakeFS repository the README and guide read.

`python -m remote_keras.testing.sandbox` (or `make sandbox`) starts a real S3 server
(`rclone serve s3`) and the lakeFS stand-in on 127.0.0.1, writes the sample images every example
names into them, prints the environment variables to set in the shell that runs the examples,
and serves until Ctrl-C. The docs' tests (`tests/test_readme.py`) run every page against the
same `Sandbox`, so what the command serves is what the examples were tested on:

- S3: bucket `my-bucket` (`train/`, `images/`, `labels.csv`) and bucket `bucket` (`train/`);
- lakeFS: repository `images`, branch `main` (`train/`, `labels.csv`), one commit;
- a working folder holding `my-store/images/`, the custom-loader example's store.

Each tree holds 3 classes of 4 small images (`remote_keras.testing.data.write_class_tree`), so
an example's `fit` takes about a second. The servers' keys are made for this run only.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from typing_extensions import Self

from remote_keras.testing.data import write_class_tree
from remote_keras.testing.lakefs import LakeFSServer
from remote_keras.testing.s3 import S3Server

PER_CLASS = 4
S3_FOLDERS = (("my-bucket", "train"), ("my-bucket", "images"), ("bucket", "train"))
LAKEFS_REPOSITORY = "images"


class Sandbox:
    """The S3 server and lakeFS stand-in with the docs' sample data, and their settings.

    Args:
        root: A folder for the servers' data and the working folder (default: a temporary one,
            removed on `close()`).

    Attributes:
        workdir: The folder to run the examples from (it holds `my-store/images/`).
        environment: The variables that point S3 and lakeFS clients at the servers (and keep
            AWS configuration files and the instance-metadata service out of it).

    Example:

    ```python
    with Sandbox() as sandbox:
        os.environ.update(sandbox.environment)
        os.chdir(sandbox.workdir)
    ```
    """

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self._temporary = (
            tempfile.TemporaryDirectory(prefix="rk-sandbox-") if root is None else None
        )
        self.root = Path(root if root is not None else self._temporary.name)  # type: ignore[union-attr]
        self.workdir = self.root / "work"
        self.s3: S3Server | None = None
        self.lakefs: LakeFSServer | None = None
        self.environment: dict[str, str] = {}

    def start(self) -> Self:
        """Writes the sample data, starts both servers and fills `environment`."""
        labels = write_class_tree(self.root / "tree", per_class=PER_CLASS)[["filename", "class"]]
        for bucket, folder in S3_FOLDERS:
            write_class_tree(self.root / "s3" / bucket / folder, per_class=PER_CLASS)
        labels.to_csv(self.root / "s3" / "my-bucket" / "labels.csv", index=False)
        write_class_tree(self.workdir / "my-store" / "images", per_class=PER_CLASS)
        try:
            self.s3 = S3Server(self.root / "s3", buckets=("my-bucket", "bucket")).start()
            self.lakefs = LakeFSServer(self.root / "lakefs").start()
            _commit_tree(self.lakefs, self.root / "tree", labels.to_csv(index=False).encode())
        except BaseException:
            self.close()
            raise
        self.environment = {
            "AWS_ACCESS_KEY_ID": self.s3.access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3.secret_key,
            "AWS_ENDPOINT_URL": self.s3.endpoint_url,
            "AWS_CONFIG_FILE": str(self.root / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.root / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "LAKECTL_SERVER_ENDPOINT_URL": self.lakefs.endpoint_url,
            "LAKECTL_CREDENTIALS_ACCESS_KEY_ID": self.lakefs.access_key_id,
            "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY": self.lakefs.secret_access_key,
            "LAKECTL_CONFIG_FILE": str(self.root / "no-lakectl.yaml"),
        }
        return self

    def close(self) -> None:
        """Stops both servers and removes a temporary root."""
        for server in (self.lakefs, self.s3):
            if server is not None:
                server.close()
        if self._temporary is not None:
            self._temporary.cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _commit_tree(server: LakeFSServer, tree: Path, labels: bytes) -> None:
    """Creates the repository and commits `tree` under `train/`, and `labels.csv`, to `main`."""
    try:
        import lakefs
        from lakefs.client import Client
        from lakefs_spec import LakeFSFileSystem
    except ImportError as error:
        raise ImportError(
            'The sandbox fills lakeFS with lakefs-spec: pip install ".[s3,lakefs]" in a clone '
            "of remote_keras"
        ) from error
    client = Client(**server.storage_options)
    repository = lakefs.Repository(LAKEFS_REPOSITORY, client=client)
    repository.create(storage_namespace=f"local://{LAKEFS_REPOSITORY}")
    fs = LakeFSFileSystem(**server.storage_options)
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        fs.put_file(str(path), f"lakefs://{LAKEFS_REPOSITORY}/main/train/{path.relative_to(tree)}")
    fs.pipe(f"lakefs://{LAKEFS_REPOSITORY}/main/labels.csv", labels)
    lakefs.Branch(LAKEFS_REPOSITORY, "main", client=client).commit("sample images")


def main(argv: list[str] | None = None) -> None:
    """Serves the sandbox until SIGINT or SIGTERM, after printing how to use it."""
    parser = argparse.ArgumentParser(
        description="Local S3 and lakeFS servers holding the docs' sample data."
    )
    parser.add_argument("--root", help="folder for the data (default: a temporary one)")
    args = parser.parse_args(argv)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    with Sandbox(args.root) as sandbox:
        if sandbox.s3 is None or sandbox.lakefs is None:  # for the type checker: start() set both
            raise RuntimeError("the sandbox did not start")
        print(
            f"S3 ({sandbox.s3.endpoint_url}): s3://my-bucket (train/, images/, labels.csv), "
            f"s3://bucket (train/)\n"
            f"lakeFS stand-in ({sandbox.lakefs.endpoint_url}): lakefs://images/main "
            f"(train/, labels.csv)\n"
            "In the shell that runs the examples (the keys are this run's own):",
            flush=True,
        )
        for name, value in sandbox.environment.items():
            print(f"export {name}={shlex.quote(value)}")
        print(f"cd {sandbox.workdir}\nServing until Ctrl-C.", flush=True)
        done.wait()
    print("Stopped.", file=sys.stderr)


if __name__ == "__main__":
    main()
