"""No secret of a URL (user info, signatures, tokens) reaches a message, cause, pickle or log."""

from __future__ import annotations

import logging
import os
import pickle
import socket

import pandas as pd
import pytest

import remote_keras as rk
from remote_keras import errors
from remote_keras.storage import retry
from remote_keras.testing import StaticHTTPServer

SECRETS = ("pa55wordXYZ", "SIGxSECRETx1", "CREDxSECRETx2", "TOKxSECRETx3", "SASxSECRETx4")
USERINFO = f"user:{SECRETS[0]}@"
QUERY = (
    f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={SECRETS[2]}"
    f"&X-Amz-Signature={SECRETS[1]}&X-Amz-Security-Token={SECRETS[3]}&sig={SECRETS[4]}"
    f"&access_token={SECRETS[3]}&x-id=GetObject"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def texts_of(error: BaseException) -> list[str]:
    """Every text of `error`, its causes and contexts, and of its pickled copy."""
    found: list[str] = []
    seen: set[int] = set()
    pending = [error, pickle.loads(pickle.dumps(error))]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        found += [str(current), repr(current), repr(getattr(current, "args", ""))]
        pending += [current.__cause__, current.__context__]
    return found


@pytest.fixture(scope="module")
def http_root(tmp_path_factory, image_dir):
    local, df = image_dir
    root = tmp_path_factory.mktemp("web")
    os.symlink(local, root / "train")
    (root / "train" / "corrupt.png").write_bytes(b"\x89PNG not really")
    with StaticHTTPServer(root) as server:
        yield server.url, df


def urls(base: str, df: pd.DataFrame) -> dict[str, str]:
    """One URL per failure, each carrying secrets in its user info or query."""
    host = base.split("://", 1)[1]
    good = df["filename"][0]
    return {
        "missing, user info": f"http://{USERINFO}{host}/train/cat/missing.jpg",
        "missing, presigned": f"http://{host}/train/cat/missing.jpg{QUERY}",
        "corrupt, user info": f"http://{USERINFO}{host}/train/corrupt.png",
        "corrupt, presigned": f"http://{host}/train/corrupt.png{QUERY}",
        "refused, user info": f"http://{USERINFO}127.0.0.1:{free_port()}/train/{good}",
        "refused, presigned": f"http://127.0.0.1:{free_port()}/train/{good}{QUERY}",
    }


def test_no_secret_in_any_error_cause_pickle_or_log(http_root, caplog, monkeypatch):
    base, df = http_root
    monkeypatch.setattr(retry, "WARN_AFTER_S", 0.0)  # every retried read is logged
    caplog.set_level(logging.DEBUG, logger="remote_keras")
    policy = rk.RetryPolicy(attempts=2, backoff_s=0.01, timeout_s=5)
    seen: list[str] = []
    for what, url in urls(base, df).items():
        frame = pd.DataFrame({"filename": [url], "class": ["cat"]})
        gen = rk.ImageDataGenerator(loader="fsspec", retries=policy)
        with gen.flow_from_dataframe(frame, validate_filenames=False, target_size=(8, 8)) as it:
            with pytest.raises(Exception) as info:
                it[0]
        texts = texts_of(info.value)
        leaks = [t for t in texts if any(s in t for s in SECRETS)]
        assert not leaks, (what, leaks)
        assert errors.redact(url) in str(info.value), (what, str(info.value))
        seen.append(type(info.value).__name__)
    assert set(seen) >= {"FileNotFoundError", "ImageDecodeError", "ImageLoadError"}, seen
    records = [r.getMessage() for r in caplog.records]
    assert any("being retried" in m for m in records), records
    assert not [m for m in records if any(s in m for s in SECRETS)]
    assert not [r for r in caplog.records if r.exc_text and any(s in r.exc_text for s in SECRETS)]


def test_scrub_masks_user_info_and_secret_query_values_in_free_text():
    text = f"GET http://{USERINFO}h:1/k{QUERY} failed; see https://h/x?max-keys=5&key=v&sv=1"
    clean = errors.scrub(text)
    assert not [s for s in SECRETS if s in clean] and "key=v" not in clean, clean
    assert "http://***@h:1/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***" in clean
    assert "max-keys=5" in clean and "sv=1" in clean and "x-id=GetObject" in clean


def test_sanitize_replaces_a_cause_whose_own_str_shows_a_secret():
    class ClientResponseError(Exception):  # a client that builds its text from attributes
        status = 503

        def __str__(self) -> str:
            return f"503, url='http://{USERINFO}h/k'"

    error = errors.translate("http://h/k", ClientResponseError())
    cause = error.__cause__
    assert type(cause) is Exception and cause.status == 503, repr(cause)
    assert "ClientResponseError: 503, url='http://***@h/k'" == str(cause)
    assert retry.is_transient(error)
