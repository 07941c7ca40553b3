"""On Keras 2: lakeFS reads pinned to a commit through `fit`, presigned reads straight from the
store, and `DataVersionCallback`'s records (`.lakefs_ref.yaml`) that read the same data again."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import lakefs
import pytest
from lakefs.client import Client
from lakefs_spec import LakeFSFileSystem

import remote_keras as rk
from remote_keras.testing.lakefs_server import LakeFSServer
from tests.helpers import assert_same_batch

KW = dict(target_size=(8, 8), batch_size=4, shuffle=True, seed=7)
DATA_GET = "GET /_presigned/{blob}"


@pytest.fixture(scope="module")
def server(image_dir) -> Iterator[tuple[LakeFSServer, str]]:
    """A presigning lakeFS stand-in whose `images` repository holds the image folder, committed."""
    local, _ = image_dir
    with LakeFSServer(presign=True, data_server=True) as started:
        client = Client(**started.storage_options)
        lakefs.Repository("images", client=client).create(storage_namespace="local://images")
        fs = LakeFSFileSystem(**started.storage_options, skip_instance_cache=True)
        for folder, _, files in os.walk(local):
            for file in files:
                path = os.path.join(folder, file)
                fs.put_file(path, f"lakefs://images/main/train/{os.path.relpath(path, local)}")
        commit = lakefs.Branch("images", "main", client=client).commit("images").get_commit().id
        yield started, commit


def _model(tfk):
    model = tfk.Sequential(
        [tfk.layers.Flatten(input_shape=(8, 8, 3)), tfk.layers.Dense(3, activation="softmax")]
    )
    model.compile("sgd", "categorical_crossentropy")
    return model


@pytest.mark.slow
def test_presigned_pinned_reads_equal_stock_and_go_to_the_store(stock_image, image_dir, server):
    local, _ = image_dir
    lakefs_server, commit = server
    stock = stock_image.ImageDataGenerator().flow_from_directory(local, **KW)
    gen = rk.ImageDataGenerator(storage_options=lakefs_server.storage_options)
    with gen.flow_from_directory("lakefs://images/main/train", **KW) as it:
        assert it.lakefs_pins[0].commit_id == commit
        assert all(p.startswith(f"lakefs://images/{commit}/") for p in it.filepaths)
        lakefs_server.reset()
        lakefs_server.data.reset()
        for i in range(len(stock)):
            assert_same_batch(stock[i], it[i])
        assert lakefs_server.data.reset() == {DATA_GET: it.samples}


@pytest.mark.slow
def test_a_commit_during_fit_changes_nothing_and_the_record_reads_the_same_data(
    tfk, server, tmp_path
):
    lakefs_server, commit = server
    options = lakefs_server.storage_options
    client = Client(**options)
    lakefs.Branch("images", "k2-run", client=client).create("main")
    gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=options)
    record = tmp_path / "ckpt" / "data_version.json"
    fs = LakeFSFileSystem(**options, skip_instance_cache=True)

    class CommitDuringFit(tfk.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:  # another writer replaces an image on the branch and commits
                first = f"lakefs://images/k2-run/train/{it.filenames[0]}"
                fs.pipe(first, fs.cat_file(f"lakefs://images/main/train/{it.filenames[-1]}"))
                lakefs.Branch("images", "k2-run", client=client).commit("change")

    with gen.flow_from_directory("lakefs://images/k2-run/train", **KW) as it:
        before = [it[i] for i in range(len(it))]
        it.set_epoch(0)
        callbacks = [rk.DataVersionCallback(it, record), CommitDuringFit()]
        _model(tfk).fit(it, epochs=2, verbose=0, callbacks=callbacks)
        it.set_epoch(0)
        after = [it[i] for i in range(len(it))]
    for a, b in zip(before, after):
        assert_same_batch(a, b)
    written = json.loads(record.read_text())
    assert [(d["ref"], d["commit_id"]) for d in written["data"]] == [("k2-run", commit)]
    assert options["password"] not in record.read_text()
    refs = list((tmp_path / "ckpt").rglob(".lakefs_ref.yaml"))
    assert refs and rk.read_lakefs_ref(refs[0].parent)["src"].startswith("lakefs://images/")
    urls = rk.pinned_urls(record)
    assert urls == [f"lakefs://images/{commit}/train/"]
    with gen.flow_from_directory(urls[0], **KW) as again:
        for a, b in zip(before, [again[i] for i in range(len(again))]):
            assert_same_batch(a, b)


@pytest.mark.slow
def test_a_resume_reads_the_first_runs_commit_after_the_branch_moved(tfk, server, tmp_path):
    """Keras 2's `BackupAndRestore` restores the pin: the rerun reads the first run's commit."""
    lakefs_server, commit = server
    options = lakefs_server.storage_options
    client = Client(**options)
    lakefs.Branch("images", "k2-resume", client=client).create("main")
    gen = rk.ImageDataGenerator(storage_options=options)
    backup = str(tmp_path / "backup")
    url = "lakefs://images/k2-resume/train"

    class Crash(tfk.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                raise KeyboardInterrupt  # a crash after Keras's backup of step 1

    with gen.flow_from_directory(url, **KW) as it:
        samples = it.samples
        callback = rk.BackupAndRestore(backup, train_iterator=it, save_freq=1)
        with pytest.raises(KeyboardInterrupt):
            _model(tfk).fit(it, epochs=2, verbose=0, callbacks=[callback, Crash()])
    fs = LakeFSFileSystem(**options, skip_instance_cache=True)
    first = next(name for name in fs.ls(f"{url}/cat", detail=False))
    fs.pipe(f"{url}/cat/new.png", fs.cat_file(first))  # one more image, committed
    lakefs.Branch("images", "k2-resume", client=client).commit("one more")
    with gen.flow_from_directory(url, **KW) as it:
        assert it.samples == samples + 1  # the branch's head
        callback = rk.BackupAndRestore(backup, train_iterator=it, save_freq=1)
        lakefs_server.data.reset()
        _model(tfk).fit(it, epochs=2, verbose=0, callbacks=[callback])
        assert it.samples == samples and it.lakefs_pins[0].commit_id == commit
        assert all(p.startswith(f"lakefs://images/{commit}/") for p in it.filepaths)
        assert it.state_dict()["epoch"] == 2
