"""Training from lakeFS: `lakefs://` URLs, commit pinning, data-version records, errors, requests.

Runs against the lakeFS stand-in (`remote_keras.testing.LakeFSServer`), or a real
lakeFS when `REMOTE_KERAS_LAKEFS_URL` (and its key variables) are set.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import uuid
from collections.abc import Iterator

import lakefs
import numpy as np
import pytest
from keras.src.legacy.preprocessing import image as keras_image
from lakefs_spec import LakeFSFileSystem

import remote_keras as rk
from remote_keras.keras3.callbacks import DataVersionCallback
from remote_keras.storage import lakefs as rk_lakefs
from remote_keras.storage.data_versions import write_data_version
from tests.helpers import assert_same_batch


@pytest.fixture(scope="module")
def repo(target, client, image_dir) -> Iterator[str]:
    """A repository whose `main` holds the local image folder under `train/`, committed."""
    local, _ = image_dir
    name = f"rk-{uuid.uuid4().hex[:8]}"
    prefix = "local://" if target.is_stand_in else client.storage_config.default_namespace_prefix
    repository = lakefs.Repository(name, client=client)
    namespace = prefix + name if prefix.endswith("/") else f"{prefix}/{name}"
    repository.create(storage_namespace=namespace)
    fs = LakeFSFileSystem(**target.storage_options)
    for folder, _, files in os.walk(local):
        for file in files:
            path = os.path.join(folder, file)
            fs.put_file(path, f"lakefs://{name}/main/train/{os.path.relpath(path, local)}")
    lakefs.Branch(name, "main", client=client).commit("images")
    yield name
    repository.delete()


@pytest.fixture
def branch(repo, client) -> Iterator[str]:
    name = f"b-{uuid.uuid4().hex[:8]}"
    lakefs.Branch(repo, name, client=client).create("main")
    yield name
    lakefs.Branch(repo, name, client=client).delete()


def head(client, repo, ref) -> str:
    return lakefs.Reference(repo, ref, client=client).get_commit().id


def test_directory_from_lakefs_equals_stock_on_local_copy(image_dir, target, repo):
    local, _ = image_dir
    kwargs = dict(target_size=(8, 8), batch_size=7, shuffle=False)
    stock = keras_image.ImageDataGenerator().flow_from_directory(local, **kwargs)
    gen = rk.ImageDataGenerator(storage_options=target.storage_options)
    with gen.flow_from_directory(f"lakefs://{repo}/main/train", **kwargs) as it:
        assert it.filenames == stock.filenames
        assert it.class_indices == stock.class_indices
        for i in range(len(stock)):
            assert_same_batch(stock[i], it[i])


def test_dataframe_of_lakefs_urls(image_dir, target, repo):
    local, df = image_dir
    urls = df.assign(filename=f"lakefs://{repo}/main/train/" + df["filename"])
    stock = keras_image.ImageDataGenerator().flow_from_dataframe(
        df, local, target_size=(8, 8), batch_size=32, shuffle=False
    )
    gen = rk.ImageDataGenerator(storage_options=target.storage_options)
    with gen.flow_from_dataframe(urls, target_size=(8, 8), batch_size=32, shuffle=False) as it:
        assert it.samples == len(df)
        assert_same_batch(stock[0], it[0])


def test_branch_is_pinned_to_its_commit(target, client, repo, branch):
    gen = rk.ImageDataGenerator(storage_options=target.storage_options)
    kwargs = dict(target_size=(6, 6), batch_size=32, shuffle=False)
    fs = LakeFSFileSystem(**target.storage_options)
    staged_before = f"lakefs://{repo}/{branch}/train/cat/staged_before.png"
    fs.pipe(staged_before, fs.cat_file(f"lakefs://{repo}/main/train/cat/cat_0.png"))
    with gen.flow_from_directory(f"lakefs://{repo}/{branch}/train", **kwargs) as it:
        pin = it.lakefs_pins[0]
        assert (pin.repository, pin.ref) == (repo, branch)
        assert pin.commit_id == head(client, repo, branch)
        assert pin.endpoint.startswith(target.endpoint_url)
        assert all(p.startswith(f"lakefs://{repo}/{pin.commit_id}/") for p in it.filepaths)
        assert "cat/staged_before.png" not in it.filenames  # not committed: not in the data
        before = it[0][0].copy()

        # During training: overwrite an image, stage and commit; the iterator must not see it.
        victim = f"lakefs://{repo}/{branch}/train/{it.filenames[0]}"
        flipped = fs.cat_file(f"lakefs://{repo}/main/train/{it.filenames[-1]}")
        fs.pipe(victim, flipped)
        np.testing.assert_array_equal(it[0][0], before)  # staged write
        lakefs.Branch(repo, branch, client=client).commit("change an image")
        np.testing.assert_array_equal(it[0][0], before)  # committed write
    with gen.flow_from_directory(f"lakefs://{repo}/{branch}/train", **kwargs) as fresh:
        assert fresh.lakefs_pins[0].commit_id != pin.commit_id
        assert not np.array_equal(fresh[0][0], before)


def test_commit_id_and_tag_refs(target, client, repo):
    commit_id = head(client, repo, "main")
    tag = f"v-{uuid.uuid4().hex[:6]}"
    lakefs.Tag(repo, tag, client=client).create(commit_id)
    gen = rk.ImageDataGenerator(storage_options=target.storage_options)
    for ref in (commit_id, tag):
        with gen.flow_from_directory(f"lakefs://{repo}/{ref}/train", target_size=(4, 4)) as it:
            assert it.lakefs_pins[0].commit_id == commit_id
            assert it.lakefs_pins[0].ref == ref
            assert it.samples == 21


@pytest.mark.slow
def test_data_version_callback_writes_the_pins(target, client, repo, tmp_path):
    import keras

    gen = rk.ImageDataGenerator(
        rescale=1 / 255, validation_split=0.3, storage_options=target.storage_options
    )
    url = f"lakefs://{repo}/main/train"
    train = gen.flow_from_directory(url, target_size=(8, 8), subset="training", batch_size=4)
    val = gen.flow_from_directory(url, target_size=(8, 8), subset="validation", batch_size=4)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3, activation="softmax")])  # fmt: skip
    model.compile("sgd", "categorical_crossentropy")
    record = tmp_path / "ckpt" / "data_version.json"
    with train, val:
        model.fit(train, validation_data=val, epochs=1, verbose=0,
                  callbacks=[DataVersionCallback([train, val], record)])  # fmt: skip
    written = json.loads(record.read_text())
    commit_id = head(client, repo, "main")
    assert [(d["role"], d["repository"], d["ref"], d["commit_id"]) for d in written["data"]] == [
        ("training", repo, "main", commit_id),
        ("validation", repo, "main", commit_id),
    ]
    assert target.storage_options["password"] not in record.read_text()
    assert write_data_version(train, tmp_path / "again.json") == {"data": written["data"][:1]}


def test_one_request_per_image(target, repo):
    server = target.server
    if server is None:
        pytest.skip(f"counts requests at the stand-in ({target})")
    gen = rk.ImageDataGenerator(storage_options=target.storage_options)
    it = gen.flow_from_directory(f"lakefs://{repo}/main/train", target_size=(4, 4), batch_size=7)
    with it:
        server.reset()
        for i in range(len(it)):
            it[i]
        counts = server.reset()
    # The loader asks once whether the server presigns (it does not: one GET per image).
    assert counts.pop("GET /api/v1/config") == 1, counts
    object_gets = {k: v for k, v in counts.items() if "/objects" in k}
    assert sum(counts.values()) == it.samples, counts
    assert list(object_gets.values()) == [it.samples], counts


def test_listing_is_one_paged_call(target, repo):
    server = target.server
    if server is None:
        pytest.skip(f"counts requests at the stand-in ({target})")
    server.reset()
    gen = rk.ImageDataGenerator(storage_options=target.storage_options)
    with gen.flow_from_directory(f"lakefs://{repo}/main/train", prefetch_batches=0):
        counts = server.reset()
    listing = sum(v for k, v in counts.items() if k.endswith("/objects/ls"))
    assert listing == 1, counts  # 21 objects: one page
    assert not any("HEAD" in k or "/objects/stat" in k for k in counts), counts


def test_missing_repo_ref_and_object_are_file_not_found(target, repo):
    gen = rk.ImageDataGenerator(storage_options=target.storage_options)
    for url in ("lakefs://no-such-repo/main/train", f"lakefs://{repo}/no-such-branch/train"):
        with pytest.raises(FileNotFoundError, match=url.rsplit("/", 1)[0]):
            gen.flow_from_directory(url)
    import pandas as pd

    df = pd.DataFrame({"filename": [f"lakefs://{repo}/main/train/cat/nope.png"], "class": ["c"]})
    with gen.flow_from_dataframe(df, validate_filenames=False) as it:
        with pytest.raises(FileNotFoundError, match="cat/nope.png"):
            it[0]


def test_bad_credentials_are_permission_error_without_the_secret(target, repo):
    secret = "definitely-wrong-secret-42"
    options = dict(target.storage_options, password=secret)
    gen = rk.ImageDataGenerator(storage_options=options)
    with pytest.raises(PermissionError) as info:
        gen.flow_from_directory(f"lakefs://{repo}/main/train")
    assert f"lakefs://{repo}/main" in str(info.value)
    assert secret not in str(info.value) and secret not in repr(gen)


def test_unreachable_server_is_a_connection_error(repo):
    from remote_keras.testing.s3 import free_port

    options = {"host": f"http://127.0.0.1:{free_port()}", "username": "a", "password": "b"}
    gen = rk.ImageDataGenerator(storage_options=options)
    with pytest.raises(ConnectionError, match=f"lakefs://{repo}/main"):
        gen.flow_from_directory(f"lakefs://{repo}/main/train")


def test_lakectl_environment_variables_configure_access(target, repo, monkeypatch):
    options = target.storage_options
    monkeypatch.setenv("LAKECTL_SERVER_ENDPOINT_URL", options["host"])
    monkeypatch.setenv("LAKECTL_CREDENTIALS_ACCESS_KEY_ID", options["username"])
    monkeypatch.setenv("LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY", options["password"])
    monkeypatch.setenv("LAKECTL_CONFIG_FILE", "/nonexistent/lakectl.yaml")
    LakeFSFileSystem.clear_instance_cache()
    with rk.ImageDataGenerator().flow_from_directory(f"lakefs://{repo}/main/train") as it:
        assert it.samples == 21
        it[0]
        assert options["password"] not in repr(it) + repr(it.loader) + str(it.lakefs_pins)


def test_an_empty_class_folder_with_a_marker_is_a_class(image_dir, target, client, repo, tmp_path):
    """A folder-marker object (`train/empty/`, as lakeFS, MinIO and the S3 console make) counts."""
    local, _ = image_dir
    copy = tmp_path / "train"
    shutil.copytree(local, copy)
    (copy / "aaa-empty").mkdir()  # sorts first: every label moves by one if it is missed
    stock = keras_image.ImageDataGenerator().flow_from_directory(str(copy), shuffle=False)
    branch = lakefs.Branch(repo, f"m-{uuid.uuid4().hex[:8]}", client=client).create("main")
    try:
        branch.object("train/aaa-empty/").upload(b"")
        commit = branch.commit("an empty class folder").get_commit().id
        gen = rk.ImageDataGenerator(storage_options=target.storage_options)
        url = f"lakefs://{repo}/{commit}/train"
        with gen.flow_from_directory(url, shuffle=False) as it:
            assert it.class_indices == stock.class_indices and it.num_classes == 4
            np.testing.assert_array_equal(it.classes, stock.classes)
            assert it.filenames == stock.filenames
    finally:
        branch.delete()


def test_a_dataframe_parses_each_ref_once_and_reads_every_row_at_the_commit(
    target, client, repo, branch, image_dir, monkeypatch
):
    _, df = image_dir
    parsed: list[str] = []
    split = rk_lakefs.split
    monkeypatch.setattr(rk_lakefs, "split", lambda url: parsed.append(url) or split(url))
    rows = df.assign(filename=[f"lakefs://{repo}/{branch}/train/{df['filename'][0]}"]
                     + list(df["filename"][1:]))  # fmt: skip
    gen = rk.ImageDataGenerator(storage_options=target.storage_options)
    with gen.flow_from_dataframe(rows, f"lakefs://{repo}/{branch}/train", shuffle=False) as it:
        commit = head(client, repo, branch)
        assert it.filepaths == [f"lakefs://{repo}/{commit}/train/{n}" for n in df["filename"]]
        rows_parsed = [url for url in parsed if not url.endswith("/")]
        assert parsed and not rows_parsed, rows_parsed  # folders are; rows take their prefix


def test_a_restored_pin_replaces_the_ref_s_commit_in_every_later_path():
    pinner = rk_lakefs.Pinner(filesystems=None)  # type: ignore[arg-type]
    old = rk_lakefs.LakeFSPin("http://lakefs", "repo", "main", "c1")
    new = rk_lakefs.LakeFSPin("http://lakefs", "repo", "main", "c2")
    pinner.repin(old)
    assert pinner.pin("lakefs://repo/main/a.png") == "lakefs://repo/c1/a.png"
    pinner.repin(new)  # a resumed run reads the commit its first run read
    assert pinner.pin("lakefs://repo/main/a.png") == "lakefs://repo/c2/a.png"
    copy = pickle.loads(pickle.dumps(pinner))
    assert copy.pin("lakefs://repo/main/b/c.png") == "lakefs://repo/c2/b/c.png"
