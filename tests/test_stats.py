"""Running statistics of an iterator."""

from __future__ import annotations

import pytest

import remote_keras as rk


def test_stats_count_images_bytes_requests_and_cache_hits(
    image_dir, s3_images, s3_options, tmp_path
):
    import os

    local, _ = image_dir
    url, df = s3_images
    size = sum(os.path.getsize(os.path.join(local, name)) for name in df["filename"])
    gen = rk.ImageDataGenerator(storage_options=s3_options, cache_dir=str(tmp_path))
    with gen.flow_from_dataframe(df, url, target_size=(6, 6), batch_size=7) as it:
        assert it.stats == rk.LoaderStats(loader="obstore for s3://")  # loader="auto"
        for _ in range(2):  # epoch 2 comes from the disk cache
            for i in range(len(it)):
                it[i]
            it.on_epoch_end()
        stats = it.stats
    assert stats.batches == 2 * len(it) and stats.images == 2 * len(df)
    assert stats.requests == len(df) and stats.cache_hits == len(df)
    assert stats.bytes == 2 * size
    assert stats.decode_s > 0 and stats.fetch_s > 0 and stats.wait_s > 0
    assert stats.images_per_s > 0 and stats.retries == 0 and stats.skipped == 0


@pytest.mark.slow
def test_rates_and_waits_are_wall_clock_and_exclude_time_away(image_dir):
    import time

    directory, df = image_dir
    gen = rk.ImageDataGenerator()
    with gen.flow_from_dataframe(
        df, directory, target_size=(6, 6), batch_size=3, workers=4, prefetch_batches=0
    ) as it:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(4) as pool:  # four callers waiting at once
            list(pool.map(lambda i: it[i], range(len(it))))
        time.sleep(1.0)  # the caller away, e.g. training
        it[0]
        stats = it.stats
    assert stats.wait_s <= stats.elapsed_s
    assert stats.load_s <= stats.elapsed_s - 0.9  # the second away is not loading time
    assert stats.load_images_per_s > stats.images_per_s
    assert stats.images_per_s == stats.images / stats.elapsed_s
    assert stats.load_images_per_s == stats.images / stats.load_s
