"""What iterators keep per object at scale: shared-prefix paths and packed presigned addresses."""

from __future__ import annotations

import hashlib
import pickle
import sys

import pytest

from remote_keras.storage.packed_paths import (
    AddressTable,
    PackedNames,
    PrefixedPaths,
    common_prefix,
)


def test_prefixed_paths_read_like_the_list_of_urls_they_replace():
    names = ["a/1.jpg", "a/2.jpg", "b/3.jpg"]
    urls = [f"s3://bucket/train/{name}" for name in names]
    paths = PrefixedPaths("s3://bucket/train/", names)
    assert len(paths) == 3 and paths[1] == urls[1] and paths[-1] == urls[-1]
    assert paths[1:] == urls[1:] and list(paths) == urls
    assert paths == urls and urls == paths and paths != urls[:2] and paths != urls[::-1]
    assert [paths[j] for j in (2, 0)] == [urls[2], urls[0]]
    assert pickle.loads(pickle.dumps(paths)) == urls
    names.append("c/4.jpg")  # the names are shared, not copied
    assert paths[3] == "s3://bucket/train/c/4.jpg"
    with pytest.raises(IndexError):
        paths[4]


def test_packed_names_read_like_the_list_they_replace():
    names = ["cat/1.jpg", "chat/\u00e9t\u00e9.png", "", "dog/\U0001f415.jpg"]
    packed = PackedNames(names)
    assert len(packed) == 4 and [packed[i] for i in range(-4, 4)] == names + names
    assert packed == names and names == packed and list(packed) == names
    assert packed[1:] == names[1:] and packed[::-2] == names[::-2]
    assert packed != names[:3] and packed != names[::-1]
    assert pickle.loads(pickle.dumps(packed)) == names
    assert PackedNames(iter(names)) == names and PackedNames() == []
    for wrong in (4, -5):
        with pytest.raises(IndexError):
            packed[wrong]


def test_packed_names_cost_bytes_per_character_not_an_object_each():
    names = [f"c{i % 1000:04d}/img_{i:07d}.jpg" for i in range(10_000)]  # 21 characters
    as_list = sys.getsizeof(names) + sum(sys.getsizeof(name) for name in names)
    packed = PackedNames(names)
    held = sys.getsizeof(packed._text) + packed._ends.itemsize * len(packed._ends)
    assert held <= (21 + 4) * len(names) + 100  # a byte per character, 4 for its end
    assert as_list > 3 * held


def test_a_listed_folders_names_are_packed_and_filenames_is_kerass_list(
    s3_images, s3_options, image_dir
):
    import json

    from keras.src.legacy.preprocessing import image as keras_image

    import remote_keras as rk

    url, _ = s3_images
    local, _ = image_dir  # the same files
    stock = keras_image.ImageDataGenerator().flow_from_directory(local, target_size=(8, 8))
    gen = rk.ImageDataGenerator(storage_options=s3_options)
    with gen.flow_from_directory(url, target_size=(8, 8)) as it:
        assert isinstance(it._filenames, PackedNames)  # what the iterator holds
        names = it.filenames
        assert isinstance(names, list) and json.loads(json.dumps(names)) == names
        assert names == stock.filenames
        assert names is it.filenames  # made once, then kept


def test_common_prefix_is_found_only_when_every_path_is_prefix_plus_name():
    names = ["a/1.jpg", "b/2.jpg"]
    assert common_prefix([f"lakefs://r/c/{n}" for n in names], names) == "lakefs://r/c/"
    assert common_prefix(["lakefs://r/c/a/1.jpg", "s3://x/b/2.jpg"], names) is None
    assert common_prefix(["lakefs://r/c/a/1.jpg"], names) is None
    assert common_prefix([], []) is None


def _addresses(count: int) -> dict[str, str]:
    out = {}
    for i in range(count):
        blob = f"{i:032x}"
        signature = f"{i * 7919:064x}"
        out[f"train/c0001/{i:06d}.jpg"] = (
            f"http://127.0.0.1:9/_presigned/{blob}?expires=1764700000&signature={signature}"
        )
    return out


def test_an_address_table_gives_back_every_address_and_nothing_else():
    listed = _addresses(500)
    listed["train/c0001/Ünïcode name.jpg"] = "https://store.example/b/ABCdef0123456789abcdef%2F?x=1"
    listed["train/c0001/odd.jpg"] = "http://h/" + "a" * 300 + "?s=" + "0f" * 8 + "g"
    table = AddressTable(dict(reversed(listed.items())))  # any order in
    assert len(table) == len(listed)
    assert dict(table.items()) == listed
    assert table.get("train/c0001/000250.jpg") == listed["train/c0001/000250.jpg"]
    for missing in ("train/c0001/000250.jp", "train/c0001/999999.jpg", "train/c0002/000001.jpg",
                    "", "train/c0001/"):  # fmt: skip
        assert table.get(missing) is None
        assert missing not in table


def test_an_address_table_holds_under_a_third_of_a_dict_of_strings():
    listed = _addresses(1000)
    table = AddressTable(listed)
    as_dict = sys.getsizeof(listed) + sum(
        sys.getsizeof(k) + sys.getsizeof(v) for k, v in listed.items()
    )
    assert table.nbytes() < as_dict / 3
    assert table.nbytes() < 75 * len(listed)


def test_an_empty_table_is_empty():
    table = AddressTable({})
    assert len(table) == 0 and table.get("x") is None and list(table) == []


def test_presign_expects_the_same_folders_from_prefixed_paths_as_from_urls():
    from remote_keras.storage.lakefs.presign import PresignedReader

    names = ["b/2.jpg", "a/1.jpg", "b/3.jpg", "top.jpg", "a/x/4.jpg"]
    prefix = "lakefs://repo/0123abcd/train/"
    listed, prefixed = PresignedReader(), PresignedReader()
    listed.expect([prefix + name for name in names])
    prefixed.expect(PrefixedPaths(prefix, names))
    assert prefixed._expected == listed._expected
    assert ("repo", "0123abcd", "train/a/x/") in prefixed._expected
    assert len(prefixed._expected) == 4
    elsewhere = PresignedReader()
    elsewhere.expect(PrefixedPaths("s3://bucket/train/", names))
    assert elsewhere._expected == []


def test_an_iterators_filepaths_is_kerass_list_while_it_reads_from_the_compact_form(image_dir):
    import json

    import remote_keras as rk

    directory, df = image_dir
    with rk.ImageDataGenerator().flow_from_directory(str(directory), target_size=(8, 8)) as it:
        paths = it.filepaths
        assert isinstance(paths, list) and json.loads(json.dumps(paths)) == paths
        assert isinstance(it._filepaths, PrefixedPaths)  # what batches read from
        assert paths == list(it._filepaths) and paths is not it.filepaths


def test_text_every_address_repeats_costs_a_few_bytes_each():
    """S3-style presigned URLs repeat their credential, date and algorithm: deflated away."""
    listed = {}
    for i in range(400):
        digest = hashlib.sha256(str(i).encode()).hexdigest()  # random-looking: incompressible
        listed[f"train/c0001/{i:06d}.jpg"] = (
            f"https://bucket.s3.us-east-1.amazonaws.com/repo/data/g{digest[:20]}/c{digest[20:44]}"
            "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261203"
            "%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261203T072300Z&X-Amz-Expires=900"
            f"&X-Amz-SignedHeaders=host&X-Amz-Signature={digest[::-1]}"
        )
    table = AddressTable(listed)
    assert dict(table.items()) == listed
    # 266 bytes each once hex runs are raw bytes; the repeated text must not be held per URL
    assert table.nbytes() < 100 * len(listed)
