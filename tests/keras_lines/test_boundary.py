"""Only the Keras-line layer reads Keras's version, a Keras private, or Python's `random` state.

Read from every module's syntax tree (docstrings and comments, which cite Keras's sources,
left out), so that a new Keras release is a change to `remote_keras/keras_lines/` alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from remote_keras.keras_lines import KERAS_2, KERAS_3, KERAS_3_16

ROOT = Path(__file__).parents[2] / "remote_keras"
LAYER = ROOT / "keras_lines"
OUTSIDE = (LAYER, ROOT / "testing")  # the layer itself; the local test servers

# What Keras keeps private and the package relies on: the attributes and methods of Keras's
# `BackupAndRestore` each line's front extends, and Keras's registry of its worker pools.
KERAS_PRIVATES = {
    *KERAS_2.backup_internals,
    *KERAS_3.backup_internals,
    *KERAS_3_16.backup_internals,
    "_DATA_POOLS",
}
KERAS_DISTRIBUTIONS = {"keras", "keras-nightly", "tensorflow", "tf_keras", "tf-keras"}
PRIVATE_MODULES = ("keras.src", "tf_keras.src", "tensorflow.python.keras")
GLOBAL_RANDOM = {"getstate", "setstate", "seed"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def violations(source: str) -> list[str]:
    """What in `source` reads Keras's version, a Keras private or Python's global `random`."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute):
            if node.attr == "__version__":
                found.append(f"{line}: reads a version (`.__version__`)")
            elif node.attr in KERAS_PRIVATES:
                found.append(f"{line}: touches Keras's private `{node.attr}`")
            elif (
                node.attr in GLOBAL_RANDOM
                and isinstance(node.value, ast.Name)
                and node.value.id == "random"
            ):
                found.append(f"{line}: Python's global random state (`random.{node.attr}`)")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name in KERAS_PRIVATES:
                found.append(f"{line}: overrides Keras's private `{node.name}`")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith(PRIVATE_MODULES):
                found.append(f"{line}: imports Keras's private `{module}`")
            if module == "random" and {a.name for a in node.names} & GLOBAL_RANDOM:
                found.append(f"{line}: imports Python's global random state")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PRIVATE_MODULES):
                    found.append(f"{line}: imports Keras's private `{alias.name}`")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                continue
            if node.value == "__version__":
                found.append(f"{line}: reads a version (`getattr(..., '__version__')`)")
            elif node.value.startswith(PRIVATE_MODULES) or node.value in KERAS_PRIVATES:
                found.append(f"{line}: names Keras's private `{node.value}`")
        elif isinstance(node, ast.Call) and node.args:
            callee = node.func
            name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
            first = node.args[0]
            if (
                name == "version"
                and isinstance(first, ast.Constant)
                and first.value in KERAS_DISTRIBUTIONS
            ):
                found.append(f"{line}: reads {first.value}'s installed version")
    return found


def _modules() -> list[Path]:
    return sorted(
        path
        for path in ROOT.rglob("*.py")
        if not any(path.is_relative_to(outside) for outside in OUTSIDE)
    )


@pytest.mark.parametrize("path", _modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_outside_the_layer_knows_a_keras_line(path):
    assert violations(path.read_text()) == []


def test_the_check_finds_each_kind_of_knowledge():
    """Each rule fires on code that breaks it (a check that cannot fail proves nothing)."""
    source = '''
"""Docstrings may cite keras.src.utils and __version__."""
import random
from random import getstate
from keras.src.legacy.preprocessing import image
import tf_keras.src.utils.data_utils
from importlib.metadata import version
import keras

seeds = keras.__version__
old = getattr(keras, "__version__", "?")
installed = version("keras")
state = random.getstate()
random.setstate(state)
pools = sys.modules.get("keras.src.trainers.data_adapters.py_dataset_adapter")._DATA_POOLS
callback._last_batch_seen = 3

class Backup:
    def _save_model(self):
        pass
'''
    found = violations(source)
    kinds = [entry.split(": ", 1)[1] for entry in found]
    assert len(found) == 12, found
    assert all(int(entry.split(":")[0]) > 2 for entry in found)  # not the docstring
    assert any("overrides Keras's private `_save_model`" in kind for kind in kinds)
    assert any("keras's installed version" in kind for kind in kinds)


def test_the_layer_itself_is_where_keras_is_known():
    known = [path for path in LAYER.rglob("*.py") if violations(path.read_text())]
    assert {path.name for path in known} >= {"keras3.py", "worker_pools.py", "backup_hooks.py"}


def test_each_module_of_the_layer_has_a_test_file_of_its_name():
    """`tests/keras_lines/test_<module>.py`; the package's own is `test_lines.py`."""
    tests = Path(__file__).parent
    own = {"__init__": "lines", "resumption": None}  # a plain record, tested through its users
    missing = []
    for path in sorted(LAYER.glob("*.py")):
        name = own.get(path.stem, path.stem)
        if name is not None and not (tests / f"test_{name}.py").exists():
            missing.append(path.name)
    assert missing == []
