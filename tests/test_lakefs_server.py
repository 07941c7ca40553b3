"""The lakeFS stand-in (`remote_keras.testing.LakeFSServer`), driven through the real clients.

Every check goes through `lakefs_spec.LakeFSFileSystem` or the `lakefs` SDK, except the raw
HTTP auth check. With `REMOTE_KERAS_LAKEFS_URL` (and its key variables) set, the same tests
run against that real lakeFS; the checks of the stand-in's own request counter then skip.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import lakefs
import lakefs.exceptions
import pytest
from lakefs.client import Client
from lakefs_spec import LakeFSFileSystem

from remote_keras.testing.lakefs_server import LakeFSServer, LakeFSTarget, lakefs_target

API = "/api/v1/repositories/{repository}"
HEAD_OBJECT = f"HEAD {API}/refs/{{ref}}/objects"
GET_OBJECT = f"GET {API}/refs/{{ref}}/objects"
GET_REPO = f"GET {API}"
GET_CONFIG = "GET /api/v1/config"
LIST_OBJECTS = f"GET {API}/refs/{{ref}}/objects/ls"
STAT_OBJECT = f"GET {API}/refs/{{ref}}/objects/stat"


@pytest.fixture(scope="session")
def lakefs_env() -> Iterator[LakeFSTarget]:
    """The lakeFS under test: the stand-in unless `REMOTE_KERAS_LAKEFS_URL` is set."""
    with lakefs_target() as target:
        yield target


@pytest.fixture(scope="module", autouse=True)
def _report_target(terminal_line, lakefs_env: LakeFSTarget) -> None:
    terminal_line(f"{__name__}: lakeFS tests run against {lakefs_env}")


@pytest.fixture
def stand_in(lakefs_env: LakeFSTarget) -> LakeFSServer:
    """The stand-in server; tests of its own counters skip against a real lakeFS."""
    if lakefs_env.server is None:
        pytest.skip(f"checks the stand-in itself ({lakefs_env})")
    return lakefs_env.server


@pytest.fixture
def fs(lakefs_env: LakeFSTarget) -> LakeFSFileSystem:
    LakeFSFileSystem.clear_instance_cache()
    return LakeFSFileSystem(**lakefs_env.storage_options)


@pytest.fixture(scope="session")
def client(lakefs_env: LakeFSTarget) -> Client:
    return Client(**lakefs_env.storage_options)


@pytest.fixture(scope="session")
def repo(lakefs_env: LakeFSTarget, client: Client) -> Iterator[str]:
    """A fresh repository with one committed file, `seed.txt`; deleted afterwards."""
    name = f"rk-test-{uuid.uuid4().hex[:8]}"
    prefix = "local://"
    if not lakefs_env.is_stand_in:
        prefix = client.storage_config.default_namespace_prefix or prefix
    namespace = prefix + name if prefix.endswith("/") else f"{prefix}/{name}"
    repository = lakefs.Repository(name, client=client)
    repository.create(storage_namespace=namespace)
    main = repository.branch("main")
    main.object("seed.txt").upload(b"seed", pre_sign=False)
    main.commit("seed")
    yield name
    repository.delete()


@pytest.fixture
def branch(repo: str, client: Client) -> Iterator[str]:
    """A branch of `main` for one test."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    lakefs.Branch(repo, name, client=client).create("main")
    yield name
    lakefs.Branch(repo, name, client=client).delete()


def commit(client: Client, repo: str, branch: str, message: str) -> str:
    return lakefs.Branch(repo, branch, client=client).commit(message).get_commit().id


def test_put_cat_ls_info_rm(fs, repo, branch, lakefs_env):
    root = f"lakefs://{repo}/{branch}/dir"
    fs.pipe(f"{root}/a.bin", b"alpha")
    fs.pipe(f"{root}/sub/b.bin", b"beta!")

    assert fs.cat_file(f"{root}/a.bin") == b"alpha", lakefs_env
    info = fs.info(f"{root}/a.bin")
    assert info["type"] == "file" and info["size"] == 5, lakefs_env
    assert info["checksum"] == hashlib.md5(b"alpha").hexdigest(), lakefs_env
    assert fs.ls(f"{root}/", detail=False, refresh=True) == [
        f"{repo}/{branch}/dir/a.bin",
        f"{repo}/{branch}/dir/sub/",
    ], lakefs_env
    assert fs.info(root)["type"] == "directory", lakefs_env
    assert sorted(fs.find(f"{root}/")) == [
        f"{repo}/{branch}/dir/a.bin",
        f"{repo}/{branch}/dir/sub/b.bin",
    ], lakefs_env

    fs.rm(f"{root}/a.bin")
    assert not fs.exists(f"{root}/a.bin"), lakefs_env
    fs.rm(f"{root}/", recursive=True)
    assert fs.ls(f"lakefs://{repo}/{branch}/", detail=False, refresh=True) == [
        f"{repo}/{branch}/seed.txt"
    ], lakefs_env


def test_staged_and_committed_reads(fs, client, repo, branch, lakefs_env):
    path = "data/x.txt"
    fs.pipe(f"{repo}/{branch}/{path}", b"v1")
    first = commit(client, repo, branch, "v1")
    fs.pipe(f"{repo}/{branch}/{path}", b"v2-staged")

    assert fs.cat_file(f"{repo}/{branch}/{path}") == b"v2-staged", lakefs_env  # branch: staged
    assert fs.cat_file(f"{repo}/{branch}@/{path}") == b"v1", lakefs_env  # `@`: committed only
    assert fs.cat_file(f"{repo}/{first}/{path}") == b"v1", lakefs_env

    second = commit(client, repo, branch, "v2")
    fs.pipe(f"{repo}/{branch}/{path}", b"v3-staged")
    lakefs.Tag(repo, f"pin-{branch}", client=client).create(first)
    assert fs.cat_file(f"{repo}/{first}/{path}") == b"v1", lakefs_env  # commits are immutable
    assert fs.cat_file(f"{repo}/{first[:12]}/{path}") == b"v1", lakefs_env  # id prefix
    assert fs.cat_file(f"{repo}/pin-{branch}/{path}") == b"v1", lakefs_env  # tag
    assert fs.cat_file(f"{repo}/{second}/{path}") == b"v2-staged", lakefs_env
    assert fs.cat_file(f"{repo}/{branch}~1/{path}") == b"v1", lakefs_env
    assert fs.cat_file(f"{repo}/{branch}^1/{path}") == b"v1", lakefs_env
    assert not fs.exists(f"{repo}/main/{path}"), lakefs_env  # other branches are unaffected
    assert lakefs.Reference(repo, branch, client=client).get_commit().id == second, lakefs_env
    lakefs.Tag(repo, f"pin-{branch}", client=client).delete()


def test_range_reads(fs, repo, branch, lakefs_env):
    data = bytes(range(256)) * 40
    path = f"{repo}/{branch}/blob.bin"
    fs.pipe(path, data)

    assert fs.cat_file(path, start=10, end=20) == data[10:20], lakefs_env
    # NB: `cat_file(path, start=-5)` fails in the client (its reader has no `.size`); use tail.
    assert fs.tail(path, 7) == data[-7:], lakefs_env
    with fs.open(path, "rb") as f:
        f.seek(1000)
        assert f.read(24) == data[1000:1024], lakefs_env
        f.seek(len(data) - 3)
        assert f.read(100) == data[-3:], lakefs_env  # the end is clamped
        assert f.read(1) == b"", lakefs_env
    fs.pipe(f"{repo}/{branch}/empty.bin", b"")
    assert fs.cat_file(f"{repo}/{branch}/empty.bin") == b"", lakefs_env


def test_listing_pages(fs, client, repo, branch, lakefs_env):
    names = [f"many/img{i:04d}.png" for i in range(250)]
    target = lakefs.Branch(repo, branch, client=client)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: target.object(n).upload(n.encode(), pre_sign=False), names))
    server = lakefs_env.server
    if server is not None:
        server.reset()

    listed = fs.ls(f"{repo}/{branch}/many/", detail=False, refresh=True)
    assert listed == [f"{repo}/{branch}/{n}" for n in names], lakefs_env
    small_pages = [o.path for o in target.objects(prefix="many/", amount=7)]
    assert small_pages == names, lakefs_env
    if server is not None:
        # The client's default page is 100 objects: 250 objects take 3 pages; 7 per page, 36.
        assert server.reset()[LIST_OBJECTS] == 3 + 36, lakefs_env


def test_bad_credentials(lakefs_env, repo):
    options = dict(lakefs_env.storage_options, password="not-the-secret")
    bad = LakeFSFileSystem(**options, skip_instance_cache=True)

    # `info` / `ls` translate the 401 to a builtin PermissionError ...
    with pytest.raises(PermissionError) as info_error:
        bad.info(f"{repo}/main/seed.txt")
    assert type(info_error.value) is PermissionError, lakefs_env
    # ... but `open` / `cat_file` call `exists()` outside that translation, so the lakefs
    # SDK's PermissionException comes through (it subclasses PermissionError too).
    with pytest.raises(lakefs.exceptions.PermissionException):
        bad.cat_file(f"{repo}/main/seed.txt")

    # Raw HTTP: 401 with lakeFS's JSON error body, with and without credentials.
    url = f"{lakefs_env.endpoint_url.rstrip('/')}/api/v1/repositories"
    wrong = base64.b64encode(f"{options['username']}:{options['password']}".encode()).decode()
    for headers in ({"Authorization": f"Basic {wrong}"}, {}):
        request = urllib.request.Request(url, headers=headers)
        with pytest.raises(urllib.error.HTTPError) as http_error:
            urllib.request.urlopen(request, timeout=10)
        assert http_error.value.code == 401, lakefs_env
        assert "message" in json.loads(http_error.value.read()), lakefs_env


def test_missing_paths_raise_file_not_found(fs, repo, lakefs_env):
    for path in (
        f"{repo}/main/nope.png",
        f"{repo}/no-such-branch/seed.txt",
        f"{repo}/main~99/seed.txt",
        "no-such-repo/main/seed.txt",
    ):
        with pytest.raises(FileNotFoundError):
            fs.info(path)
        with pytest.raises(FileNotFoundError):
            fs.cat_file(path)
        assert not fs.exists(path), (path, lakefs_env)


def test_conflicts_and_errors(client, repo, branch, lakefs_env):
    with pytest.raises(lakefs.exceptions.ConflictException):
        lakefs.Branch(repo, branch, client=client).create("main")
    with pytest.raises(lakefs.exceptions.NotFoundException):
        lakefs.Branch(repo, "other", client=client).create("no-such-ref")
    with pytest.raises(lakefs.exceptions.BadRequestException):  # nothing staged
        lakefs.Branch(repo, branch, client=client).commit("empty")
    writer = lakefs.Branch(repo, branch, client=client).object("seed.txt")
    with pytest.raises(FileExistsError):  # mode "x" sends If-None-Match: *
        writer.upload(b"again", mode="x", pre_sign=False)


def test_metadata_and_content_type(fs, repo, branch, lakefs_env):
    path = f"{repo}/{branch}/meta.json"
    fs.pipe(path, b"{}", metadata={"owner": "remote-keras"}, content_type="application/json")
    info = fs.info(path)
    assert info["metadata"] == {"owner": "remote-keras"}, lakefs_env
    assert info["content-type"] == "application/json", lakefs_env


def test_transaction_commits_and_merges(fs, client, repo, branch, lakefs_env):
    with fs.transaction(repo, branch) as tx:
        fs.pipe(f"{repo}/{tx.branch.id}/tx.txt", b"from a transaction")
        tx.commit(message="add tx.txt", metadata={"run": "42"})

    log = list(lakefs.Branch(repo, branch, client=client).log(max_amount=2))
    assert log[0].message.startswith("Merge"), lakefs_env
    assert (log[1].message, log[1].metadata) == ("add tx.txt", {"run": "42"}), lakefs_env
    assert fs.cat_file(f"{repo}/{branch}@/tx.txt") == b"from a transaction", lakefs_env
    assert not fs.exists(f"{repo}/main/tx.txt"), lakefs_env


def test_merge_conflicts_dirty_branches_and_revert(fs, client, repo, branch, lakefs_env):
    other = f"{branch}-b"
    lakefs.Branch(repo, other, client=client).create(branch)
    source = lakefs.Reference(repo, other, client=client)
    try:
        fs.pipe(f"{repo}/{branch}/same.txt", b"ours")
        commit(client, repo, branch, "ours")
        fs.pipe(f"{repo}/{other}/same.txt", b"theirs")
        commit(client, repo, other, "theirs")
        with pytest.raises(lakefs.exceptions.ConflictException):
            source.merge_into(branch)
        source.merge_into(branch, strategy="source-wins")
        assert fs.cat_file(f"{repo}/{branch}/same.txt") == b"theirs", lakefs_env

        fs.pipe(f"{repo}/{other}/new.txt", b"new")
        commit(client, repo, other, "new")
        fs.pipe(f"{repo}/{branch}/dirty.txt", b"uncommitted")
        with pytest.raises(lakefs.exceptions.BadRequestException):  # dirty destination
            source.merge_into(branch)
        fs.rm(f"{repo}/{branch}/dirty.txt")
        merged = source.merge_into(branch)
        assert fs.cat_file(f"{repo}/{merged}/new.txt") == b"new", lakefs_env

        lakefs.Branch(repo, branch, client=client).revert(merged, parent_number=1)
        head = lakefs.Reference(repo, branch, client=client).get_commit()
        assert head.message.startswith("Revert"), lakefs_env
        assert not fs.exists(f"{repo}/{branch}/new.txt"), lakefs_env
        assert fs.cat_file(f"{repo}/{branch}/same.txt") == b"theirs", lakefs_env
    finally:
        lakefs.Branch(repo, other, client=client).delete()


def test_concurrent_reads(fs, repo, branch, lakefs_env):
    paths = [f"{repo}/{branch}/c/{i}.bin" for i in range(20)]
    for i, path in enumerate(paths):
        fs.pipe(path, bytes([i]) * (100 + i))
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(fs.cat_file, paths * 5))
    assert results == [bytes([i]) * (100 + i) for i in range(20)] * 5, lakefs_env


def test_requests_per_read(stand_in, repo, lakefs_env):
    """Round trips of one image read through lakefs-spec, measured at the stand-in."""
    path = f"lakefs://{repo}/main/seed.txt"
    fs = LakeFSFileSystem(**lakefs_env.storage_options, skip_instance_cache=True)
    stand_in.reset()

    assert fs.cat_file(path) == b"seed"
    # HEAD object (exists) + GET repository (storage id) + GET object, plus GET /config once
    # per client, for the storage config that decides on presigning.
    first = Counter({HEAD_OBJECT: 1, GET_REPO: 1, GET_CONFIG: 1, GET_OBJECT: 1})
    assert stand_in.reset() == first, lakefs_env

    assert fs.cat_file(path) == b"seed"
    per_read = Counter({HEAD_OBJECT: 1, GET_REPO: 1, GET_OBJECT: 1})
    assert stand_in.reset() == per_read, lakefs_env  # 3 requests per cat_file

    with fs.open(path, "rb") as f:
        assert f.read() == b"seed"
    assert stand_in.reset() == per_read, lakefs_env  # 3 requests per open().read()

    assert fs.cat_file(path, pre_sign=False) == b"seed"
    assert stand_in.reset() == Counter({HEAD_OBJECT: 1, GET_OBJECT: 1}), lakefs_env

    fs.info(path)
    assert stand_in.reset() == Counter({STAT_OBJECT: 1}), lakefs_env
    assert not stand_in.errors, stand_in.errors


def test_presign_mode(stand_in, lakefs_env):
    """With `presign=True`, reads redirect to `/_presigned/...` and uploads use staging."""
    with LakeFSServer(presign=True) as server:
        presigned = LakeFSFileSystem(**server.storage_options, skip_instance_cache=True)
        try:
            lakefs.Repository("signed", client=presigned.client).create(
                storage_namespace="local://signed"
            )
            presigned.pipe("signed/main/p.bin", b"presigned bytes")
            counts = server.reset()
            assert counts[f"PUT {API}/branches/{{branch}}/staging/backing"] == 1
            assert counts["PUT /_presigned/{blob}"] == 1

            assert presigned.cat_file("signed/main/p.bin") == b"presigned bytes"
            assert presigned.cat_file("signed/main/p.bin", start=2, end=6) == b"esig"
            counts = server.reset()
            assert counts[GET_OBJECT] == 2 and counts["GET /_presigned/{blob}"] == 2
            assert not server.errors, server.errors
        finally:
            # lakefs keeps the storage config in a process-wide dict; point it back at the
            # main target so later tests do not ask it for presigned URLs.
            Client(**lakefs_env.storage_options).storage_config  # noqa: B018


def test_request_counter_reset(stand_in, fs, repo):
    stand_in.reset()
    fs.info(f"{repo}/main/seed.txt")
    fs.exists(f"{repo}/main/missing.txt")
    assert stand_in.reset() == Counter({STAT_OBJECT: 1, HEAD_OBJECT: 1, LIST_OBJECTS: 1})
    assert stand_in.reset() == Counter()


# --------------------------------------------------------------------------- restarts


def chain(error: BaseException | None) -> list[BaseException]:
    """An exception and its causes / contexts, outermost first."""
    found = []
    while error is not None and len(found) < 10:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


def test_restart_keeps_the_data_and_the_port(tmp_path):
    """Commits, staged writes and deletions, tags and branches survive stop / start."""
    root = tmp_path / "lakefs-data"
    with LakeFSServer(root) as server:
        client = Client(**server.storage_options)
        lakefs.Repository("persist", client=client).create(storage_namespace="local://persist")
        fs = LakeFSFileSystem(**server.storage_options, skip_instance_cache=True)
        fs.pipe("persist/main/a.txt", b"one")
        fs.pipe("persist/main/dir/b.txt", b"two", metadata={"owner": "rk"})
        main = lakefs.Branch("persist", "main", client=client)
        first = main.commit("first", metadata={"run": "1"}).get_commit().id
        fs.pipe("persist/main/a.txt", b"staged")
        fs.rm("persist/main/dir/b.txt")
        lakefs.Tag("persist", "v1", client=client).create(first)
        lakefs.Branch("persist", "dev", client=client).create("main")
        port = server.port

        server.stop()
        assert not server.running and root.joinpath("metadata.sqlite3").is_file()
        server.start()
        assert server.port == port

        fs = LakeFSFileSystem(**server.storage_options, skip_instance_cache=True)
        assert fs.cat_file("persist/main/a.txt") == b"staged"  # staging survived
        assert not fs.exists("persist/main/dir/b.txt")  # so did the staged deletion
        assert fs.cat_file("persist/main@/dir/b.txt") == b"two"
        assert fs.info("persist/main@/dir/b.txt")["metadata"] == {"owner": "rk"}
        assert fs.cat_file("persist/v1/a.txt") == b"one"
        assert fs.cat_file(f"persist/{first[:10]}/a.txt") == b"one"
        assert fs.cat_file("persist/dev/dir/b.txt") == b"two"
        log = list(lakefs.Branch("persist", "main", client=client).log())
        assert [(c.message, c.metadata) for c in log] == [
            ("first", {"run": "1"}),
            ("Repository created", {}),
        ]
        second = main.commit("second").get_commit().id
        assert fs.cat_file("persist/main~1/a.txt") == b"one"
        assert not server.errors, server.errors

    # A new server (as a new process would be) on the same folder serves the same data.
    with LakeFSServer(root) as again:
        fs = LakeFSFileSystem(**again.storage_options, skip_instance_cache=True)
        assert fs.cat_file(f"persist/{second}/a.txt") == b"staged"
        assert fs.ls("persist/main/", detail=False, refresh=True) == ["persist/main/a.txt"]
        with pytest.raises(lakefs.exceptions.BadRequestException):  # nothing staged
            lakefs.Branch("persist", "main", client=Client(**again.storage_options)).commit("x")
        assert not again.errors, again.errors


def test_outage_then_back_on_the_same_port():
    """Stopped, the stand-in refuses connections (pooled ones are dropped); started, it serves."""
    with LakeFSServer() as server:
        client = Client(**server.storage_options)
        lakefs.Repository("outage", client=client).create(storage_namespace="local://outage")
        fs = LakeFSFileSystem(**server.storage_options, skip_instance_cache=True)
        fs.pipe("outage/main/x.bin", b"x" * 1000)
        lakefs.Branch("outage", "main", client=client).commit("x")
        path, port = "outage/main/x.bin", server.port
        assert fs.cat_file(path) == b"x" * 1000  # leaves a keep-alive connection in the pool

        server.stop()
        with pytest.raises(Exception) as caught:
            fs.cat_file(path)
        errors = chain(caught.value)
        assert any(isinstance(e, ConnectionRefusedError) for e in errors), errors

        server.start()
        assert server.port == port
        assert fs.cat_file(path) == b"x" * 1000
        assert not server.errors, server.errors
