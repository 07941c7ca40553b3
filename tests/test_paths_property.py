"""Property-based: odd but legal keys round-trip through listing, validation and loading on S3."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import remote_keras as rk
from remote_keras.storage import listing
from remote_keras.storage.packed_paths import PrefixedPaths
from tests.helpers import png_bytes, put_objects

# Characters people really put in keys, including the glob and URL specials.
ODD = st.sampled_from(list(" %#[]*?!@$&'()+,;=~^{}") + ["ü", "é", "日", "ß", "..", "-", "_"])
SEGMENT = st.lists(st.one_of(ODD, st.text("abcXYZ019", min_size=1, max_size=3)),
                   min_size=1, max_size=5).map("".join)  # fmt: skip
NAME = st.builds(
    lambda parts, ext: "/".join(parts) + ext,
    st.lists(SEGMENT, min_size=1, max_size=3),
    st.sampled_from([".png", ".PNG", ".jpg"]),
).filter(lambda n: all(p not in ("", ".", "..") for p in n.split("/")) and "//" not in n)


def _png(value: int) -> bytes:
    return png_bytes(np.full((3, 3, 3), value, dtype="uint8"))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@pytest.mark.slow
@given(names=st.lists(NAME, min_size=1, max_size=6, unique=True))
def test_odd_keys_round_trip(names, s3fs_direct, s3_options):
    prefix = f"data/prop-{uuid.uuid4().hex[:8]}"
    values = {name: (17 * i + 5) % 256 for i, name in enumerate(names)}
    put_objects(s3fs_direct, {f"{prefix}/cls/{name}": _png(v) for name, v in values.items()})
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    df = pd.DataFrame({"filename": [f"cls/{n}" for n in names], "class": "cls"})
    for loader in ("fsspec", "obstore"):
        with gen.flow_from_dataframe(
            df, f"s3://{prefix}", target_size=(3, 3), shuffle=False, batch_size=len(names),
            loader=loader,
        ) as it:  # fmt: skip
            assert it.samples == len(names)  # validation found every key by listing
            x, _ = it[0]
        for row, name in zip(x, names):
            assert (row == values[name]).all(), (loader, name)
    with gen.flow_from_directory(f"s3://{prefix}", target_size=(3, 3), shuffle=False) as it:
        expected = sorted(f"cls/{n}" for n in names)  # one class: sorted like os.walk per folder
        assert sorted(it.filenames) == expected


@pytest.mark.parametrize(
    "directory, row, expected",
    [
        ("s3://b/images", "cat/x.png", "s3://b/images/cat/x.png"),
        ("s3://b/images", "cat/./n/../x.png", "s3://b/images/cat/x.png"),
        ("s3://b/images", "../images/x.png", "s3://b/images/x.png"),
        ("s3://b/images", "../../secret/x.png", None),
        ("s3://b/images", "../other/x.png", None),
        ("s3://b/images", "cat/", None),
        ("s3://b/images/", "cat/x.png", "s3://b/images/cat/x.png"),
        ("s3://b/images", "s3://c/y/../x.png", "s3://c/x.png"),
        ("s3://b/images", "s3://c/../x.png", None),
        (None, "gs://c/a/./x.png", "gs://c/a/x.png"),
        ("s3://b/images", "/local/x.png", "/local/x.png"),
        ("/data/images", "../x.png", os.path.join("/data/images", "../x.png")),
    ],
)
def test_row_url_resolves_dot_segments_inside_the_directory(directory, row, expected):
    assert listing.row_url(directory, row) == expected


ROW = st.one_of(
    NAME,
    st.sampled_from(["cat/./x.png", "../images/x.png", "../../x.png", "cat/", "/local/x.png",
                     "s3://c/y/../x.png", ".hidden.png", "a/.b/x.png", "x..png"]),
)  # fmt: skip


@given(
    directory=st.sampled_from(
        ["s3://b/images", "s3://b/images/", "s3://b/a/../images", "/data/images", None]
    ),
    rows=st.lists(ROW, max_size=8),
)
@pytest.mark.slow
def test_row_urls_is_row_url_of_each_row(directory, rows):
    expected = [listing.row_url(directory, row) for row in rows]
    assert list(listing.row_urls(directory, rows)) == expected

    def pin(url: str) -> str:  # a stand-in for lakeFS pinning, which rewrites a prefix
        return "pinned+" + url

    pinned = [None if url is None else pin(url) for url in expected]
    assert list(listing.row_urls(directory, rows, pin)) == pinned


def test_row_urls_of_plain_rows_are_made_when_read():
    paths = listing.row_urls("s3://b/images", ["cat/x.png", "dog/y.png"])
    assert isinstance(paths, PrefixedPaths) and paths.prefix == "s3://b/images/"
    assert paths == ["s3://b/images/cat/x.png", "s3://b/images/dog/y.png"]
