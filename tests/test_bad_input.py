"""Bad input fails at once, naming what is wrong, with the URL's scheme kept."""

from __future__ import annotations

import os
import pickle
import uuid

import fsspec
import pandas as pd
import pytest

import remote_keras as rk
from tests.helpers import noise_png, truncated_jpeg


def _urls(df: pd.DataFrame, prefix: str) -> pd.DataFrame:
    return df.assign(filename=prefix + df["filename"])


def test_full_urls_into_a_missing_bucket_raise_naming_it(s3_images, s3_options):
    _, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with pytest.raises(FileNotFoundError, match=r"No such bucket or prefix: 's3://no-such-bucket'"):
        gen.flow_from_dataframe(_urls(df, "s3://no-such-bucket/pets/"))


def test_full_urls_into_a_missing_prefix_raise_naming_it(s3_images, s3_options):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with pytest.raises(FileNotFoundError, match=rf"'{url}/nope/cat'"):
        gen.flow_from_dataframe(_urls(df, f"{url}/nope/"))


def test_errors_while_checking_filenames_keep_the_scheme(s3_images, s3_options):
    url, df = s3_images
    gen = rk.ImageDataGenerator(storage_options=dict(s3_options, secret="wrong-secret-123"))
    with pytest.raises(PermissionError, match=f"'{url}") as info:
        gen.flow_from_dataframe(_urls(df, f"{url}/"))
    assert "wrong-secret-123" not in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("validate_filenames", [True, False])
def test_no_credentials_at_all_say_where_to_put_them(
    s3_images, s3_options, no_aws_environment, validate_filenames
):
    url, df = s3_images
    options = {k: v for k, v in s3_options.items() if k not in ("key", "secret")}
    gen = rk.ImageDataGenerator(storage_options=options)
    with pytest.raises(
        PermissionError, match=r"No credentials found for 's3://.*AWS_ACCESS_KEY_ID"
    ):
        gen.flow_from_dataframe(df, url, validate_filenames=validate_filenames)[0]


def test_no_lakefs_configuration_says_where_to_put_it(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith("LAKECTL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    from lakefs_spec import LakeFSFileSystem

    LakeFSFileSystem.clear_instance_cache()  # one built from another test's LAKECTL_* settings
    with pytest.raises(PermissionError, match=r"'lakefs://repo/main/train'.*LAKECTL_"):
        rk.ImageDataGenerator().flow_from_directory("lakefs://repo/main/train")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"storage_options": "s3://x"}, TypeError, "`storage_options` must be a dict"),
        ({"loader": "boto3"}, TypeError, "Received: loader='boto3'"),
        ({"loader": 42}, TypeError, "Received: loader=42"),
        ({"on_error": "ignore"}, ValueError, "Received: 'ignore'"),
        ({"workers": 0}, ValueError, "Received: workers=0"),
        ({"prefetch_batches": -1}, ValueError, "Received: prefetch_batches=-1"),
        ({"decode_workers": 0}, ValueError, "Received: decode_workers=0"),
        ({"retries": "often"}, TypeError, "`retries` must be"),
        ({"cache_dir": 3}, TypeError, "`cache_dir` must be"),
    ],
)
def test_bad_arguments_are_rejected_by_the_generator(kwargs, error, message):
    with pytest.raises(error, match=message):
        rk.ImageDataGenerator(**kwargs)


def test_bad_arguments_are_rejected_by_flow_calls(image_dir):
    directory, df = image_dir
    with pytest.raises(ValueError, match="Received: 'ignore'"):
        rk.ImageDataGenerator().flow_from_dataframe(df, directory, on_error="ignore")


def test_reprs_name_the_loader_in_use(image_dir):
    directory, df = image_dir
    assert repr(rk.ImageDataGenerator()) == "<ImageDataGenerator loader='auto'>"
    assert repr(rk.ImageDataGenerator(loader="obstore")) == "<ImageDataGenerator loader='obstore'>"
    with rk.ImageDataGenerator().flow_from_dataframe(df, directory) as it:
        assert "loader=FsspecLoader()" in repr(it)


class FolderStore:
    """A custom loader for `mystore://` URLs, a protocol fsspec does not know."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.read: list[str] = []

    def __call__(self, path: str) -> bytes:
        self.read.append(path)
        with open(os.path.join(self.root, path.removeprefix("mystore://images/")), "rb") as f:
            return f.read()


class CheckingFolderStore(FolderStore):
    def exists(self, path: str) -> bool:
        return os.path.isfile(os.path.join(self.root, path.removeprefix("mystore://images/")))


def test_custom_loader_for_an_unknown_protocol_warns_once_and_reads(image_dir):
    directory, df = image_dir
    store = FolderStore(directory)
    with pytest.warns(UserWarning, match="validate_filenames=False") as caught:
        it = rk.ImageDataGenerator().flow_from_dataframe(df, "mystore://images", loader=store)
    assert sum("Cannot check" in str(w.message) for w in caught) == 1
    with it:
        assert it.n == len(df)
        it[0]
    assert store.read and all(path.startswith("mystore://images/") for path in store.read)


def test_custom_loader_exists_is_asked_to_validate(image_dir):
    directory, df = image_dir
    rows = pd.concat([df, pd.DataFrame([{"filename": "cat/missing.png", "class": "cat"}])])
    with pytest.warns(UserWarning, match="Found 1 invalid image filename"):
        it = rk.ImageDataGenerator().flow_from_dataframe(
            rows, "mystore://images", loader=CheckingFolderStore(directory)
        )
    with it:
        assert it.n == len(df)


def test_default_loader_with_an_unknown_protocol_says_to_pass_a_loader(image_dir):
    _, df = image_dir
    with pytest.raises(ValueError, match=r"Unknown protocol in 'mystore://images'.*`loader=`"):
        rk.ImageDataGenerator().flow_from_dataframe(df, "mystore://images")


def _with_truncated_jpeg() -> tuple[pd.DataFrame, str]:
    """A 6x6 JPEG cut short and a whole 6x6 PNG in memory://: their rows, and the JPEG's URL."""
    folder = f"memory://truncated-{uuid.uuid4().hex[:8]}/a"
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{folder}/cut.jpg", truncated_jpeg(0))
    fs.pipe(f"{folder}/whole.png", noise_png(1))
    rows = pd.DataFrame({"filename": [f"{folder}/cut.jpg", f"{folder}/whole.png"], "class": "a"})
    return rows, f"{folder}/cut.jpg"


def test_a_truncated_jpeg_at_its_own_size_raises_naming_it():
    # Pillow decodes lazily: with nothing to convert or resize, a truncated JPEG failed at
    # `np.asarray`, outside the code naming the file, as a bare OSError.
    df, bad = _with_truncated_jpeg()
    with rk.ImageDataGenerator().flow_from_dataframe(df, target_size=(6, 6), shuffle=False) as it:
        with pytest.raises(rk.ImageDecodeError, match=f"'{bad}': OSError: .*truncated") as info:
            it[0]
    assert info.value.url == bad
    copy = pickle.loads(pickle.dumps(info.value))
    assert (type(copy), copy.url, str(copy)) == (rk.ImageDecodeError, bad, str(info.value))


def test_a_truncated_jpeg_at_its_own_size_is_skipped_and_listed():
    df, bad = _with_truncated_jpeg()
    gen = rk.ImageDataGenerator(on_error="skip")
    with gen.flow_from_dataframe(df, target_size=(6, 6), shuffle=False) as it:
        with pytest.warns(UserWarning, match="on_error='skip'"):
            x, _ = it[0]
        assert x.shape[0] == 1
        ((path, reason),) = it.skipped
    assert path == bad and reason.startswith(f"ImageDecodeError: Cannot decode image '{bad}'")
