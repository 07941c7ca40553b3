"""Progress bars for long start-up work (listing a big prefix, checking a big dataframe).

A bar appears only when the work takes longer than `DELAY_S` seconds, and
shows the elapsed time even while one blocking listing call runs; S3
listings count their keys page by page (`storage.find`). When stderr is
not a terminal (a log file, CI) a bar is not redrawn: it writes at most
every `LOG_INTERVAL_S` seconds, and its final state. Turn bars
off with `progress=False` on the generator or `flow_from_*`, or with the
environment variable `TQDM_DISABLE=1`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading

if importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm  # a notebook widget in Jupyter, text elsewhere
else:  # tqdm.auto in Jupyter without ipywidgets warns "IProgress not found": a text bar
    from tqdm.std import tqdm

DELAY_S = 2.0
REFRESH_S = 0.5
LOG_INTERVAL_S = 60.0  # between a bar's lines when stderr is a file


@contextlib.contextmanager
def progress_bar(description: str, enabled: bool, unit: str, total: int | None = None):
    """Yields a `tqdm` bar (disabled when not `enabled`) kept fresh by a ticker thread."""
    if os.environ.get("TQDM_DISABLE", "").strip().lower() in ("1", "true", "yes"):
        enabled = False
    live = _redraws()
    bar = tqdm(
        desc=description, total=total, unit=f" {unit}", delay=DELAY_S, disable=not enabled,
        **({} if live else {"mininterval": LOG_INTERVAL_S}),
    )  # fmt: skip
    if bar.disable or not live:
        with contextlib.closing(bar):
            yield bar
        return
    stop = threading.Event()
    ticker = threading.Thread(
        target=_tick, args=(bar, stop), name="remote_keras-progress", daemon=True
    )
    ticker.start()
    try:
        yield bar
    finally:
        stop.set()
        ticker.join()
        bar.close()


def _redraws() -> bool:
    """Whether bars are redrawn in place: a terminal, or a notebook's widget."""
    if tqdm.__module__.startswith("tqdm.notebook"):
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def _tick(bar, stop: threading.Event) -> None:
    while not stop.wait(REFRESH_S):
        if bar._time() - bar.start_t >= DELAY_S:
            bar.refresh()
