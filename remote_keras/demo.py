"""Demo: train from a local S3 server as fast as stock Keras reads local disk.

Run with `python -m remote_keras.demo` (or `make demo`). It starts a real S3
server (`rclone serve s3`) on 127.0.0.1 behind a proxy that adds latency to
every request, writes synthetic photo-like JPEGs to it, and compares one
epoch of stock Keras on local disk with remote_keras over `s3://` URLs, then
trains a small CNN for an epoch from S3.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pandas as pd


def make_dataset(root: str, count: int, seed: int = 0) -> pd.DataFrame:
    """Writes `count` photo-like JPEGs under `root/<class>/` and returns their dataframe."""
    from remote_keras.testing.data import write_photo_dataset

    return write_photo_dataset(root, count, classes=("cats", "dogs"), digits=5, seed=seed)


def images_per_second(iterator) -> float:
    """Reads one full epoch and returns images/s."""
    start = time.perf_counter()
    for i in range(len(iterator)):
        iterator[i]
    return iterator.n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512, help="dataset size (default 512)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added per S3 request")
    parser.add_argument("--size", type=int, default=224, help="target size (default 224)")
    args = parser.parse_args(argv)

    from remote_keras import _quiet

    with _quiet.tensorflow_start():  # TensorFlow's start-up log kept out of the demo's output
        import keras

    from remote_keras import ImageDataGenerator, errors
    from remote_keras.keras3.keras_src import legacy_image
    from remote_keras.testing import ProxyProcess, S3Server

    try:
        import s3fs
    except ImportError as exc:
        raise errors.missing_backend("s3://demo/", exc) from exc

    target = (args.size, args.size)
    with tempfile.TemporaryDirectory() as local, S3Server(buckets=("demo",)) as s3:
        print(f"Writing {args.images} synthetic JPEGs (500x375) ...", flush=True)
        df = make_dataset(local, args.images)
        s3fs.S3FileSystem(**s3.storage_options).put(local + "/", "demo/train/", recursive=True)

        with ProxyProcess(s3.port, delay_s=args.latency_ms / 1000) as proxy:
            options = s3.storage_options
            options["client_kwargs"]["endpoint_url"] = proxy.endpoint_url
            remote_df = df.assign(filename="s3://demo/train/" + df["filename"])

            stock = legacy_image.ImageDataGenerator(rescale=1 / 255).flow_from_dataframe(
                df, local, target_size=target, shuffle=False
            )
            stock_rate = images_per_second(stock)
            print(f"\nOne epoch of {args.images} images, batch 32, {target[0]}x{target[1]}:")
            print(f"  stock Keras, local disk                      {stock_rate:8.0f} images/s")
            for loader in ("auto", "fsspec"):
                gen = ImageDataGenerator(rescale=1 / 255, storage_options=options, loader=loader)
                with gen.flow_from_dataframe(remote_df, target_size=target, shuffle=False) as it:
                    proxy.reset()
                    rate = images_per_second(it)
                    counts = proxy.reset()
                name = "default" if loader == "auto" else 'loader="fsspec"'
                print(
                    f"  remote_keras {name:<15}, s3:// +{args.latency_ms:.0f} ms {rate:8.0f} "
                    f"images/s  ({rate / stock_rate:.2f}x stock; {it.loader_choice})"
                )
            per_image = ", ".join(f"{counts[k] / len(df):.2f} {k}" for k in ("GET", "HEAD", "LIST"))
            print(f"  requests per image: {per_image}")

            model = keras.Sequential(
                [
                    keras.Input(target + (3,)),
                    keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                    keras.layers.MaxPooling2D(4),
                    keras.layers.Conv2D(16, 3, activation="relu"),
                    keras.layers.GlobalAveragePooling2D(),
                    keras.layers.Dense(2, activation="softmax"),
                ]
            )
            model.compile("adam", "categorical_crossentropy", metrics=["accuracy"])
            gen = ImageDataGenerator(rescale=1 / 255, storage_options=options)  # the default
            train = gen.flow_from_dataframe(remote_df, target_size=target, seed=0)
            with train:
                start = time.perf_counter()
                history = model.fit(train, epochs=1, verbose=2)
                seconds = time.perf_counter() - start
            print(
                f"\nmodel.fit, 1 epoch from s3:// (the default loader): {seconds:.1f} s "
                f"({train.n / seconds:.0f} images/s), "
                f"loss {history.history['loss'][-1]:.3f}"
            )


if __name__ == "__main__":
    main()
