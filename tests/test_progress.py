"""Progress bars for long listings and dataframe checks, and turning them off."""

from __future__ import annotations

import threading
import time

import pytest

import remote_keras as rk
from remote_keras.storage import progress
from remote_keras.storage.listing import trees


@pytest.fixture
def immediate_bars(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "REFRESH_S", 0.1)


@pytest.fixture
def terminal(monkeypatch):
    monkeypatch.setattr(progress, "_redraws", lambda: True)


def test_listing_a_prefix_shows_a_bar_counting_objects(
    immediate_bars, s3_images, s3_options, capsys
):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_directory(url, target_size=(8, 8)) as it:
        assert it.samples == len(df)
    err = capsys.readouterr().err
    assert f"Listing {url}" in err
    assert "objects" in err
    assert s3_options["secret"] not in err


def test_a_slow_listing_keeps_the_bar_ticking(
    immediate_bars, terminal, monkeypatch, s3_images, s3_options, capsys
):
    url, _ = s3_images
    real_find, real_tick = trees.find, progress._tick
    ticks = threading.Semaphore(0)

    def counting_tick(bar, stop):
        redraw = bar.refresh

        def refresh(*args, **kwargs):
            redraw(*args, **kwargs)
            ticks.release()

        bar.refresh = refresh
        real_tick(bar, stop)

    def slow_find(*args, **kwargs):
        # One blocking call, like paging through a million keys: it lasts three redraws.
        for _ in range(3):
            assert ticks.acquire(timeout=60), "the bar was not redrawn while the listing waited"
        return real_find(*args, **kwargs)

    monkeypatch.setattr(progress, "_tick", counting_tick)
    monkeypatch.setattr(trees, "find", slow_find)
    with rk.ImageDataGenerator(storage_options=s3_options).flow_from_directory(url):
        pass
    err = capsys.readouterr().err
    # Drawn when it started, redrawn three times with the elapsed time, and once when closed.
    assert err.count(f"Listing {url}") >= 4


@pytest.mark.slow
def test_a_bar_written_to_a_file_is_not_redrawn(
    immediate_bars, monkeypatch, s3_images, s3_options, capsys
):
    url, _ = s3_images
    real_find = trees.find

    def slow_find(*args, **kwargs):
        time.sleep(0.5)  # five ticks' time: a bar written to a file must not use them
        return real_find(*args, **kwargs)

    monkeypatch.setattr(trees, "find", slow_find)
    with rk.ImageDataGenerator(storage_options=s3_options).flow_from_directory(url):
        pass
    err = capsys.readouterr().err  # not a terminal: what a log file gets
    assert 1 <= err.count(f"Listing {url}") <= 2  # its first and final state, no ticking


def test_checking_a_dataframe_shows_a_bar_with_a_total(
    immediate_bars, s3_images, s3_options, capsys
):
    url, df = s3_images
    urls = df.assign(filename=[f"{url}/{name}" for name in df["filename"]])
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_dataframe(urls, target_size=(8, 8)):
        pass
    err = capsys.readouterr().err
    assert f"Checking {len(df)} files" in err
    assert f"{len(df)}/{len(df)}" in err


@pytest.mark.parametrize("how", ["argument", "generator", "environment"])
def test_bars_can_be_turned_off(immediate_bars, monkeypatch, s3_images, s3_options, capsys, how):
    url, _ = s3_images
    if how == "environment":
        monkeypatch.setenv("TQDM_DISABLE", "1")
    gen = rk.ImageDataGenerator(storage_options=s3_options, progress=how != "generator")
    kwargs = {"progress": False} if how == "argument" else {}
    with gen.flow_from_directory(url, **kwargs):
        pass
    assert "Listing" not in capsys.readouterr().err


def test_quick_work_shows_no_bar(s3_images, s3_options, capsys):
    url, _ = s3_images
    with rk.ImageDataGenerator(storage_options=s3_options).flow_from_directory(url):
        pass
    assert "Listing" not in capsys.readouterr().err  # well under the 2 s delay


def test_s3_listing_counts_keys_page_by_page(immediate_bars, s3_images, s3_options, capsys):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    for _ in range(2):  # the page hook is removed after each listing: no double counting
        with gen.flow_from_directory(url, target_size=(8, 8)):
            pass
        err = capsys.readouterr().err
        # The S3 pages hold the 21 keys; the listing's inferred folders are not counted.
        assert f"{len(df)} objects" in err.split("\r")[-1]
        assert s3_options["secret"] not in err
