"""CONTRIBUTING names every module in its folder, and where Keras's call order is relied on."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layout() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    return text.split("## Layout", 1)[1].split("```", 2)[1]


def test_the_layout_names_every_module_under_its_folder():
    layout = _layout()
    missing = []
    for path in sorted((ROOT / "remote_keras").rglob("*.py")):
        relative = path.relative_to(ROOT / "remote_keras")
        if relative.parts[0] == "testing" or path.name == "__init__.py":
            continue
        folder = relative.parts[-2] + "/" if len(relative.parts) > 1 else "remote_keras/"
        # The module's name appears after its folder's heading line in the map.
        heading = rf"\n\s+{re.escape(folder)}" if folder != "remote_keras/" else r"\A"
        section = re.split(heading, layout, maxsplit=1)
        if len(section) < 2 or not re.search(rf"\b{re.escape(path.name)}\b", section[1]):
            missing.append(str(relative))
    assert not missing, f"CONTRIBUTING's layout does not name: {missing}"


def test_the_layout_names_no_module_that_does_not_exist():
    names = set(re.findall(r"\b([a-z_0-9]+\.py)\b", _layout()))
    existing = {path.name for path in (ROOT / "remote_keras").rglob("*.py")}
    assert names <= existing, sorted(names - existing)


def test_each_module_relying_on_kerass_behaviour_names_the_lines_it_relies_on():
    """The section names one package, and each of its modules cites Keras's source lines."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## Where Keras's behaviour is relied on", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"`(\w+/)`", section)) == {"keras_lines/"}
    layer = ROOT / "remote_keras" / "keras_lines"
    relying = sorted(path for path in layer.glob("*.py") if path.name != "resumption.py")
    assert len(relying) >= 10, relying
    for path in relying:
        assert re.search(r"\blines? \d+", path.read_text()), f"{path.name} names no Keras line"


def test_every_test_file_the_docs_name_exists():
    """A page pointing a reader at a test file that is not there (`tests/test_gcs.py` was)."""
    root = Path(__file__).parents[1]
    pages = [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").rglob("*.md"))]
    named = {
        (str(page.relative_to(root)), path)
        for page in pages
        for path in re.findall(r"\btests/[\w/]+\.py\b", page.read_text())
    }
    assert sorted(n for n in named if not (root / n[1]).exists()) == []
