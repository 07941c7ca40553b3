"""The backup callbacks read and move an iterator only through `iterator.resumable`."""

from __future__ import annotations

import ast
from pathlib import Path

import remote_keras as rk

PACKAGE = Path(__file__).parents[1] / "remote_keras"


def _callback_modules() -> list[Path]:
    """The modules defining a Keras callback (a class based on a `Callback` or a
    `BackupAndRestore`), and the one holding the cores both fronts' callbacks share."""
    found = [PACKAGE / "keras_agnostic" / "callbacks.py"]
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                "Callback" in ast.unparse(base) or "BackupAndRestore" in ast.unparse(base)
                for base in node.bases
            ):
                found.append(path)
                break
    return found


def private_reads(source: str) -> list[str]:
    """`object._name` in `source` where `object` is not `self`, `cls` or `super()`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")):
            continue
        if node.attr.startswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super":
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_callbacks_are_found():
    names = {path.relative_to(PACKAGE).as_posix() for path in _callback_modules()}
    assert {"keras3/backup.py", "keras2/backup.py", "keras_agnostic/callbacks.py"} <= names


def test_no_callback_calls_a_private_method_of_an_iterator():
    for path in _callback_modules():
        assert private_reads(path.read_text()) == [], path


def test_the_check_sees_a_private_call():
    source = (
        "def f(self, it):\n    self._ok()\n    super()._fine()\n"
        "    it.resumable.epoch\n    it._load_state({})\n"
    )
    assert private_reads(source) == ["5: it._load_state"]


def test_resumable_reads_and_moves_the_iterator(image_dir):
    directory, df = image_dir
    kwargs = dict(target_size=(4, 4), batch_size=4, seed=1)
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory, **kwargs) as it:
        resumable = it.resumable
        assert resumable.batches == len(it) and resumable.epoch == 0
        assert not resumable.in_pass() and not resumable.reset_by_keras()
        it.on_epoch_begin()
        assert resumable.in_pass()
        it.on_epoch_end()
        state = resumable.get_state(epoch=2, batch=1)
        assert state == it.state_dict(epoch=2, batch=1)
        with rk.ImageDataGenerator().flow_from_dataframe(df, directory, **kwargs) as again:
            again.resumable.set_state(state)
            assert again.resumable.epoch == 2 and again.num_batches == len(again) - 1
            assert again.state_dict() == state
