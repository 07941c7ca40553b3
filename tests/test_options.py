"""One options model: `LoaderOptions`, its typed overrides and the guide's table agree."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

import remote_keras as rk
from remote_keras.pipeline.options import NAMES, LoaderOptions, LoaderOverrides

OPTIONS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "options.md"


def test_overrides_and_options_have_the_same_names_and_types():
    fields = {f.name: f.type for f in dataclasses.fields(LoaderOptions)}
    overrides = typing.get_type_hints(LoaderOverrides)
    options = typing.get_type_hints(LoaderOptions)
    assert list(overrides) == list(fields) == list(NAMES)
    assert overrides == options


def test_every_option_is_documented_once_in_the_docstring_and_the_guide():
    doc = LoaderOptions.__doc__ or ""
    for name in NAMES:
        assert re.search(rf"^\s+{name}:", doc, re.M), name
    knobs = OPTIONS_PAGE.read_text().split("## Options", 1)[1].split("| argument |", 1)[1]
    table = knobs.split("\n\n", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    in_table = [name for row in rows for name in re.findall(r"`(\w+)`", row)]
    assert sorted(in_table) == sorted(NAMES)


def test_generator_options_are_inherited_and_overridden_per_call(image_dir, tmp_path):
    directory, df = image_dir
    gen = rk.ImageDataGenerator(rescale=0.5, cache_dir=str(tmp_path), workers=2, num_shards=1)
    assert gen.rescale == 0.5 and gen.options.workers == 2
    with gen.flow_from_dataframe(df, directory) as inherited:
        assert inherited.cache is not None and inherited.workers == 2
    with gen.flow_from_dataframe(df, directory, cache_dir=None, workers=3) as overridden:
        assert overridden.cache is None and overridden.workers == 3
    assert gen.options.cache_dir == str(tmp_path)  # the generator's own stay as they were


def test_every_option_can_be_set_on_the_generator():
    values = dict(num_shards=2, shard_index=1, shard_remainder="drop", use_multiprocessing=True,
                  max_queue_size=3, progress=False, jpeg_draft=True)  # fmt: skip
    gen = rk.ImageDataGenerator(**values)
    assert {name: getattr(gen.options, name) for name in values} == values


def test_unknown_option_in_merged_is_named():
    with pytest.raises(TypeError, match="Unknown remote_keras option"):
        LoaderOptions().merged({"wokers": 2})


def test_options_repr_hides_storage_options():
    options = LoaderOptions(storage_options={"secret": "s3cr3t"}, workers=2)
    assert "s3cr3t" not in repr(options) and "workers=2" in repr(options)
