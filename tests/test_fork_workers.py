"""Keras's forked worker processes: inherited garbage is not finalized there, deaths end `fit`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# Three fits in one process: threads, `workers=2`, then `workers=2, use_multiprocessing=True`
# (forked workers). Each fit leaves an object in a reference cycle whose finalizer, like
# TensorFlow's traced functions (`atomic_function.__del__`), crashes when it runs in a forked
# child; the parent collects no garbage meanwhile, and a worker's first read collects garbage
# (what botocore's allocations did in the report). `CRASH` instead makes every forked worker
# kill itself with that signal when it reads its first file.
THREE_FITS = textwrap.dedent(
    """
    import gc, json, os, signal, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import keras
    import remote_keras as rk
    from remote_keras.storage.loaders import ObstoreLoader

    spec = json.loads(sys.argv[1])
    home = os.getpid()
    inner = ObstoreLoader(spec["options"])
    collected = []

    class CrashesInAFork:
        def __init__(self):
            self.cycle = self

        def __del__(self):
            if os.getpid() != home:
                os.kill(os.getpid(), signal.SIGSEGV)

    def loader(path):
        if os.getpid() != home and not collected:
            collected.append(True)
            if spec["crash"]:
                os.kill(os.getpid(), getattr(signal, spec["crash"]))
            gc.collect()
        return inner(path)

    gc.disable()  # no collection in the parent: the garbage is still there at the fork
    gen = rk.ImageDataGenerator(rescale=1 / 255, storage_options=spec["options"], loader=loader)
    for kw in ({}, {"workers": 2}, {"workers": 2, "use_multiprocessing": True}):
        it = gen.flow_from_dataframe(
            __import__("pandas").DataFrame(spec["rows"]), spec["url"], target_size=(8, 8),
            batch_size=4, seed=0, **kw)
        model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                  keras.layers.Dense(3, activation="softmax")])
        model.compile("sgd", "categorical_crossentropy")
        try:
            model.fit(it, epochs=2, verbose=0)
        except Exception as exc:
            print("FAILED", json.dumps(str(exc)[-3000:]), flush=True)
            sys.exit(0)
        CrashesInAFork()
        print("FIT", kw, flush=True)
    print("DONE", flush=True)
    """
)


def _three_fits(s3_images, s3_options, crash: str | None, timeout: float) -> str:
    url, df = s3_images
    spec = {"rows": df[["filename", "class"]].to_dict("records"), "url": url,
            "options": s3_options, "crash": crash}  # fmt: skip
    try:
        result = subprocess.run(
            [sys.executable, "-c", THREE_FITS, json.dumps(spec)],
            capture_output=True, text=True, timeout=timeout, check=False,
            env=dict(os.environ, PYTHONPATH=os.getcwd()),
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
        pytest.fail(f"hung for {timeout} s; output so far: {out}")
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@pytest.mark.slow
def test_three_fits_end_when_earlier_fits_left_garbage_that_crashes_in_a_fork(
    s3_images, s3_options
):
    out = _three_fits(s3_images, s3_options, crash=None, timeout=240)
    assert "DONE" in out, out


@pytest.mark.slow
@pytest.mark.parametrize("crash", ["SIGSEGV", "SIGKILL"])
def test_a_worker_killed_by_a_signal_ends_fit_with_an_error(s3_images, s3_options, crash):
    out = _three_fits(s3_images, s3_options, crash=crash, timeout=240)
    line = next((x for x in out.splitlines() if x.startswith("FAILED")), None)
    assert line is not None, out
    message = json.loads(line.split(" ", 1)[1])
    assert f"killed by {crash}" in message
    assert "A Keras worker process (pid " in message
