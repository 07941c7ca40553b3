"""Every ```python block of the pages under docs/guide/ runs as written, against local servers.

Each page is read top to bottom: its ```python blocks run in order in one namespace, in a
temporary working directory, and tracebacks point at the page's own lines. Fences of
other languages (```bash) are not run; a fence of an unknown language fails.

What the blocks read: S3 (`remote_keras.testing.S3Server`) with the bucket `my-bucket`
holding `train/`, and the lakeFS stand-in with a repository `images` whose `main` holds
`train/`, both the test suite's class-folder tree, configured only through the
environment (`AWS_*`, `LAKECTL_*`), as a user's would be.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from remote_keras.testing import LakeFSServer, S3Server
from tests.conftest import write_tree

pytestmark = pytest.mark.slow

PAGES = sorted((Path(__file__).resolve().parents[1] / "docs" / "guide").glob("*.md"))
NOT_PYTHON = {"bash", ""}


def blocks(page: Path) -> list[tuple[str, int, str]]:
    """`(language, line of the first line of code, code)` of every fenced block of `page`."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if fence:
            indent, lang = fence.groups()
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(indent + "```"))
            found.append((lang, i + 2, textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"))
            i = end
        i += 1
    return found


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The servers and environment the guide's blocks read, and a working directory."""
    import lakefs
    import s3fs
    from lakefs.client import Client
    from lakefs_spec import LakeFSFileSystem

    work = tmp_path_factory.mktemp("guide")
    tree = work / "tree"
    write_tree(tree, per_class=4)
    write_tree(work / "s3" / "my-bucket" / "train", per_class=4)
    with (
        S3Server(root=work / "s3", buckets=("my-bucket",)) as s3,
        LakeFSServer() as lakefs_server,
        pytest.MonkeyPatch.context() as mp,
    ):
        client = Client(**lakefs_server.storage_options)
        lakefs.Repository("images", client=client).create(storage_namespace="local://images")
        fs = LakeFSFileSystem(**lakefs_server.storage_options)
        for path in sorted(p for p in tree.rglob("*") if p.is_file()):
            fs.put_file(str(path), f"lakefs://images/main/train/{path.relative_to(tree)}")
        lakefs.Branch("images", "main", client=client).commit("images")
        for name in list(os.environ):
            if name.startswith(("AWS_", "LAKECTL_")):
                mp.delenv(name)
        mp.setenv("AWS_ACCESS_KEY_ID", s3.access_key)
        mp.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_key)
        mp.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
        mp.setenv("AWS_CONFIG_FILE", str(work / "no-aws-config"))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(work / "no-aws-credentials"))
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("LAKECTL_SERVER_ENDPOINT_URL", lakefs_server.endpoint_url)
        mp.setenv("LAKECTL_CREDENTIALS_ACCESS_KEY_ID", lakefs_server.access_key_id)
        mp.setenv("LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY", lakefs_server.secret_access_key)
        mp.setenv("LAKECTL_CONFIG_FILE", str(work / "no-lakectl.yaml"))
        cwd = work / "cwd"
        cwd.mkdir()
        mp.chdir(cwd)
        caches = (s3fs.S3FileSystem, LakeFSFileSystem)
        for cls in caches:  # no filesystem made earlier, with other settings, is reused
            cls.clear_instance_cache()
        try:
            yield cwd
        finally:
            for cls in caches:
                cls.clear_instance_cache()


def test_there_are_guide_pages_with_python():
    assert any(lang == "python" for page in PAGES for lang, _, _ in blocks(page))


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_guide_page_runs(world, page):
    found = blocks(page)
    unknown = [(line - 1, lang) for lang, line, _ in found if lang not in NOT_PYTHON | {"python"}]
    assert not unknown, f"{page.name}: fences of unknown language (lines, languages): {unknown}"
    namespace: dict = {"__name__": "__guide__"}
    for lang, line, code in found:
        if lang == "python":
            exec(compile("\n" * (line - 1) + code, str(page), "exec"), namespace)
    if page.name == "migrating.md":  # what the page says its blocks make
        assert (world / "data_version.json").is_file()
        assert namespace["pin"].commit_id in namespace["record"]["data"][0]["urls"][0]
