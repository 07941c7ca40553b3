"""`remote_keras` picks its Keras front from what `tf.keras` is, and says which (DEBUG)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

import remote_keras


@pytest.fixture
def fresh_choice():
    """Forgets the front chosen so far; puts the real choice back afterwards."""
    before = vars(remote_keras).pop("_chosen_front", None)
    yield
    vars(remote_keras).pop("_chosen_front", None)
    if before is not None:
        vars(remote_keras)["_chosen_front"] = before


@pytest.mark.parametrize(
    "legacy, keras_version, expected",
    [
        ("", "3.15.1", "keras3"),
        ("", "2.15.0", "keras2"),  # TensorFlow 2.15: `keras` is Keras 2
        ("1", "3.15.1", "keras2"),  # TF_USE_LEGACY_KERAS=1: tf.keras is tf_keras
        ("0", "3.15.1", "keras3"),
    ],
)
def test_the_front_follows_tf_keras(
    fresh_choice, monkeypatch, caplog, legacy, keras_version, expected
):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", legacy)
    monkeypatch.setattr(remote_keras.keras_lines, "version", lambda name: keras_version)
    monkeypatch.setattr(remote_keras.importlib.util, "find_spec", lambda name: object())
    with caplog.at_level(logging.DEBUG, logger="remote_keras"):
        assert remote_keras._front() == expected
        assert remote_keras._front() == expected  # chosen once
    lines = [r.getMessage() for r in caplog.records if "front" in r.getMessage()]
    assert len(lines) == 1 and f"using the {expected} front" in lines[0], lines


def test_legacy_keras_without_tf_keras_says_what_to_install(fresh_choice, monkeypatch):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    monkeypatch.setattr(
        remote_keras.importlib.util,
        "find_spec",
        lambda name: None if name == "tf_keras" else object(),
    )
    with pytest.raises(ImportError, match="pip install tf-keras"):
        remote_keras._front()


def test_legacy_keras_without_tensorflow_is_keras_3_quietly(fresh_choice, monkeypatch, caplog):
    """TF_USE_LEGACY_KERAS is TensorFlow's: without TensorFlow (an extra), `keras` is Keras 3."""
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    monkeypatch.setattr(remote_keras.keras_lines, "version", lambda name: "3.15.1")
    monkeypatch.setattr(remote_keras.importlib.util, "find_spec", lambda name: None)
    with caplog.at_level(logging.DEBUG, logger="remote_keras"):
        assert remote_keras._front() == "keras3"
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "TensorFlow, which reads it, is not installed" in caplog.records[0].getMessage()


@pytest.mark.slow
def test_names_come_from_the_chosen_front_in_a_fresh_interpreter():
    script = textwrap.dedent(
        """
        import logging, sys
        logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(message)s")
        import remote_keras as rk
        print(rk.ImageDataGenerator.__module__, rk.EpochInputReport.__module__)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    front = remote_keras._front()
    assert f"using the {front} front" in result.stdout
    assert f"remote_keras.{front}.generator remote_keras.keras_agnostic.callbacks" in result.stdout
