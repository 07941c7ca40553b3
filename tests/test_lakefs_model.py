"""The stand-in's paging by bisection equals a plain sort-and-scan, staging areas included.

`model.page` seeks into a commit's sorted paths and a branch's staged paths instead of
sorting the whole view for every page; these properties check it against the obvious
implementation on random trees, staging areas (with deletions), prefixes, delimiters,
`after` values and page sizes.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote_keras.testing.lakefs.model import Entry, Staging, Tree, View, page

PATHS = st.text(alphabet="ab/", min_size=1, max_size=5)


def entry(tag: str) -> Entry:
    return Entry("", tag, tag, 1, 0, "application/octet-stream")


def reference(items: dict, prefix: str, delimiter: str, after: str, amount: int):
    """The page as a sort of the whole view, then a scan (what the stand-in did before)."""
    out, last = [], None
    for path in sorted(items):
        if path < prefix or (after >= prefix and path <= after):
            continue
        if not path.startswith(prefix):
            break
        payload = items[path]
        cut = path.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            common = path[: cut + len(delimiter)]
            if common <= after or common == last:
                continue
            last, path, payload = common, common, None
        if len(out) == amount:
            return out, True
        out.append((path, payload))
    return out, False


@settings(max_examples=400, deadline=None)
@given(
    committed=st.lists(PATHS, max_size=12, unique=True),
    staged=st.dictionaries(PATHS, st.booleans(), max_size=8),
    prefix=st.sampled_from(["", "a", "a/", "b", "ab/"]),
    delimiter=st.sampled_from(["", "/"]),
    after=st.sampled_from(["", "a", "a/", "a/b", "b", "b/a", "ab", "bb"]),
    amount=st.integers(1, 5),
)
@pytest.mark.slow
def test_page_matches_a_sorted_scan(committed, staged, prefix, delimiter, after, amount):
    tree = Tree({p: entry(f"c-{p}") for p in committed})
    staging = Staging()
    view = View(tree, staging)
    staging.paths  # noqa: B018 - sorted once, so that later writes take the merge path
    for path, keep in staged.items():
        if keep:
            staging.set(path, entry(f"s-{path}"))
        elif path in tree.entries:
            staging.set(path, None)
    materialized = view.materialize()
    assert page(view, prefix, delimiter, after, amount) == reference(
        materialized, prefix, delimiter, after, amount
    )
    assert dict(view.walk("", False)) == materialized
    for path in list(staging.changes)[:2]:
        staging.discard(path)
    assert dict(view.walk("", False)) == view.materialize()
