"""Labels pinned with their images, and data-version records that rebuild a run.

Runs against the lakeFS stand-in, or a real lakeFS when `REMOTE_KERAS_LAKEFS_URL` (and its
key variables) are set.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid
from collections.abc import Iterator

import lakefs
import numpy as np
import pandas as pd
import pytest
import yaml
from keras.src.legacy.preprocessing import image as keras_image
from lakefs_spec import LakeFSFileSystem

import remote_keras as rk
from tests.helpers import assert_same_batch, epoch

KW = dict(target_size=(8, 8), batch_size=4, shuffle=True, seed=3)


@pytest.fixture
def repo(target, client, image_dir) -> Iterator[str]:
    """A repository whose `main` holds the images under `train/` and `labels.csv`, committed."""
    local, df = image_dir
    name = f"rec-{uuid.uuid4().hex[:8]}"
    prefix = "local://" if target.is_stand_in else client.storage_config.default_namespace_prefix
    repository = lakefs.Repository(name, client=client)
    namespace = prefix + name if prefix.endswith("/") else f"{prefix}/{name}"
    repository.create(storage_namespace=namespace)
    fs = LakeFSFileSystem(**target.storage_options)
    for row in df.itertuples():
        fs.put_file(os.path.join(local, row.filename), f"lakefs://{name}/main/train/{row.filename}")
    fs.pipe(f"lakefs://{name}/main/labels.csv", df.to_csv(index=False).encode())
    fs.pipe(f"lakefs://{name}/main/labels.parquet", df.to_parquet(index=False))
    lakefs.Branch(name, "main", client=client).commit("images and labels")
    yield name
    repository.delete()


def head(client, repo, ref="main") -> str:
    return lakefs.Reference(repo, ref, client=client).get_commit().id


def fewer_labels(df: pd.DataFrame) -> bytes:
    return df.iloc[:-2].to_csv(index=False).encode()


def test_pd_read_csv_reads_the_branch_head_with_staged_changes(target, repo, image_dir):
    """What the README warns about: a plain read of a branch sees uncommitted changes."""
    _, df = image_dir
    fs = LakeFSFileSystem(**target.storage_options)
    fs.pipe(f"lakefs://{repo}/main/labels.csv", fewer_labels(df))
    url = f"lakefs://{repo}/main/labels.csv"
    assert len(pd.read_csv(url, storage_options=target.storage_options)) == len(df) - 2
    table = rk.read_table(url, target.storage_options)
    assert len(table) == len(df)  # the commit: the staged change is not in it
    commit = table.attrs["source_url"].split("/")[3]
    assert table.attrs["source_url"] == f"lakefs://{repo}/{commit}/labels.csv"
    parquet = rk.read_table(f"lakefs://{repo}/main/labels.parquet", target.storage_options)
    pd.testing.assert_frame_equal(parquet, pd.read_csv(io.BytesIO(df.to_csv(index=False).encode())))
    assert rk.pin_url(f"lakefs://{repo}/main/train/", target.storage_options) == (
        f"lakefs://{repo}/{commit}/train/"
    )


def test_table_url_is_read_at_the_images_commit(target, client, repo, image_dir):
    local, df = image_dir
    fs = LakeFSFileSystem(**target.storage_options)
    fs.pipe(f"lakefs://{repo}/main/labels.csv", fewer_labels(df))  # staged before
    stock = keras_image.ImageDataGenerator().flow_from_dataframe(df, local, **KW)
    gen = rk.ImageDataGenerator(storage_options=target.storage_options)
    with gen.flow_from_dataframe(
        f"lakefs://{repo}/main/labels.csv", f"lakefs://{repo}/main/train", **KW
    ) as it:
        commit = head(client, repo)
        assert it.samples == len(df)
        assert it.table_url == f"lakefs://{repo}/{commit}/labels.csv"
        assert [p.commit_id for p in it.lakefs_pins] == [commit]  # one pin for both
        fs.pipe(f"lakefs://{repo}/main/labels.csv", fewer_labels(df.iloc[:-3]))  # staged after
        lakefs.Branch(repo, "main", client=client).commit("fewer labels")
        for i in range(len(stock)):
            assert_same_batch(stock[i], it[i])
        assert it.samples == len(df)


@pytest.mark.slow
def test_record_written_during_fit_rebuilds_the_run(target, client, repo, tmp_path, monkeypatch):
    """Written to local disk and to lakefs:// with the iterator's credentials only."""
    import keras

    for name in list(os.environ):
        if name.startswith("LAKECTL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LAKECTL_CONFIG_FILE", str(tmp_path / "no-lakectl.yaml"))
    LakeFSFileSystem.clear_instance_cache()
    options = target.storage_options
    lakefs.Branch(repo, "records", client=client).create("main")
    local_record = tmp_path / "ckpt" / "data_version.json"
    remote_record = f"lakefs://{repo}/records/run-1/data_version.json"
    gen = rk.ImageDataGenerator(storage_options=options)
    table, images = f"lakefs://{repo}/main/labels.csv", f"lakefs://{repo}/main/train"
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3, activation="softmax")])  # fmt: skip
    model.compile("sgd", "categorical_crossentropy")
    with gen.flow_from_dataframe(table, images, **KW) as train:
        seen = epoch(train)  # epoch 0, which fit trains on
        callbacks = [
            rk.DataVersionCallback(train, local_record),
            rk.DataVersionCallback(train, remote_record),
        ]
        model.fit(train, epochs=1, verbose=0, callbacks=callbacks)

    # The branch moves on: fewer labels, an image replaced.
    fs = LakeFSFileSystem(**options)
    fs.pipe(table, b"filename,class\n")
    fs.pipe(f"{images}/cat/cat_0.png", fs.cat_file(f"{images}/dog/dog_0.png"))
    lakefs.Branch(repo, "main", client=client).commit("moved on")

    commit = train.lakefs_pins[0].commit_id
    expected = [f"lakefs://{repo}/{commit}/train/", f"lakefs://{repo}/{commit}/labels.csv"]
    for record in (str(local_record), remote_record):
        urls = rk.pinned_urls(record, storage_options=options)
        assert urls == expected
        with gen.flow_from_dataframe(urls[1], urls[0], **KW) as rebuilt:
            for i, batch in enumerate(seen):
                assert_same_batch(batch, rebuilt[i])
    entry = json.loads(local_record.read_text())["data"][0]
    assert entry["paths"] == ["train/", "labels.csv"] and entry["ref"] == "main"
    assert options["password"] not in local_record.read_text()
    remote_ref = (
        f"lakefs://{repo}/records/run-1/data_version.lakefs/all/{repo}/train/.lakefs_ref.yaml"
    )
    assert rk.pinned_urls(remote_ref, options) == expected[:1]


def test_lakefs_ref_files_have_lakectl_local_fields(target, client, repo, tmp_path):
    """`.lakefs_ref.yaml` as `lakectl local` writes it: exactly `src` and `at_head`."""
    gen = rk.ImageDataGenerator(storage_options=target.storage_options, validation_split=0.3)
    url = f"lakefs://{repo}/main/train"
    with gen.flow_from_directory(url, subset="training", **KW) as train:
        record = rk.write_data_version(train, tmp_path / "run" / "data_version.json")
    commit = head(client, repo)
    folder = tmp_path / "run" / "data_version.lakefs" / "training" / repo / "train"
    text = (folder / ".lakefs_ref.yaml").read_text()
    assert yaml.safe_load(text) == {"src": f"lakefs://{repo}/main/train/", "at_head": commit}
    assert record["data"][0]["urls"] == [f"lakefs://{repo}/{commit}/train/"]
    assert rk.read_lakefs_ref(folder) == yaml.safe_load(text)
    assert rk.pinned_urls(folder / ".lakefs_ref.yaml") == [f"lakefs://{repo}/{commit}/train/"]
    assert rk.pinned_urls(folder) == rk.pinned_urls(record)
    with pytest.raises(FileNotFoundError, match=".lakefs_ref.yaml"):
        rk.read_lakefs_ref(tmp_path / "run" / "data_version.lakefs" / ".." / "..")
    (tmp_path / "bad.yaml").write_text("src: s3://bucket/x/\nat_head: abc\n")
    with pytest.raises(ValueError, match="lakefs://"):
        rk.pinned_urls(tmp_path / "bad.yaml")


def test_lakectl_local_folder_is_recorded_by_its_ref(target, client, repo, image_dir, tmp_path):
    """A folder `lakectl local checkout` made: recorded by `src` / `at_head`, streamed back."""
    local, _ = image_dir
    checkout = tmp_path / "data"
    shutil.copytree(local, checkout / "train")
    commit = head(client, repo)
    (checkout / ".lakefs_ref.yaml").write_text(
        yaml.safe_dump({"src": f"lakefs://{repo}/main/", "at_head": commit})
    )
    gen = rk.ImageDataGenerator(storage_options=target.storage_options)
    with gen.flow_from_directory(checkout / "train", **KW) as it:
        record = rk.write_data_version(it, tmp_path / "dv.json", lakefs_refs=False)
        from_disk = epoch(it)
    (entry,) = record["data"]
    assert (entry["repository"], entry["ref"], entry["commit_id"]) == (repo, "main", commit)
    assert entry["paths"] == ["train/"] and entry["local_path"] == str(checkout / "train")
    (url,) = rk.pinned_urls(tmp_path / "dv.json")
    assert url == f"lakefs://{repo}/{commit}/train/"
    with gen.flow_from_directory(url, **KW) as streamed:
        for i, batch in enumerate(from_disk):
            np.testing.assert_array_equal(batch[0], streamed[i][0])
            np.testing.assert_array_equal(batch[1], streamed[i][1])


@pytest.mark.slow
def test_a_records_folder_is_found_without_holding_the_iterators_paths():
    """At 400k images the record once split every path into a list (about 64 MB at once)."""
    import tracemalloc

    from remote_keras.storage.data_versions import _common_folder

    assert _common_folder(["train/c1/1.jpg", "train/c2/2.jpg"]) == "train/"
    assert _common_folder(["a/b1/x.jpg", "a/b/y.jpg"]) == "a/"
    assert _common_folder(["a/b/c.jpg"]) == "a/b/"
    assert _common_folder(["x.jpg", "a/y.jpg"]) == ""
    assert _common_folder([]) is None
    paths = (f"train/c{i % 1000:04d}/{i:06d}.jpg" for i in range(200_000))
    tracemalloc.start()
    try:
        assert _common_folder(paths) == "train/"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # A few strings at a time (tens of kB), not 200,000 lists (65 MB). tracemalloc also
    # counts other threads' allocations (a test's iterator still winding down: 264 kB seen).
    assert peak < 5_000_000, peak
