"""The docs' code blocks, and running one page of them alone, as a user's fresh Python would.

`python -m tests.doc_pages PAGE` runs every ```python block of PAGE (README.md or a guide page),
in order, in one namespace, in this process, then checks that no iterator left a thread behind.
It prints one JSON line, the ids of the blocks that ran; a failure exits 1 with the traceback,
whose lines are the page's own. `tests/test_readme.py` runs each page this way, against the
sandbox (`remote_keras.testing.sandbox`), in a fresh working folder.

Interactive (`>>>`) blocks: each statement after `>>>` runs. Where a page shows a repr of the
form `Name(field=..., ...)`, the actual repr must have the same name and the same field names in
the same order; the values (measurements from another run) are not compared. Other output shown
after a `>>>` line is not compared.

Two lists, keyed by the start of a line of the block, say where a block departs from this; each
entry must match exactly one block (`test_lists_name_existing_blocks`), and every other ```python
block runs:

- `IN_OWN_PROCESS`: runs alone (it defines every name it uses) in a fresh Python with the given
  environment (e.g. `KERAS_BACKEND=jax`); this is the only change.
- `NOT_RUN`: not run, with the reason. Keep it short.
"""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOT_PYTHON = {"bash", "diff", ""}  # fence languages that are not run

# Start of a line of a block -> environment of the fresh process it runs in alone, and why.
IN_OWN_PROCESS = {
    "keras.distribution.set_distribution(": (
        {"KERAS_BACKEND": "jax"},
        "the JAX backend is chosen per process, before Keras is imported; runs as one process, "
        "without jax.distributed.initialize(...), so it reads every file: "
        "tests/test_sharding.py::test_two_jax_processes_fit_on_disjoint_shards_of_s3 checks the "
        "split between two processes",
    ),
}

# Start of a line of a block -> why it is not run. Keep this list short.
NOT_RUN = {
    "strategy = tf.distribute.MultiWorkerMirroredStrategy()": (
        "needs a TF_CONFIG cluster of worker processes and the strategy created at program "
        "start-up; "
        "tests/test_sharding.py::test_two_multi_worker_mirrored_workers_read_disjoint_shards_of_s3 "
        "runs this loop in two processes"
    ),
    "data = tf.Variable(": (
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

    def has_line(self, start: str) -> bool:
        """Whether a line of the block starts with `start` (leading spaces aside)."""
        return any(line.strip().startswith(start) for line in self.code.splitlines())

    @property
    def interactive(self) -> bool:
        return self.first_line.startswith(">>> ")

    @property
    def not_run_reason(self) -> str | None:
        return _listed(NOT_RUN, self)

    @property
    def own_process(self) -> tuple[dict[str, str], str] | None:
        return _listed(IN_OWN_PROCESS, self)


def _listed(table: dict, block: Block):
    found = [value for start, value in table.items() if block.has_line(start)]
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


def python_blocks(path: Path) -> list[Block]:
    return [block for block in doc_blocks(path) if block.lang == "python"]


_FIELD = re.compile(r"(?:^|,)\s*(\w+)=")


def repr_shape(text: str) -> tuple[str, list[str]] | None:
    """`("Name", [field, ...])` of a `Name(field=..., ...)` repr, or `None` for other text."""
    match = re.fullmatch(r"\s*(\w+)\((.*)\)\s*", text, flags=re.S)
    return (match.group(1), _FIELD.findall(match.group(2))) if match else None


def run_block(block: Block, namespace: dict) -> None:
    """Runs a plain or interactive block in `namespace`; tracebacks show the file's lines."""
    if not block.interactive:
        source = "\n" * (block.line - 1) + block.code
        exec(compile(source, str(block.path), "exec"), namespace)
        return
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
        value = eval(code, namespace)
        if wanted is not None:
            assert repr_shape(repr(value)) == wanted, (
                f"{block.path.relative_to(ROOT)}:{number}: `{statement}` shows\n  {shown}\n"
                f"but is now\n  {value!r}"
            )


def run_page(path: Path) -> list[str]:
    """Runs the page's blocks in order in one namespace; returns the ids of those that ran."""
    blocks = python_blocks(path)
    namespace: dict = {"__name__": "__doc_page__"}
    ran = []
    for block in blocks:
        if block.not_run_reason is not None:
            continue
        if block.own_process is not None:
            run_in_own_process([block], block.own_process[0])
        else:
            run_block(block, namespace)
        ran.append(block.id)
    namespace.clear()
    _close_iterators()
    return ran


def _close_iterators() -> None:
    """Closes every iterator still alive (a page leaves them open, as a script may), then checks
    that none left a thread behind.

    Those `fit` used stay reachable after the namespace is gone (TensorFlow's
    `Dataset.from_generator` registry holds Keras's adapter), so garbage collection alone would
    not stop their threads.
    """
    from remote_keras.keras_agnostic.batch_core import RemoteBatchCore
    from tests.conftest import _our_threads

    gc.collect()
    for value in gc.get_objects():
        if isinstance(value, RemoteBatchCore):
            value.close()
    for _ in range(50):
        if not _our_threads():
            break
        threading.Event().wait(0.1)
    assert not _our_threads(), f"threads left behind: {_our_threads()}"


# Runs blocks, given as JSON `[[path, line, code], ...]`, in one namespace.
_RUNNER = """
import json, sys
blocks = json.loads(sys.argv[1])
namespace = {"__name__": "__doc_page__"}
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


if __name__ == "__main__":
    print(json.dumps(run_page(Path(sys.argv[1]).resolve())), flush=True)
