"""remote_keras's modules import each other without cycles, deferred imports included.

grimp reads every import statement, those inside functions too. Importing
`pkg.mod` first runs `pkg/__init__.py`, so such an import also counts as one
of `pkg` (unless the importer is inside `pkg`, which is then already being
imported). The package root is left out: its names load on first use
(PEP 562), and it imports the rest only for type checkers. `make lint` runs
the same check, and the package's layers, through import-linter
(`[tool.importlinter]` in pyproject.toml).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import deque
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = "remote_keras"
# The local test servers: a separate tree, imported by nothing else (import-linter checks).
OUTSIDE = f"{PACKAGE}.testing"


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def imports(
    graph: grimp.ImportGraph, root: str = PACKAGE, outside: str = OUTSIDE
) -> dict[str, set[str]]:
    """Module -> the modules and packages importing it runs, below `root`, not in `outside`."""
    modules = {m for m in graph.modules if m != root and not _inside(m, outside)}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for importer in modules:
        for imported in graph.find_modules_directly_imported_by(importer) & modules:
            edges[importer].add(imported)
            parts = imported.split(".")
            for depth in range(2, len(parts)):
                package = ".".join(parts[:depth])
                if not _inside(importer, package):
                    edges[importer].add(package)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[tuple[list[str], set[str]]]:
    """Each strongly connected component of `edges` and a shortest cycle in it, `[a, ..., a]`."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(edges[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges[node]:
                components.append(component)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return [(_shortest_cycle(edges, component), component) for component in components]


def _shortest_cycle(edges: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(edges[node] & component):
            if succ == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if succ not in came_from:
                came_from[succ] = node
                queue.append(succ)
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def describe(graph: grimp.ImportGraph, cycle: list[str]) -> str:
    """`a -> b (l.12) -> ...`, naming the line of each import."""
    steps = [cycle[0]]
    for importer, imported in zip(cycle, cycle[1:]):
        details = graph.get_import_details(importer=importer, imported=imported)
        if details:
            lines = ", ".join(f"l.{d['line_number']}" for d in details)
            steps.append(f"{imported} ({importer} {lines})")
        else:
            steps.append(f"{imported} (its __init__ runs when {importer} imports a module in it)")
    return "\n  -> ".join(steps)


def test_the_package_has_no_import_cycles():
    graph = grimp.build_graph(PACKAGE)
    edges = imports(graph)
    # The graph is the real one (deferred imports included), not an empty one.
    assert "remote_keras.errors" in edges["remote_keras.storage.retry"]
    # inside a function:
    assert "remote_keras.storage.loaders" in edges["remote_keras.storage.data_versions"]
    found = [
        f"{describe(graph, cycle)}\n  (one of the cycles among {sorted(component)})"
        for cycle, component in cycles(edges)
    ]
    assert not found, "import cycles:\n" + "\n\n".join(found)


def test_cycles_are_found_through_deferred_imports_and_package_inits():
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.x", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b", line_number=30, line_contents="")
    graph.add_import(importer="pkg.b", imported="pkg.a", line_number=3, line_contents="")
    graph.add_import(importer="pkg.sub", imported="pkg.c", line_number=1, line_contents="")
    graph.add_import(importer="pkg.c", imported="pkg.sub.x", line_number=2, line_contents="")
    graph.add_import(importer="pkg.sub.x", imported="pkg.c", line_number=5, line_contents="")
    edges = imports(graph, root="pkg", outside="pkg.testing")
    found = sorted(cycle for cycle, _ in cycles(edges))
    assert found == [["pkg.a", "pkg.b", "pkg.a"], ["pkg.c", "pkg.sub", "pkg.c"]]
    text = describe(graph, ["pkg.c", "pkg.sub", "pkg.c"])
    assert "its __init__ runs when pkg.c imports a module in it" in text
    assert "pkg.c (pkg.sub l.1)" in text
    # Within its own package a module's imports of siblings run no __init__ again.
    assert edges["pkg.sub.x"] == {"pkg.c"}


def test_decoding_imports_first_in_a_fresh_interpreter():
    # It imports `remote_keras.storage.loaders.protocol`, which runs `loaders/__init__.py`.
    result = subprocess.run(
        [sys.executable, "-c", "import remote_keras.pipeline.decoding"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


def test_no_module_imports_keras_private_modules():
    """Keras's private modules are read by name, in `keras_lines.private_homes` only."""
    package = ROOT / "remote_keras"
    importers = {}
    for path in package.rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("remote_keras/testing/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            if any(name == "keras.src" or name.startswith("keras.src.") for name in names):
                importers.setdefault(relative, []).append(node.lineno)
    assert importers == {}


def _importers_of(folder: str, wanted) -> dict[str, list[int]]:
    """Modules under `folder` importing a module for which `wanted(name)` holds, with lines."""
    importers: dict[str, list[int]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            if any(wanted(name) for name in names):
                importers.setdefault(relative, []).append(node.lineno)
    return importers


def _top(name: str) -> str:
    return name.split(".")[0]


def test_only_keras_api_imports_keras_2_in_the_keras_2_front():
    importers = _importers_of(
        "remote_keras/keras2", lambda name: _top(name) in ("keras", "tensorflow", "tf_keras")
    )
    assert set(importers) == {"remote_keras/keras2/keras_api.py"}, importers


def test_tensorflow_and_grain_are_imported_only_where_the_names_say_so():
    tensorflow = _importers_of("remote_keras", lambda name: _top(name) == "tensorflow")
    grain = _importers_of("remote_keras", lambda name: _top(name) == "grain")
    assert set(tensorflow) == {
        "remote_keras/keras_agnostic/tensorflow_import.py",  # TensorFlow, for what needs it
        "remote_keras/image_dataset/tf_graph.py",
        "remote_keras/keras2/keras_api.py",  # Keras 2 is `tf.keras`
    }, tensorflow
    assert set(grain) == {"remote_keras/image_dataset/grain_dataset.py"}, grain


def test_the_fronts_and_their_core_import_neither_front():
    keras3 = _importers_of("remote_keras/keras3", lambda n: n.startswith("remote_keras.keras2"))
    keras2 = _importers_of("remote_keras/keras2", lambda n: n.startswith("remote_keras.keras3"))
    shared = [
        _importers_of(
            folder,
            lambda n: (
                n.startswith(("remote_keras.keras2", "remote_keras.keras3"))
                or _top(n) in ("keras", "tf_keras")
            ),
        )
        for folder in ("remote_keras/keras_agnostic", "remote_keras/image_dataset")
    ]
    assert (keras3, keras2, *shared) == ({}, {}, {}, {})


# The iterators' one shared class holds their whole public surface (Keras's attributes and the
# package's) and their Keras entry points, each delegating to its parts (`Scheduler`,
# `Resumable`, `ProcessLocal`, ...): it may be longer, but none of its methods may hold logic.
LONGER_CLASSES = {"RemoteBatchCore": 350}
DELEGATION_LINES = 8  # the most code lines (docstring aside) of a method of such a class


def _code_lines(function: ast.FunctionDef) -> int:
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return 0 if not body else (body[-1].end_lineno or 0) - body[0].lineno + 1


@pytest.mark.slow
def test_modules_and_classes_stay_small():
    too_big = []
    for path in (ROOT / "remote_keras").rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("remote_keras/testing/"):
            continue
        text = path.read_text()
        if text.count("\n") > 400:
            too_big.append(f"{relative}: {text.count(chr(10))} lines (at most 400)")
        for node in ast.walk(ast.parse(text, relative)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                limit = LONGER_CLASSES.get(node.name, 250)
                if length > limit:
                    too_big.append(
                        f"{relative}: class {node.name} {length} lines (at most {limit})"
                    )
                if node.name not in LONGER_CLASSES:
                    continue
                for method in node.body:
                    if isinstance(method, ast.FunctionDef) and (
                        _code_lines(method) > DELEGATION_LINES
                    ):
                        too_big.append(
                            f"{relative}: {node.name}.{method.name} has "
                            f"{_code_lines(method)} lines of code (at most {DELEGATION_LINES})"
                        )
    assert not too_big, "\n".join(too_big)
