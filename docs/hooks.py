"""MkDocs hook: pages that show the repository's own files (README, CHANGELOG, CONTRIBUTING).

A page line `--8<-- "FILE"` is replaced by FILE (relative to the repository's root), and
`--8<-- "FILE:NAME"` by the part of FILE between the lines `<!-- --8<-- [start:NAME] -->` and
`<!-- --8<-- [end:NAME] -->`, so the site never drifts from those files. Their links to `docs/...`
are rewritten to the site's own paths (the pages live inside `docs/`).
"""

from __future__ import annotations

import re
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_INCLUDE = re.compile(r'^--8<-- "([^":]+)(?::(\w+))?"\s*$', re.M)
_REPOSITORY_LINK = re.compile(r"\]\(docs/")


def _included(match: re.Match[str]) -> str:
    path, section = match.groups()
    text = (_ROOT / path).read_text(encoding="utf-8")
    if section:
        start, end = f"<!-- --8<-- [start:{section}] -->", f"<!-- --8<-- [end:{section}] -->"
        if start not in text or end not in text:
            raise ValueError(f"{path} has no section {section!r} ({start} ... {end})")
        text = text.split(start, 1)[1].split(end, 1)[0]
    return _REPOSITORY_LINK.sub("](", text)


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    """Expands the page's `--8<--` lines."""
    return _INCLUDE.sub(_included, markdown)
