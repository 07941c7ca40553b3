"""The stand-in's metadata on disk: one SQLite file (stdlib `sqlite3`) in its data folder.

Every change is written through as it is made, so a stopped server (or a new one on the
same folder) loads everything back: repositories, tags, branch protection, branches,
commits, staging areas, issued upload addresses and used storage namespaces. A commit
stores only its delta against its first parent; trees are rebuilt on load. Object data
stays in the `blobs/` folder next to this file.

All calls come from one thread at a time (the server's state lock).
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from remote_keras.testing.lakefs.model import Branch, Commit, Entry, Repo, Staging, Tree

_SCHEMA = """
CREATE TABLE IF NOT EXISTS repos (id TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS branches (
    repo TEXT, name TEXT, commit_id TEXT NOT NULL, hidden INTEGER NOT NULL,
    PRIMARY KEY (repo, name));
CREATE TABLE IF NOT EXISTS commits (
    repo TEXT, id TEXT, seq INTEGER NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (repo, id));
CREATE TABLE IF NOT EXISTS deltas (
    repo TEXT, commit_id TEXT, path TEXT,
    blob TEXT, checksum TEXT, size INTEGER, mtime INTEGER, content_type TEXT, metadata TEXT);
CREATE INDEX IF NOT EXISTS deltas_by_commit ON deltas (repo, commit_id);
CREATE TABLE IF NOT EXISTS staging (
    repo TEXT, branch TEXT, path TEXT,
    blob TEXT, checksum TEXT, size INTEGER, mtime INTEGER, content_type TEXT, metadata TEXT,
    PRIMARY KEY (repo, branch, path));
CREATE TABLE IF NOT EXISTS pending (blob TEXT PRIMARY KEY, repo TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS namespaces (namespace TEXT PRIMARY KEY);
"""
_Row = tuple[str | None, str | None, int | None, int | None, str | None, str | None]


class StoreClosed(Exception):
    """The server stopped while a request was being served."""


@dataclass
class Snapshot:
    repos: dict[str, Repo]
    pending: dict[str, str]
    namespaces: set[str]
    next_seq: int


def _row(entry: Entry | None) -> _Row:
    if entry is None:
        return (None, None, None, None, None, None)
    metadata = json.dumps(entry.metadata) if entry.metadata else None
    return (entry.blob, entry.checksum, entry.size, entry.mtime, entry.content_type, metadata)


def _entry(repo: Repo, row: _Row) -> Entry | None:
    blob, checksum, size, mtime, content_type, metadata = row
    if blob is None:
        return None
    return Entry(
        repo.address(blob),
        blob,
        checksum or "",
        size or 0,
        mtime or 0,
        content_type or "application/octet-stream",
        json.loads(metadata) if metadata else {},
    )


class Store:
    """Write-through persistence of the stand-in's metadata."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # survives a crash of the process
        self._db.executescript(_SCHEMA)

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreClosed("the lakeFS stand-in was stopped")
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- loading

    def load(self) -> Snapshot:
        """Everything saved so far, with commit trees rebuilt from their deltas."""
        db = self.db
        repos: dict[str, Repo] = {}
        for repo_id, doc in db.execute("SELECT id, doc FROM repos"):
            repos[repo_id] = Repo(repo_id, **json.loads(doc))
        deltas: dict[tuple[str, str], dict[str, Entry | None]] = defaultdict(dict)
        for repo_id, commit_id, path, *row in db.execute(
            "SELECT repo, commit_id, path, blob, checksum, size, mtime, content_type, metadata "
            "FROM deltas ORDER BY rowid"
        ):
            if repo_id in repos:
                deltas[repo_id, commit_id][path] = _entry(repos[repo_id], tuple(row))
        next_seq = 0
        for repo_id, commit_id, seq, doc in db.execute(
            "SELECT repo, id, seq, doc FROM commits ORDER BY seq"
        ):
            next_seq = max(next_seq, seq + 1)
            if repo_id not in repos:
                continue
            repo, fields = repos[repo_id], json.loads(doc)
            delta = deltas.pop((repo_id, commit_id), {})
            parents = fields["parents"]
            entries = dict(repo.commits[parents[0]].tree.entries) if parents else {}
            for path, entry in delta.items():
                if entry is None:
                    entries.pop(path, None)
                else:
                    entries[path] = entry
            repo.commits[commit_id] = Commit(
                id=commit_id, seq=seq, tree=Tree(entries), delta=delta, **fields
            )
        for repo_id, name, commit_id, hidden in db.execute(
            "SELECT repo, name, commit_id, hidden FROM branches"
        ):
            if repo_id in repos:
                repos[repo_id].branches[name] = Branch(commit_id, Staging(), bool(hidden))
        for repo_id, name, path, *row in db.execute(
            "SELECT repo, branch, path, blob, checksum, size, mtime, content_type, metadata "
            "FROM staging ORDER BY rowid"
        ):
            owner = repos.get(repo_id)
            if owner is not None and name in owner.branches:
                owner.branches[name].staging.set(path, _entry(owner, tuple(row)))
        pending = dict(db.execute("SELECT blob, repo FROM pending").fetchall())
        namespaces = {ns for (ns,) in db.execute("SELECT namespace FROM namespaces")}
        return Snapshot(repos, pending, namespaces, next_seq)

    # -- writing

    def save_repo(self, repo: Repo) -> None:
        """Saves a repository's own fields (tags and protection included, not branches)."""
        doc = {
            "creation_date": repo.creation_date,
            "default_branch": repo.default_branch,
            "storage_namespace": repo.storage_namespace,
            "read_only": repo.read_only,
            "tags": repo.tags,
            "protection": repo.protection,
        }
        with self.db as db:
            db.execute("INSERT OR REPLACE INTO repos VALUES (?, ?)", (repo.id, json.dumps(doc)))

    def delete_repo(self, repo_id: str) -> None:
        with self.db as db:
            db.execute("DELETE FROM repos WHERE id = ?", (repo_id,))
            db.execute("DELETE FROM branches WHERE repo = ?", (repo_id,))
            db.execute("DELETE FROM commits WHERE repo = ?", (repo_id,))
            db.execute("DELETE FROM deltas WHERE repo = ?", (repo_id,))
            db.execute("DELETE FROM staging WHERE repo = ?", (repo_id,))
            db.execute("DELETE FROM pending WHERE repo = ?", (repo_id,))

    def add_namespace(self, namespace: str) -> None:
        with self.db as db:
            db.execute("INSERT OR IGNORE INTO namespaces VALUES (?)", (namespace,))

    def save_branch(self, repo_id: str, name: str, branch: Branch) -> None:
        with self.db as db:
            db.execute(
                "INSERT OR REPLACE INTO branches VALUES (?, ?, ?, ?)",
                (repo_id, name, branch.commit_id, int(branch.hidden)),
            )

    def delete_branch(self, repo_id: str, name: str) -> None:
        with self.db as db:
            db.execute("DELETE FROM branches WHERE repo = ? AND name = ?", (repo_id, name))
            db.execute("DELETE FROM staging WHERE repo = ? AND branch = ?", (repo_id, name))

    def save_commit(self, repo_id: str, commit: Commit, from_staging: str | None = None) -> None:
        """Saves a commit and its delta; `from_staging` names the branch it was staged on.

        Args:
            repo_id: The commit's repository.
            commit: The commit.
            from_staging: If set, the delta is that branch's saved staging area (copied
                within the database, not passed in again).
        """
        doc = {
            "parents": commit.parents,
            "committer": commit.committer,
            "message": commit.message,
            "created": commit.created,
            "meta_range_id": commit.meta_range_id,
            "metadata": commit.metadata,
            "generation": commit.generation,
        }
        with self.db as db:
            db.execute(
                "INSERT INTO commits VALUES (?, ?, ?, ?)",
                (repo_id, commit.id, commit.seq, json.dumps(doc)),
            )
            if from_staging is not None:
                db.execute(
                    "INSERT INTO deltas SELECT repo, ?, path, "
                    "blob, checksum, size, mtime, content_type, metadata FROM staging "
                    "WHERE repo = ? AND branch = ? ORDER BY rowid",
                    (commit.id, repo_id, from_staging),
                )
            else:
                db.executemany(
                    "INSERT INTO deltas VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    ((repo_id, commit.id, p, *_row(e)) for p, e in commit.delta.items()),
                )

    def advance(self, repo_id: str, name: str, branch: Branch) -> None:
        """Saves a branch's new head and empties its saved staging area."""
        with self.db as db:
            db.execute("DELETE FROM staging WHERE repo = ? AND branch = ?", (repo_id, name))
            db.execute(
                "UPDATE branches SET commit_id = ? WHERE repo = ? AND name = ?",
                (branch.commit_id, repo_id, name),
            )

    def stage(self, repo_id: str, branch: str, changes: Iterable[tuple[str, Entry | None]]) -> None:
        """Saves staged versions (`None`: a staged deletion)."""
        with self.db as db:
            db.executemany(
                "INSERT OR REPLACE INTO staging VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((repo_id, branch, path, *_row(entry)) for path, entry in changes),
            )

    def unstage(self, repo_id: str, branch: str, paths: Iterable[str]) -> None:
        with self.db as db:
            db.executemany(
                "DELETE FROM staging WHERE repo = ? AND branch = ? AND path = ?",
                ((repo_id, branch, path) for path in paths),
            )

    def add_pending(self, blob: str, repo_id: str) -> None:
        with self.db as db:
            db.execute("INSERT OR REPLACE INTO pending VALUES (?, ?)", (blob, repo_id))

    def remove_pending(self, blob: str) -> None:
        with self.db as db:
            db.execute("DELETE FROM pending WHERE blob = ?", (blob,))
