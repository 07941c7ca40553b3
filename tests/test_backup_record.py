"""Both fronts' backups: one record schema, one reader, one staged writer (`backup_record`).

Pure Python: the Keras 3 front's file module imports no Keras, and the Keras 2
front is used only where `tf.keras` is Keras 2 (`GFILES`, its record write).
"""

from __future__ import annotations

import json
import os
import sys
import types
import warnings
from pathlib import Path

import pytest

import remote_keras
from remote_keras.keras_agnostic import backup_record
from remote_keras.keras_agnostic.backup_record import FORMAT, Record

ROOT = Path(__file__).resolve().parents[1]
KERAS2 = remote_keras._front() == "keras2"
FILES = [pytest.param("local", id="os")]
if KERAS2:
    FILES.append(pytest.param("gfile", id="tf.io.gfile"))


@pytest.fixture(params=FILES)
def files(request):
    if request.param == "local":
        return backup_record.LOCAL
    from remote_keras.keras2 import keras_api

    return keras_api.GFILES


FULL = Record(
    epoch=3,
    batch=4,
    fit_shuffle=True,
    python_random=[3, [1, 2, 3], None],
    train={"epoch": 3, "batch": 4, "shard": [0, 2], "seed": 7},
    validation={"epoch": 2, "batch": 0, "shard": [0, 2]},
    datasets=[{"draws": 2}],
    order_origin=1,
    reads="sequence",
    extra_draws=1,
)


def test_a_record_and_its_document_round_trip_through_json():
    text = json.dumps(backup_record.document([Record(epoch=1), FULL], shards=2))
    saved = json.loads(text)
    assert (saved["format"], saved["shards"], len(saved["records"])) == (FORMAT, 2, 2)
    assert backup_record.records_of(saved, 2, "here") == [Record(epoch=1), FULL]
    # A field a front does not write keeps its default; one of no field is left out.
    assert Record.from_json({"epoch": 2, "later": 1}) == Record(epoch=2)
    assert Record.from_json(FULL.to_json()) == FULL


def test_the_reader_refuses_another_shard_count_and_warns_on_another_format(tmp_path):
    saved = backup_record.document([FULL], shards=2)
    with pytest.raises(ValueError, match=r"run of 2 worker\(s\).*this run has 3"):
        backup_record.records_of(saved, 3, "here")
    assert backup_record.records_of(saved, None, "here") == [FULL]  # not checked (Keras 3)
    untold = {"format": FORMAT, "records": [FULL.to_json()]}  # the count from the state
    with pytest.raises(ValueError, match=r"run of 2 worker\(s\).*this run has 1"):
        backup_record.records_of(untold, 1, "here")
    earlier = {"format": 1, "epoch": 3, "batch": 4, "train": None}  # Keras 3's before
    with pytest.warns(UserWarning, match="another version of remote_keras"):
        assert backup_record.records_of(earlier, 1, "here") == []
    assert backup_record.read(str(tmp_path / "none.json"), 1) is None


def test_a_staged_write_keeps_the_previous_file_until_its_commit(tmp_path, files):
    target = str(tmp_path / "backup" / "record.json")
    backup_record.write(target, [Record(epoch=1)], 1, files)
    staged = backup_record.stage(target, json.dumps(backup_record.document([FULL], 1)), files)
    assert backup_record.read(target, 1, files) == [Record(epoch=1)]
    assert os.path.dirname(staged.temporary) == os.path.dirname(target)
    staged.commit()
    assert backup_record.read(target, 1, files) == [FULL]
    assert sorted(os.listdir(tmp_path / "backup")) == ["record.json"]


def test_a_kill_before_the_commit_leaves_a_leftover_the_cleanup_removes(tmp_path, files):
    folder = tmp_path / "backup"
    target = str(folder / "record.json")
    backup_record.write(target, [Record(epoch=1)], 1, files)
    killed = backup_record.stage(target, "{", files)  # killed: never committed
    earlier = [folder / "record.json.4242-0123456789ab.tmp", folder / "record.json.tmp"]
    others = [folder / ".7.tmp.notes.txt", folder / "notes.txt.tmp", folder / "mine.tmp"]
    for path in earlier + others:
        path.write_text("{")
    assert backup_record.read(target, 1, files) == [Record(epoch=1)]
    expected = sorted([killed.temporary, *map(str, earlier)])
    assert backup_record.leftovers([target], files) == expected
    assert backup_record.remove_leftovers([target], files) == expected
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["record.json", *(p.name for p in others)]
    )
    assert backup_record.remove_leftovers([str(tmp_path / "gone" / "x.json")], files) == []


def test_each_process_stages_under_its_own_name(tmp_path, monkeypatch):
    target = str(tmp_path / "latest.weights.h5")
    names = []
    for pid in (101, 202):
        monkeypatch.setattr(os, "getpid", lambda pid=pid: pid)
        names.append(os.path.basename(backup_record.stage(target, "x").temporary))
    assert names == [".101.tmp.latest.weights.h5", ".202.tmp.latest.weights.h5"]
    assert len(backup_record.leftovers([target])) == 2


def _recording(monkeypatch) -> list[tuple[str, str]]:
    """Records the writer's calls, `("stage" | "commit", target name)`, still writing."""
    calls = []
    stage, commit = backup_record.stage, backup_record.Staged.commit

    def recording_stage(path, content, files=backup_record.LOCAL):
        calls.append(("stage", os.path.basename(path)))
        return stage(path, content, files)

    def recording_commit(self):
        calls.append(("commit", os.path.basename(self.path)))
        commit(self)

    monkeypatch.setattr(backup_record, "stage", recording_stage)
    monkeypatch.setattr(backup_record.Staged, "commit", recording_commit)
    return calls


def test_keras3_saves_through_the_shared_writer_in_its_order(tmp_path, monkeypatch):
    from remote_keras.keras3 import backup_files

    calls = _recording(monkeypatch)
    weights, metadata = str(tmp_path / "w.weights.h5"), str(tmp_path / "m.json")
    document = backup_record.document([FULL], 2)
    backup_files.save(
        weights, metadata, lambda p: Path(p).write_bytes(b"w"), {"remote_keras": document}
    )
    assert calls == [
        ("stage", "w.weights.h5"),
        ("stage", "m.json"),
        ("commit", "w.weights.h5"),
        ("commit", "m.json"),  # the commit point
    ]
    # What it reads back: the record, through the one reader.
    fake = types.SimpleNamespace(exists=os.path.exists, File=open)
    monkeypatch.setitem(
        sys.modules, "remote_keras.keras3.keras_src", types.SimpleNamespace(file_utils=fake)
    )
    assert backup_files.saved_record(metadata) == FULL
    # A backup of the previous version (its own dictionary, format 1): a warning, no record.
    Path(metadata).write_text(json.dumps({"epoch": 2, "remote_keras": {"format": 1}}))
    with pytest.warns(UserWarning, match="another version"):
        assert backup_files.saved_record(metadata) is None
    Path(metadata).write_text(json.dumps({"epoch": 2}))  # Keras's own backup
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backup_files.saved_record(metadata) is None


@pytest.mark.skipif(not KERAS2, reason="tf.keras is not Keras 2 here")
def test_keras2_writes_its_records_through_the_shared_writer(tmp_path, monkeypatch):
    from remote_keras.keras2 import backup, keras_api

    calls = _recording(monkeypatch)
    path = str(tmp_path / backup.RECORDS_FILE)
    shard = types.SimpleNamespace(count=2, index=0)
    callback = types.SimpleNamespace(
        _records=[Record(epoch=1)],
        _writes=True,
        train_iterator=types.SimpleNamespace(shard=shard),
        validation_iterator=None,
        state_path=path,
    )
    backup.BackupAndRestore._write(callback, FULL)
    assert calls == [("stage", backup.RECORDS_FILE), ("commit", backup.RECORDS_FILE)]
    assert backup_record.read(path, 2, keras_api.GFILES) == [Record(epoch=1), FULL]
    assert backup.RECORDS_FORMAT == FORMAT


@pytest.mark.parametrize(
    "module", ["keras2/backup.py", "keras3/backup.py", "keras3/backup_files.py"]
)
def test_the_fronts_rename_no_file_themselves(module):
    """Their backup modules stage and commit through `backup_record`, never renaming."""
    source = (ROOT / "remote_keras" / module).read_text()
    assert "backup_record." in source
    for rename in ("os.replace", "os.rename", ".rename(", "gfile.", "GFile(", "json.dump("):
        assert rename not in source, f"{module} calls {rename}"
