"""Every code block of README.md and the guide runs as written, against local servers, so the
docs cannot drift.

The README and then the guide's pages (docs/guide/*.md, in the site's order) are read top to bottom
as a user would read them: every ```python block runs, in order (a later block uses what an earlier
one defined, e.g. the README's first `model`), with a temporary folder as the working directory.
The README's blocks share one namespace, and each page continues from the README's in a copy of
its own. Nothing in a block is rewritten before it runs; tracebacks point at the file's
own lines. Blocks fenced ```bash, ```diff or plain ``` (the layout
tree) are not Python and are not run; a fence of any other language fails
`test_every_fence_is_known`, so no example can slip past unrun.

What the blocks read:

- S3: a real `rclone serve s3` (`remote_keras.testing.S3Server`) with the buckets the README
  names: `my-bucket` (`train/`, `images/`, `labels.csv`) and `bucket` (`train/`). The code gets
  credentials and endpoint only from the environment, as a user's code would:
  `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_ENDPOINT_URL` (AWS config files and the
  instance-metadata service are turned off, so nothing else is consulted).
- lakeFS: the stand-in (`remote_keras.testing.LakeFSServer`) with a repository `images` whose
  `main` holds `train/` and `labels.csv` (paths relative to `train/`), committed, configured
  only through `LAKECTL_SERVER_ENDPOINT_URL`, `LAKECTL_CREDENTIALS_ACCESS_KEY_ID` and
  `LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY`.
- The custom loader's store: the folder `my-store/` (holding `images/`) of the working directory.

All hold the same tiny class-folder tree (`tests.conftest.write_tree`, 3 classes of 4 images of
about 20x24 pixels), so the README's 10-epoch fits take about a second each.

Interactive (`>>>`) blocks: each statement after `>>>` runs. Where the README shows a repr of the
form `Name(field=..., ...)`, the actual repr must have the same name and the same field names in
the same order; the values (measurements from another run) are not compared. Other output shown
after a `>>>` line is not compared.

Two lists, keyed by a block's first line, say where a block departs from this; each entry must
match exactly one block (`test_lists_name_existing_blocks`), and every other ```python block runs:

- `IN_OWN_PROCESS`: runs in a fresh Python with the given environment (e.g. `KERAS_BACKEND=jax`),
  after the README's first example, which defines the names it uses; this is the only change.
- `NOT_RUN`: not run, with the reason (the test is skipped, and says why). Keep it short.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import lakefs
import pytest
from lakefs.client import Client
from lakefs_spec import LakeFSFileSystem

from remote_keras.keras3.iterators import RemoteBatchMixin
from remote_keras.testing import LakeFSServer, S3Server
from tests.conftest import _our_threads, write_tree

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOT_PYTHON = {"bash", "diff", ""}  # fence languages that are not run

# First line of a README block -> environment of the fresh process it runs in, after the
# README's first example (which defines `keras`, `ImageDataGenerator` and `model`), and why.
IN_OWN_PROCESS = {
    "keras.distribution.set_distribution(": (
        {"KERAS_BACKEND": "jax"},
        "the JAX backend is chosen per process, before Keras is imported; runs as one process, "
        "without jax.distributed.initialize(...), so it reads every file: "
        "tests/test_sharding.py::test_two_jax_processes_fit_on_disjoint_shards_of_s3 checks the "
        "split between two processes",
    ),
}

# First line of a README block -> why it is not run. Keep this list short.
NOT_RUN = {
    "import tensorflow as tf": (
        "needs a TF_CONFIG cluster of worker processes and the strategy created at program "
        "start-up; "
        "tests/test_sharding.py::test_two_multi_worker_mirrored_workers_read_disjoint_shards_of_s3 "
        "runs this loop in two processes"
    ),
    "import json, tempfile": (
        "continues the loop above, in its TF_CONFIG cluster; tests/mwms_run.py runs this recipe "
        "in two processes, killed and resumed (tests/test_multiprocess.py)"
    ),
}


def documents() -> list[Path]:
    """README.md, then every guide page: those in mkdocs.yml's nav in its order, then the rest."""
    nav = re.findall(r"\bguide/([\w.-]+\.md)", (ROOT / "mkdocs.yml").read_text())
    pages = sorted((ROOT / "docs" / "guide").glob("*.md"))
    order = {name: i for i, name in enumerate(nav)}
    return [README, *sorted(pages, key=lambda page: (order.get(page.name, len(order)), page.name))]


@dataclasses.dataclass(frozen=True)
class Block:
    id: str
    lang: str
    path: Path  # the file holding the block
    line: int  # line number of the block's first line of code in that file
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.code.splitlines() if line.strip()), "")

    @property
    def interactive(self) -> bool:
        return self.first_line.startswith(">>> ")

    @property
    def not_run_reason(self) -> str | None:
        return _listed(NOT_RUN, self.first_line)

    @property
    def own_process(self) -> tuple[dict[str, str], str] | None:
        return _listed(IN_OWN_PROCESS, self.first_line)


def _listed(table: dict, first_line: str):
    found = [value for start, value in table.items() if first_line.startswith(start)]
    return found[0] if found else None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def doc_blocks(path: Path) -> list[Block]:
    """All fenced blocks of a file; Python ones named `<file>-<section>-<n>` (n-th in section)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, section, counts, i = [], "top", Counter(), 0
    stem = _slug(path.stem)
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\S*)\s*$", lines[i])  # indented too (inside a list item)
        heading = re.match(r"^#{1,6} (.+)$", lines[i])
        if heading:
            section = _slug(heading.group(1))
        elif fence:
            indent, lang = fence.groups()
            closing = indent + "```"
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(closing)), None)
            assert end is not None, f"{path.relative_to(ROOT)}:{i + 1}: fence never closed"
            code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
            if lang == "python":
                counts[section] += 1
                name = f"{stem}-{section}-{counts[section]}"
            else:
                name = f"{stem}-{section}-{lang or 'text'}@{i + 1}"
            blocks.append(Block(name, lang, path, i + 2, code))
            i = end
        i += 1
    return blocks


BLOCKS = [block for path in documents() for block in doc_blocks(path)]
PYTHON_BLOCKS = [b for b in BLOCKS if b.lang == "python"]

_FIELD = re.compile(r"(?:^|,)\s*(\w+)=")


def repr_shape(text: str) -> tuple[str, list[str]] | None:
    """`("Name", [field, ...])` of a `Name(field=..., ...)` repr, or `None` for other text."""
    match = re.fullmatch(r"\s*(\w+)\((.*)\)\s*", text, flags=re.S)
    return (match.group(1), _FIELD.findall(match.group(2))) if match else None


class ReadmeSession:
    """Runs the docs' blocks in order, recording each block's outcome.

    The README's blocks share one namespace; each guide page continues from it in a namespace
    of its own (a copy of the README's, made when the page's first block runs), so a page may
    define `model` or `train` its own way without changing what the next page reads.
    """

    def __init__(self) -> None:
        self.readme: dict = {"__name__": "__readme__"}
        self.pages: dict[Path, dict] = {}
        self.outcome: dict[str, BaseException | None] = {}

    def namespace(self, block: Block) -> dict:
        if block.path == README:
            return self.readme
        return self.pages.setdefault(block.path, dict(self.readme))

    def run_through(self, block: Block) -> None:
        """Runs the blocks `block` continues from that have not run yet (e.g. under `-k`): the
        README's and its own page's before it; then `block`."""
        for earlier in PYTHON_BLOCKS[: PYTHON_BLOCKS.index(block)]:
            if earlier.path not in (README, block.path):
                continue
            if earlier.id not in self.outcome and earlier.not_run_reason is None:
                with contextlib.suppress(Exception):  # recorded; its own test reports it
                    self.run(earlier)
        self.run(block)

    def run(self, block: Block) -> None:
        try:
            if block.own_process is not None:
                run_in_own_process([PYTHON_BLOCKS[0], block], block.own_process[0])
            elif block.interactive:
                self._run_interactive(block)
            else:
                source = "\n" * (block.line - 1) + block.code  # tracebacks show the file's lines
                exec(compile(source, str(block.path), "exec"), self.namespace(block))
        except BaseException as exc:
            self.outcome[block.id] = exc
            raise
        self.outcome[block.id] = None

    def _run_interactive(self, block: Block) -> None:
        namespace = self.namespace(block)
        chunks: list[tuple[int, str, list[str]]] = []  # (line, statement, expected output)
        for offset, line in enumerate(block.code.splitlines()):
            if line.startswith(">>> "):
                chunks.append((block.line + offset, line[4:], []))
            elif line.startswith("... ") and chunks:
                number, statement, expected = chunks[-1]
                chunks[-1] = (number, statement + "\n" + line[4:], expected)
            elif chunks:
                chunks[-1][2].append(line)
        for number, statement, expected in chunks:
            source = "\n" * (number - 1) + statement
            try:
                code = compile(source, str(block.path), "eval")
            except SyntaxError:
                exec(compile(source, str(block.path), "exec"), namespace)
                continue
            shown = " ".join(line.strip() for line in expected)
            wanted = repr_shape(shown)
            if wanted is not None:
                actual = repr(eval(code, namespace))
                assert repr_shape(actual) == wanted, (
                    f"{block.path.relative_to(ROOT)}:{number}: `{statement}` shows\n  {shown}\n"
                    f"but is now\n  {actual}"
                )
            else:
                eval(code, namespace)

    def close(self) -> None:
        """Closes every iterator still alive, then forgets the namespaces.

        The README leaves most iterators open, as a script may. Those `fit` used stay reachable
        after the namespace is gone (TensorFlow's `Dataset.from_generator` registry holds Keras's
        adapter), so garbage collection would not stop their threads before the check below.
        """
        for namespace in (self.readme, *self.pages.values()):
            namespace.clear()
        self.outcome.clear()  # tracebacks hold the frames of the blocks that failed
        gc.collect()
        for value in gc.get_objects():
            if isinstance(value, RemoteBatchMixin):
                value.close()


# Runs blocks, given as JSON `[[path, line, code], ...]`, in one namespace.
_RUNNER = """
import json, sys
blocks = json.loads(sys.argv[1])
namespace = {"__name__": "__readme__"}
for path, line, code in blocks:
    exec(compile("\\n" * (line - 1) + code, path, "exec"), namespace)
"""


def run_in_own_process(blocks: list[Block], env: dict[str, str]) -> None:
    """Runs `blocks` in order in a fresh Python, with this environment updated by `env`."""
    argv = [
        sys.executable,
        "-c",
        _RUNNER,
        json.dumps([[str(b.path), b.line, b.code] for b in blocks]),
    ]
    done = subprocess.run(
        argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{[b.id for b in blocks]} under {env}:\n{done.stderr[-4000:]}"


def _put_tree_in_lakefs(server: LakeFSServer, tree: Path, repository: str, labels: bytes) -> None:
    client = Client(**server.storage_options)
    lakefs.Repository(repository, client=client).create(storage_namespace=f"local://{repository}")
    fs = LakeFSFileSystem(**server.storage_options)
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        fs.put_file(str(path), f"lakefs://{repository}/main/train/{path.relative_to(tree)}")
    fs.pipe(f"lakefs://{repository}/main/labels.csv", labels)
    lakefs.Branch(repository, "main", client=client).commit("images")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """The README's world: servers, buckets, environment, working directory; one namespace."""
    import s3fs

    work = tmp_path_factory.mktemp("readme")
    tree = work / "tree"
    df = write_tree(tree, per_class=4)
    s3_root, cwd = work / "s3", work / "cwd"
    for bucket, folder in (("my-bucket", "train"), ("my-bucket", "images"), ("bucket", "train")):
        write_tree(s3_root / bucket / folder, per_class=4)
    df[["filename", "class"]].to_csv(s3_root / "my-bucket" / "labels.csv", index=False)
    write_tree(cwd / "my-store" / "images", per_class=4)

    with (
        S3Server(root=s3_root, buckets=("my-bucket", "bucket")) as s3,
        LakeFSServer() as lakefs_server,
        pytest.MonkeyPatch.context() as mp,
    ):
        labels = df[["filename", "class"]].to_csv(index=False).encode()
        _put_tree_in_lakefs(lakefs_server, tree, "images", labels)
        for name in list(os.environ):
            if name.startswith(("AWS_", "LAKECTL_")):
                mp.delenv(name)
        mp.setenv("AWS_ACCESS_KEY_ID", s3.access_key)
        mp.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_key)
        mp.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
        mp.setenv("AWS_CONFIG_FILE", str(work / "no-aws-config"))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(work / "no-aws-credentials"))
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("LAKECTL_SERVER_ENDPOINT_URL", lakefs_server.endpoint_url)
        mp.setenv("LAKECTL_CREDENTIALS_ACCESS_KEY_ID", lakefs_server.access_key_id)
        mp.setenv("LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY", lakefs_server.secret_access_key)
        mp.setenv("LAKECTL_CONFIG_FILE", str(work / "no-lakectl.yaml"))
        mp.chdir(cwd)
        caches = (s3fs.S3FileSystem, LakeFSFileSystem)
        for cls in caches:  # no filesystem made earlier, with other settings, is reused
            cls.clear_instance_cache()
        readme = ReadmeSession()
        try:
            yield readme
        finally:
            readme.close()
            for cls in caches:
                cls.clear_instance_cache()
            for _ in range(50):
                if not _our_threads():
                    break
                threading.Event().wait(0.1)
            assert not _our_threads(), f"threads left behind: {_our_threads()}"


@pytest.fixture
def no_leaked_threads():
    """Replaces conftest's per-test check: the README's iterators live from block to block.

    `session` checks for leftover threads once, after the last block.
    """
    yield


def test_every_fence_is_known():
    unknown = [(b.id, b.line - 1, b.lang) for b in BLOCKS if b.lang not in NOT_PYTHON | {"python"}]
    assert not unknown, (
        f"README fences of unknown language (run them or add to NOT_PYTHON): {unknown}"
    )
    assert len(PYTHON_BLOCKS) >= 10


def test_lists_name_existing_blocks():
    for name, table in (("NOT_RUN", NOT_RUN), ("IN_OWN_PROCESS", IN_OWN_PROCESS)):
        for start in table:
            matches = [b.id for b in PYTHON_BLOCKS if b.first_line.startswith(start)]
            assert len(matches) == 1, f"{name} entry {start!r} matches {matches}, not one block"
    assert not set(NOT_RUN) & set(IN_OWN_PROCESS)


def test_repr_shape():
    assert repr_shape("Shard(index=1, count=2, remainder='pad', source='x')") == (
        "Shard",
        ["index", "count", "remainder", "source"],
    )
    assert repr_shape("[1, 2]") is None


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.id for b in PYTHON_BLOCKS])
def test_readme_block_runs(session, block):
    if block.not_run_reason is not None:
        pytest.skip(f"{block.where}: not run: {block.not_run_reason}")
    before = PYTHON_BLOCKS[: PYTHON_BLOCKS.index(block)]
    try:
        session.run_through(block)
    except Exception as exc:
        failed = [b.id for b in before if session.outcome.get(b.id) is not None]
        if failed:
            raise AssertionError(
                f"{block.where} ({block.id}) failed; earlier blocks failed too: {failed}"
            ) from exc
        raise
