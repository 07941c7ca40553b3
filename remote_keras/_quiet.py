"""Keeps TensorFlow's start-up log out of the user's console, unless they chose a log level.

Loading TensorFlow (which `import keras` does with its TensorFlow backend) writes lines to
the process's stderr from C++: oneDNN's notice, "Could not find cuda drivers", Abseil's
"All log messages before absl::InitializeLog() ..." banner. Some come from Abseil before
TensorFlow's logging is set up, so `TF_CPP_MIN_LOG_LEVEL` alone does not hide them.

What the package does, only when the user has not set `TF_CPP_MIN_LOG_LEVEL` (decided once,
when `remote_keras` is imported):

- it sets `TF_CPP_MIN_LOG_LEVEL=1` before TensorFlow loads, which hides TensorFlow's INFO
  lines for the process (such as one per `tf.data` epoch end); its warnings and errors still
  show. The variable is left set: TensorFlow reads it lazily, and worker processes inherit it.
- while its lazy attributes (`remote_keras.ImageDataGenerator`, ...) load TensorFlow for the
  first time, the process's stderr (file descriptor 2) goes through a pipe, and a thread
  forwards every line to the real stderr as it comes, except TensorFlow's and Abseil's INFO
  and WARNING log lines. Errors, Python warnings and anything else come through.

A level the user set, to any value, is never changed, and nothing is filtered then.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
import threading
from collections.abc import Iterator

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
LEVEL = "1"  # hides INFO: TensorFlow's warnings and errors still show
JOIN_S = 10.0  # how long the end of a filtered block waits for the last lines

# Whether the user chose TensorFlow's log level (then nothing here changes what it prints).
USER_CHOSE = LEVEL_VARIABLE in os.environ

# TensorFlow's and Abseil's INFO and WARNING lines: `I0000 00:00:1796221285.132187  9810
# cudart_stub.cc:31] ...` (Abseil), `2026-01-01 12:00:00.000000: W tensorflow/...:153] ...`
# (TensorFlow's own), and Abseil's banner about logging before it is initialized.
_NOISE = re.compile(
    rb"(WARNING: All log messages before absl::InitializeLog\(\) is called are written to"
    rb" STDERR"
    rb"|[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\s\]]+:\d+\] .*"
    rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] [^\s\]]+:\d+\] .*)\r?\n?"
)


def set_level() -> None:
    """Sets `TF_CPP_MIN_LOG_LEVEL` when the user has not (called on the package's import)."""
    if not USER_CHOSE:
        os.environ.setdefault(LEVEL_VARIABLE, LEVEL)


def tensorflow_installed() -> bool:
    """Whether TensorFlow (an extra: Keras 3 on JAX or PyTorch needs none) can be found."""
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):  # an import hook refusing it; a half-removed module
        return False


@contextlib.contextmanager
def tensorflow_start() -> Iterator[None]:
    """Filters TensorFlow's start-up log from stderr, if this block may be what loads it."""
    if USER_CHOSE or "tensorflow" in sys.modules or not tensorflow_installed():
        yield
        return
    with filtered_stderr():
        yield


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Sends file descriptor 2 through a pipe; a thread forwards all but the log noise.

    Lines are forwarded as they come (a crash's last words are not held back), each once it
    is complete; the block's end waits for the last ones.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no stderr to filter (pythonw, closed)
        yield
        return
    read_end, write_end = os.pipe()
    forward = threading.Thread(
        target=_forward, args=(read_end, saved), name="remote_keras-stderr", daemon=True
    )
    forward.start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last write end closes: the thread reads to its end
        # A process started meanwhile may hold the pipe open: then the thread goes on alone.
        forward.join(JOIN_S)


def _forward(read_end: int, out: int) -> None:
    """Writes every line read from `read_end` to `out` but the noise; closes both at the end."""
    try:
        with open(read_end, "rb", closefd=False) as pipe:
            for line in pipe:
                if not _NOISE.fullmatch(line):
                    while line:
                        line = line[os.write(out, line) :]
    finally:
        os.close(read_end)
        os.close(out)
