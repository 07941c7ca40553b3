"""The documentation site builds in strict mode and documents the whole public API.

`mkdocs build --strict` fails on any warning: a docstring griffe cannot parse, an
unresolved cross-reference, a broken link or anchor, a missing snippet file. The
API pages are generated from the docstrings by static analysis, so the build does
not import remote_keras (or TensorFlow) and takes a couple of seconds.
"""

from __future__ import annotations

import ast
import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("mkdocs") is None
        or importlib.util.find_spec("mkdocstrings_handlers.python") is None,
        reason="mkdocs and mkdocstrings-python are not installed; they are dev dependencies "
        "(pip install -e '.[dev]', or make install)",
    ),
]


def text_of(page: Path) -> str:
    """A page's visible text: tags removed, entities decoded, whitespace collapsed."""
    markup = re.sub(r"<(script|style)\b.*?</\1>", " ", page.read_text(), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def first_docstring_line(path: Path, name: str) -> str:
    """The summary line of class `name` in `path`, as the page shows it (no backticks)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return ast.get_docstring(node).splitlines()[0].replace("`", "")
    raise AssertionError(f"no class {name} in {path}")


def public_names() -> tuple[list[str], set[str]]:
    """`remote_keras.__all__`, and which of its names are re-exported from Keras."""
    tree = ast.parse((ROOT / "remote_keras" / "__init__.py").read_text())
    names: list[str] = []
    from_keras: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names = list(ast.literal_eval(node.value))
        module = node.module if isinstance(node, ast.ImportFrom) else None
        if module and (module.split(".")[0] == "keras" or module.endswith(".keras_src")):
            from_keras.update(alias.asname or alias.name for alias in node.names)
    assert names, "remote_keras/__init__.py defines no __all__"
    return names, from_keras


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{log[-6000:]}"
    assert "WARNING" not in log, log[-6000:]
    return out


def test_api_page_shows_the_docstrings(site):
    page = site / "api" / "remote_keras" / "index.html"
    summary = first_docstring_line(
        ROOT / "remote_keras" / "keras3" / "generator.py", "ImageDataGenerator"
    )
    assert summary in text_of(page)
    assert 'id="remote_keras.keras3.generator.ImageDataGenerator"' in page.read_text()


def test_every_public_name_is_documented(site):
    names, from_keras = public_names()
    ids: set[str] = set()
    for page in (site / "api").rglob("index.html"):
        ids.update(re.findall(r'id="(remote_keras(?:\.\w+)+)"', page.read_text()))
    documented = {object_id.rsplit(".", 1)[-1] for object_id in ids}
    missing = [n for n in names if n not in from_keras and n not in documented]
    assert not missing, f"in remote_keras.__all__ but on no page under docs/api/: {missing}"
    top_level = text_of(site / "api" / "remote_keras" / "index.html")
    assert all(name in top_level for name in from_keras)  # Keras's own classes, named there


def test_pages_show_the_repository_files(site):
    home = text_of(site / "index.html")
    contributing = text_of(site / "CONTRIBUTING" / "index.html")
    changelog = (site / "CHANGELOG" / "index.html").read_text()
    assert "The two commands" in home and "missed targets" not in home  # the README's intro only
    assert "make test-fast" in contributing
    assert "--8<--" not in home + contributing + changelog  # expanded, not shown
    assert 'href="../guide/resume/"' in changelog  # the CHANGELOG's docs/ links, in the site


def test_every_guide_page_and_notebook_is_in_the_site(site):
    pages = sorted(p.stem for p in (ROOT / "docs" / "guide").glob("*.md"))
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert pages and notebooks
    for page in pages:
        assert (site / "guide" / page / "index.html").is_file(), page
    for notebook in notebooks:
        assert (site / "notebooks" / notebook / "index.html").is_file(), notebook
