"""Benchmark rows of `image_dataset_from_directory`: Keras's function against remote_keras's.

Keras's own function on local disk, remote_keras's on the same local folder, and
remote_keras's through the S3 server at each latency the benchmark runs
(`--delays`), each a full pass over the dataset (shuffled with a seed, default
bilinear resize to 224x224, batches of 32); with `format="grain"` (Keras 3.13 and
later, `grain` installed), Keras's function on local disk and remote_keras's
through S3 at +20 ms. Client CPU is this process's CPU time per image; the S3
server and the proxies run in other processes.
"""

from __future__ import annotations

KERAS_LOCAL = "idfd: Keras's function, local disk"
OURS_LOCAL = "idfd: remote_keras, local disk"
KERAS_GRAIN_LOCAL = "idfd grain: Keras's function, local disk"
OURS_GRAIN_S3 = "idfd grain: remote_keras, s3 +20 ms"


def ours_s3(delay: int) -> str:
    return f"idfd: remote_keras, s3 +{delay} ms"


def scenarios(
    bench, s3, proxies, local: str, n: int, target, batch: int, run_epochs, passes
) -> None:
    """Records the rows in `bench` (see `bench/run.py`'s `Bench`); `passes` times one pass."""
    import keras

    import remote_keras as rk

    repeats = bench.args.repeats
    kwargs = dict(image_size=target, batch_size=batch, seed=0, verbose=False)

    print("image_dataset_from_directory (one pass, shuffled, bilinear):", flush=True)
    bench.record(KERAS_LOCAL, "idfd", run_epochs(
        lambda: keras.utils.image_dataset_from_directory(local, **kwargs), passes, n, repeats))  # fmt: skip
    bench.record(OURS_LOCAL, "idfd", run_epochs(
        lambda: rk.image_dataset_from_directory(local, **kwargs), passes, n, repeats))  # fmt: skip
    for delay, proxy in proxies.items():
        options = bench._options(s3, proxy)
        bench.record(
            ours_s3(delay),
            "s3",
            run_epochs(
                lambda options=options: rk.image_dataset_from_directory(
                    "s3://bench/imagenet", storage_options=options, **kwargs
                ),
                passes,
                n,
                repeats,
                proxy=proxy,
            ),
            delay_ms=delay,
        )
    if 20 not in proxies or not _keras_grain():
        return
    grain = dict(kwargs, format="grain")
    print('image_dataset_from_directory(format="grain") (one pass):', flush=True)
    bench.record(KERAS_GRAIN_LOCAL, "idfd", run_epochs(
        lambda: keras.utils.image_dataset_from_directory(local, **grain), passes, n, repeats))  # fmt: skip
    options = bench._options(s3, proxies[20])
    bench.record(
        OURS_GRAIN_S3,
        "s3",
        run_epochs(
            lambda: rk.image_dataset_from_directory(
                "s3://bench/imagenet", storage_options=options, **grain
            ),
            passes,
            n,
            repeats,
            proxy=proxies[20],
        ),
        delay_ms=20,
    )


def _keras_grain() -> bool:
    """Whether Keras's function has `format="grain"` (3.13 and later) and grain is installed."""
    import importlib.util

    import keras

    major, minor = (int(part) for part in keras.__version__.split(".")[:2])
    return (major, minor) >= (3, 13) and importlib.util.find_spec("grain") is not None


def targets(results: dict) -> list[str]:
    """Issue 22's targets for these rows, each with the measured ratio."""
    keras_local = results.get(KERAS_LOCAL)
    if not keras_local:
        return []
    rate, cpu = keras_local["images_per_s"], keras_local["cpu_ms_per_image"]
    lines = []
    for name, goal in ((OURS_LOCAL, None), (ours_s3(0), None), (ours_s3(20), 0.9),
                       (ours_s3(100), 0.8)):  # fmt: skip
        row = results.get(name)
        if row is None:
            continue
        wanted = f" (target >= {goal}x)" if goal else ""
        lines.append(
            f"{name} vs Keras's function on local disk: {row['images_per_s'] / rate:.2f}x "
            f"images/s{wanted}; client CPU/image {row['cpu_ms_per_image'] / cpu:.2f}x "
            "(target <= 1.1x)"
        )
    keras_grain, ours_grain = results.get(KERAS_GRAIN_LOCAL), results.get(OURS_GRAIN_S3)
    if keras_grain and ours_grain:
        lines.append(
            f"{OURS_GRAIN_S3} vs Keras's grain path on local disk: "
            f"{ours_grain['images_per_s'] / keras_grain['images_per_s']:.2f}x images/s; client "
            f"CPU/image {ours_grain['cpu_ms_per_image'] / keras_grain['cpu_ms_per_image']:.2f}x"
        )
    return lines
