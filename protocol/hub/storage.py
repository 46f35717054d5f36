"""On-disk storage of the model hub: content-addressed blobs plus a SQLite index.

Layout under ``ROOT``::

    ROOT/blobs/ab/abcdef...        one file per distinct content, named by its sha256 (fan-out on 2 hex)
    ROOT/tmp/                      uploads in flight; emptied at start-up
    ROOT/index.sqlite              repos, commits, commit file lists, refs (branches, tags), tokens, uploads

Atomicity. A blob is written to ``ROOT/tmp``, fsynced, checked against its sha256 and only then
renamed into ``ROOT/blobs`` (and the directory fsynced), so a name under ``blobs/`` always holds
complete, verified bytes. A commit checks that every blob it names is present and that its token may use
it (uploaded by that token, or named by a revision it can read: :meth:`Storage.usable_blobs`), then runs one
SQLite transaction (WAL, ``synchronous=FULL``) that inserts the commit row, its file list and
moves the branch. A reader therefore sees either the old head or the new one, never a partial
revision, and a process killed at any point leaves at worst unreferenced blobs or temp files.

This module imports ``sqlite3`` and is only loaded by the server, the CLI and a local cluster that starts a hub
(:func:`create_token`), never by ``import tensorwire.hub``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import secrets
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from . import safetensors_check
from ._validate import (
    COMMIT_RE,
    check_file_path,
    check_namespace,
    check_new_ref_name,
    check_repo_id,
    check_sha256,
    check_tree,
)
from .errors import (
    BadRequest,
    Conflict,
    EntryNotFound,
    HashMismatch,
    InvalidSafetensors,
    PayloadTooLarge,
    RepositoryNotFound,
    RevisionNotFound,
)

SCHEMA_VERSION = 3  # 2: tokens.scopes; 3: uploads
CHUNK = 1 << 20
MAX_FILES_PER_COMMIT = 100_000
MAX_MESSAGE = 64 * 1024
DEFAULT_MAX_BLOB = 64 << 30  # 64 GiB

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS repos (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE COLLATE NOCASE,
    private INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS commits (
    id TEXT PRIMARY KEY,
    repo INTEGER NOT NULL REFERENCES repos(id),
    parent TEXT,
    message TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS commits_repo ON commits(repo);
CREATE TABLE IF NOT EXISTS commit_files (
    commit_id TEXT NOT NULL REFERENCES commits(id),
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    PRIMARY KEY (commit_id, path)
);
CREATE INDEX IF NOT EXISTS commit_files_sha ON commit_files(sha256);
CREATE TABLE IF NOT EXISTS refs (
    repo INTEGER NOT NULL REFERENCES repos(id),
    kind TEXT NOT NULL CHECK (kind IN ('branch', 'tag')),
    name TEXT NOT NULL,
    commit_id TEXT NOT NULL REFERENCES commits(id),
    PRIMARY KEY (repo, kind, name)
);
CREATE TABLE IF NOT EXISTS tokens (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    write INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    scopes TEXT
);
CREATE TABLE IF NOT EXISTS uploads (
    token INTEGER NOT NULL REFERENCES tokens(id),
    sha256 TEXT NOT NULL,
    PRIMARY KEY (token, sha256)
) WITHOUT ROWID;
"""
#: digests per ``IN (...)`` query (SQLite's variable limit is 999 on old builds)
_IN_BATCH = 500


def now_iso() -> str:
    """Current UTC time as ``2024-01-02T03:04:05.678Z`` (the format the HF Hub uses)."""
    t = _dt.datetime.now(_dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def hash_token(token: str) -> str:
    """sha256 hex of a token: what the index stores instead of the token itself."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The Git LFS pointer file for a blob (HF reports its size and git oid for LFS files)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def git_oid(sha256: str, size: int) -> str:
    """git blob sha1 of the LFS pointer of a blob: the ``oid``/``blobId`` the HF API reports."""
    ptr = lfs_pointer(sha256, size)
    return hashlib.sha1(b"blob %d\x00" % len(ptr) + ptr).hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


ACCESS = ("read", "write")
MAX_SCOPES = 100


@dataclass(frozen=True)
class Scope:
    """One grant of a fine-grained token: ``access`` ("read" or "write", which includes read) on a namespace
    (every repository ``name/*``) or on one repository ``owner/name``. Names compare case-insensitively, as
    repository ids do."""

    access: str
    name: str

    @property
    def is_repo(self) -> bool:
        """Whether the scope names one repository (else a namespace)."""
        return "/" in self.name

    def covers(self, repo_id: str) -> bool:
        """Whether ``repo_id`` is this repository, or in this namespace."""
        rid = repo_id.lower()
        return rid == self.name.lower() if self.is_repo else rid.split("/", 1)[0] == self.name.lower()

    def __str__(self) -> str:
        return f"{self.access}:{self.name}"


def parse_scope(text: object) -> Scope:
    """``"write:acme"`` (namespace) or ``"read:acme/bert"`` (repository) as a :class:`Scope`; ``BadRequest``
    if it is neither."""
    if not isinstance(text, str) or ":" not in text:
        raise BadRequest(
            f"a token scope is 'read:NAMESPACE', 'write:NAMESPACE', 'read:OWNER/REPO' or "
            f"'write:OWNER/REPO', got {str(text)!r:.200}"
        )
    access, _, name = text.partition(":")
    if access not in ACCESS:
        raise BadRequest(f"token scope access must be 'read' or 'write', got {access!r:.50}")
    name = check_repo_id(name) if "/" in name else check_namespace(name)
    return Scope(access, name)


@dataclass(frozen=True)
class Token:
    """A known API token: its name and what it may do.

    A *global* token (``scopes`` is None) reads every repository and, when ``write``, writes every one (the
    Hugging Face Hub's "read" and "write" roles). A *fine-grained* token (``scopes`` set) may read the
    repositories its scopes cover and write those covered by a ``write`` scope, nothing else. ``id`` is its row
    in the index (what the record of the blobs it uploaded is keyed by); None for a token not from the index.
    """

    name: str
    write: bool
    scopes: tuple[Scope, ...] | None = None
    id: int | None = None

    def can_read(self, repo_id: str) -> bool:
        """Whether this token may read ``repo_id`` (private or not)."""
        return self.scopes is None or any(s.covers(repo_id) for s in self.scopes)

    def can_write(self, repo_id: str) -> bool:
        """Whether this token may push to, tag, create or change the settings of ``repo_id``."""
        if self.scopes is None:
            return self.write
        return any(s.access == "write" and s.covers(repo_id) for s in self.scopes)

    def can_write_somewhere(self) -> bool:
        """Whether this token may write any repository at all (needed to upload blobs)."""
        return self.write if self.scopes is None else any(s.access == "write" for s in self.scopes)

    @property
    def role(self) -> str:
        """``"read"``, ``"write"`` or ``"fineGrained"``, as the Hugging Face Hub names token kinds."""
        return "fineGrained" if self.scopes is not None else "write" if self.write else "read"


@dataclass(frozen=True)
class Repo:
    """A repository row."""

    id: int
    name: str
    private: bool
    created_at: str


@dataclass(frozen=True)
class Commit:
    """An immutable revision."""

    id: str
    repo: int
    parent: str | None
    message: str
    created_at: str


@dataclass(frozen=True)
class FileEntry:
    """One file of a revision."""

    path: str
    sha256: str
    size: int


class Storage:
    """Blobs on disk plus the SQLite index; safe to share between threads and processes."""

    def __init__(self, root: str | os.PathLike, *, max_blob_size: int = DEFAULT_MAX_BLOB) -> None:
        self.root = Path(root).resolve()
        self.blobs = self.root / "blobs"
        self.tmp = self.root / "tmp"
        self.db_path = self.root / "index.sqlite"
        self.max_blob_size = max_blob_size
        self._init_lock = threading.Lock()
        self.root.mkdir(parents=True, exist_ok=True)
        self.blobs.mkdir(exist_ok=True)
        self.tmp.mkdir(exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(tokens)")}
            if "scopes" not in columns:  # a store made by schema 1: its tokens stay global
                db.execute("ALTER TABLE tokens ADD COLUMN scopes TEXT")
            db.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )

    # ------------------------------------------------------------------ plumbing

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.db_path, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA busy_timeout=30000")
            yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def clean_tmp(self) -> int:
        """Remove leftovers of uploads interrupted by a crash. Call only when no upload runs."""
        n = 0
        for p in self.tmp.iterdir():
            with contextlib.suppress(OSError):
                p.unlink()
                n += 1
        return n

    # ------------------------------------------------------------------ tokens

    def create_token(self, name: str, write: bool = True, scopes: list[str] | None = None) -> str:
        """Create an API token, store its sha256 and return the token (shown once).

        Without ``scopes`` the token is global: it reads everything, and writes everything when ``write``. With
        ``scopes`` (``["write:acme", "read:other/model"]``, see :func:`parse_scope`) it is fine-grained and may
        do only what they grant; ``write`` must then be left at its default.
        """
        if not isinstance(name, str) or not 0 < len(name) <= 200:
            raise BadRequest("token name must be 1 to 200 characters")
        parsed: list[Scope] | None = None
        if scopes is not None:
            if not isinstance(scopes, list) or not 0 < len(scopes) <= MAX_SCOPES:
                raise BadRequest(f"a fine-grained token needs 1 to {MAX_SCOPES} scopes")
            parsed = [parse_scope(x) for x in scopes]
        token = "tw_" + secrets.token_urlsafe(32)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO tokens(name, hash, write, created_at, scopes) VALUES (?, ?, ?, ?, ?)",
                (
                    name,
                    hash_token(token),
                    int(bool(write) and parsed is None),
                    now_iso(),
                    json.dumps([str(x) for x in parsed]) if parsed is not None else None,
                ),
            )
        return token

    def check_token(self, token: str | None) -> Token | None:
        """The :class:`Token` a bearer token stands for, or ``None`` if unknown."""
        if not token or len(token) > 1000:
            return None
        with self._connect() as db:
            row = db.execute(
                "SELECT name, write, scopes, id FROM tokens WHERE hash = ?", (hash_token(token),)
            ).fetchone()
        if row is None:
            return None
        scopes: tuple[Scope, ...] | None = None
        if row[2] is not None:
            try:
                scopes = tuple(parse_scope(x) for x in json.loads(row[2]))
            except (ValueError, TypeError, BadRequest):
                return None  # an unreadable grant grants nothing
        return Token(row[0], bool(row[1]), scopes, int(row[3]))

    # ------------------------------------------------------------------ repos

    def create_repo(self, repo_id: str, *, private: bool = False, exist_ok: bool = False) -> Repo:
        """Create a repository (no revision yet); ``Conflict`` if it exists and not ``exist_ok``."""
        check_repo_id(repo_id)
        with self._transaction() as db:
            row = db.execute("SELECT id, name, private, created_at FROM repos WHERE name = ?", (repo_id,)).fetchone()
            if row is not None:
                if not exist_ok:
                    raise Conflict(f"repository {row[1]} already exists")
                return Repo(row[0], row[1], bool(row[2]), row[3])
            created = now_iso()
            cur = db.execute(
                "INSERT INTO repos(name, private, created_at) VALUES (?, ?, ?)",
                (repo_id, int(private), created),
            )
            return Repo(int(cur.lastrowid or 0), repo_id, bool(private), created)

    def get_repo(self, repo_id: str) -> Repo | None:
        """The repository named ``repo_id`` (case-insensitive), or ``None``."""
        with self._connect() as db:
            row = db.execute("SELECT id, name, private, created_at FROM repos WHERE name = ?", (repo_id,)).fetchone()
        return Repo(row[0], row[1], bool(row[2]), row[3]) if row else None

    def list_repos(self) -> list[Repo]:
        """Every repository, ordered by name."""
        with self._connect() as db:
            rows = db.execute("SELECT id, name, private, created_at FROM repos ORDER BY name").fetchall()
        return [Repo(r[0], r[1], bool(r[2]), r[3]) for r in rows]

    def refs(self, repo: Repo) -> dict[str, dict[str, str]]:
        """``{"branches": {name: commit}, "tags": {name: commit}}``."""
        out: dict[str, dict[str, str]] = {"branches": {}, "tags": {}}
        with self._connect() as db:
            for kind, name, commit in db.execute(
                "SELECT kind, name, commit_id FROM refs WHERE repo = ? ORDER BY name", (repo.id,)
            ):
                out["branches" if kind == "branch" else "tags"][name] = commit
        return out

    def head(self, repo: Repo, branch: str = "main") -> Commit | None:
        """The commit ``branch`` points to, or ``None``."""
        try:
            return self.resolve(repo, f"refs/heads/{branch}")
        except RevisionNotFound:
            return None

    def latest_commit(self, repo: Repo) -> Commit | None:
        """The newest commit of any branch (for listings when ``main`` does not exist)."""
        with self._connect() as db:
            row = db.execute(
                "SELECT c.id, c.repo, c.parent, c.message, c.created_at FROM refs r JOIN commits c "
                "ON c.id = r.commit_id WHERE r.repo = ? AND r.kind = 'branch' "
                "ORDER BY c.created_at DESC LIMIT 1",
                (repo.id,),
            ).fetchone()
        return Commit(*row) if row else None

    # ------------------------------------------------------------------ revisions

    def resolve(self, repo: Repo, revision: str) -> Commit:
        """Resolve a revision of ``repo``, unambiguously: a 40-hex string is a commit id (no ref may look like
        one); ``refs/heads/x`` is branch ``x`` and ``refs/tags/x`` tag ``x``; any other name is the tag or the
        branch of that name. Branches and tags share one namespace (see :meth:`commit`, :meth:`create_tag`), so
        only a store written before that rule can hold both; the tag then wins, as in git, so a pinned tag keeps
        serving its bytes. ``RevisionNotFound`` otherwise."""
        if not isinstance(revision, str) or not revision or len(revision) > 300:
            raise RevisionNotFound(f"invalid revision {str(revision)!r:.100}")
        with self._connect() as db:
            if COMMIT_RE.fullmatch(revision):
                row = db.execute(
                    "SELECT id, repo, parent, message, created_at FROM commits WHERE id = ? AND repo = ?",
                    (revision, repo.id),
                ).fetchone()
                if row:
                    return Commit(*row)
                raise RevisionNotFound(f"revision {revision} not found in {repo.name}")
            kinds: tuple[str, ...] = ("tag", "branch")
            name = revision
            if revision.startswith("refs/heads/"):
                kinds, name = ("branch",), revision[len("refs/heads/") :]
            elif revision.startswith("refs/tags/"):
                kinds, name = ("tag",), revision[len("refs/tags/") :]
            for kind in kinds:
                row = db.execute(
                    "SELECT c.id, c.repo, c.parent, c.message, c.created_at FROM refs r JOIN commits c "
                    "ON c.id = r.commit_id WHERE r.repo = ? AND r.kind = ? AND r.name = ?",
                    (repo.id, kind, name),
                ).fetchone()
                if row:
                    return Commit(*row)
        raise RevisionNotFound(f"revision {revision!r:.200} not found in {repo.name}")

    def files(self, commit: Commit | str) -> list[FileEntry]:
        """The file list of a commit, ordered by path."""
        cid = commit if isinstance(commit, str) else commit.id
        with self._connect() as db:
            rows = db.execute(
                "SELECT path, sha256, size FROM commit_files WHERE commit_id = ? ORDER BY path", (cid,)
            ).fetchall()
        return [FileEntry(*r) for r in rows]

    def file(self, commit: Commit, path: str) -> FileEntry:
        """One file of a commit; ``EntryNotFound`` if absent."""
        with self._connect() as db:
            row = db.execute(
                "SELECT path, sha256, size FROM commit_files WHERE commit_id = ? AND path = ?",
                (commit.id, path),
            ).fetchone()
        if row is None:
            raise EntryNotFound(f"{path!r:.300} not found at revision {commit.id}")
        return FileEntry(*row)

    # ------------------------------------------------------------------ blobs

    def blob_path(self, sha256: str) -> Path:
        """Where the blob ``sha256`` lives (whether or not it exists)."""
        check_sha256(sha256)
        return self.blobs / sha256[:2] / sha256

    def has_blob(self, sha256: str) -> bool:
        """Whether a complete blob with this sha256 is stored."""
        return self.blob_path(sha256).is_file()

    def usable_blobs(self, token: Token, digests: Iterable[str]) -> set[str]:
        """The digests among ``digests`` that ``token`` may name in a commit: blobs it uploaded itself (it sent
        bytes that hash to the digest, see :meth:`upload`), and blobs that a commit of a repository it can read
        names (a public one, or a private one its scopes cover). Any other blob is, to this token, absent: no
        answer of the hub tells it whether such a blob is stored, nor its size."""
        wanted = list(dict.fromkeys(check_sha256(d) for d in digests))
        usable: set[str] = set()
        with self._connect() as db:
            for i in range(0, len(wanted), _IN_BATCH):
                part = wanted[i : i + _IN_BATCH]
                if token.id is not None:
                    marks = ",".join("?" * len(part))
                    usable.update(
                        r[0]
                        for r in db.execute(
                            f"SELECT sha256 FROM uploads WHERE token = ? AND sha256 IN ({marks})", (token.id, *part)
                        )
                    )
                rest = [d for d in part if d not in usable]
                if not rest:
                    continue
                marks = ",".join("?" * len(rest))
                for sha, name, private in db.execute(
                    "SELECT DISTINCT f.sha256, r.name, r.private FROM commit_files f "
                    "JOIN commits c ON c.id = f.commit_id JOIN repos r ON r.id = c.repo "
                    f"WHERE f.sha256 IN ({marks})",
                    rest,
                ):
                    if not private or token.can_read(name):
                        usable.add(sha)
        return usable

    def missing_blobs(self, digests: list[str], token: Token) -> list[str]:
        """The subset of ``digests`` that ``token`` must upload before naming them in a commit (order kept,
        duplicates dropped): those not stored, and those stored that it may not use (:meth:`usable_blobs`) —
        so the answer reveals nothing about blobs the token could not read."""
        uniq = list(dict.fromkeys(check_sha256(d) for d in digests))
        usable = self.usable_blobs(token, uniq)
        return [d for d in uniq if d not in usable or not self.has_blob(d)]

    def upload(
        self, token: Token, stream: BinaryIO, length: int, sha256: str, *, validate_safetensors: bool = False
    ) -> bool:
        """Store a blob as :meth:`put_blob` does and record that ``token`` uploaded it (proof that it holds the
        bytes), so that its commits may name it. Returns ``True`` if the blob was not usable by ``token``
        before (whether or not another upload had stored the same bytes: that is not revealed)."""
        if token.id is None:
            raise BadRequest("only a token of this hub's index can upload blobs")
        known = check_sha256(sha256) in self.usable_blobs(token, [sha256])
        self.put_blob(stream, length, sha256, validate_safetensors=validate_safetensors)
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO uploads(token, sha256) VALUES (?, ?)", (token.id, sha256))
        return not known

    def put_blob(self, stream: BinaryIO, length: int, sha256: str, *, validate_safetensors: bool = False) -> bool:
        """Store ``length`` bytes read from ``stream`` as blob ``sha256``.

        The bytes are streamed to a temp file while hashed, fsynced, checked (``HashMismatch``
        on a wrong digest, ``InvalidSafetensors`` when ``validate_safetensors`` and the header
        lies), then renamed into place. Returns ``True`` if the blob was new, ``False`` if it was
        already stored (the upload is then discarded). Raises ``BadRequest`` if the stream ends
        early and ``PayloadTooLarge`` above ``max_blob_size``.
        """
        check_sha256(sha256)
        if length < 0:
            raise BadRequest("negative length")
        if length > self.max_blob_size:
            raise PayloadTooLarge(f"blob of {length} bytes exceeds the limit of {self.max_blob_size}")
        tmp = self.tmp / f"upload-{uuid.uuid4().hex}"
        h = hashlib.sha256()
        try:
            with open(tmp, "wb") as f:
                left = length
                while left > 0:  # bounded: `left` strictly decreases or we raise
                    chunk = stream.read(min(CHUNK, left))
                    if not chunk:
                        raise BadRequest(f"body ended after {length - left} of {length} bytes")
                    h.update(chunk)
                    f.write(chunk)
                    left -= len(chunk)
                f.flush()
                os.fsync(f.fileno())
            got = h.hexdigest()
            if got != sha256:
                raise HashMismatch(f"uploaded bytes hash to {got}, not {sha256}")
            if validate_safetensors:
                safetensors_check.validate_file(tmp)
            dest = self.blob_path(sha256)
            if dest.is_file():
                return False
            dest.parent.mkdir(exist_ok=True)
            os.replace(tmp, dest)
            _fsync_dir(dest.parent)
            _fsync_dir(self.blobs)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def blob_count(self) -> int:
        """Number of stored blobs."""
        return sum(1 for d in self.blobs.iterdir() if d.is_dir() for p in d.iterdir() if p.is_file())

    # ------------------------------------------------------------------ writes

    def _check_blob(self, entry: FileEntry, usable: bool, validated: dict[str, bool]) -> None:
        """Refuse an entry whose blob the pusher may not use, is absent, has another size or (``.safetensors``)
        does not validate. A blob it may not use gets the very answer an absent one gets, before anything about
        the stored bytes (size, header) is looked at."""
        p = self.blob_path(entry.sha256)
        size: int | None = None
        if usable:
            with contextlib.suppress(FileNotFoundError):
                size = p.stat().st_size
        if size is None:
            raise BadRequest(
                f"blob {entry.sha256} for {entry.path!r:.300} has not been uploaded: upload its bytes "
                "(PUT /api/tw/blobs/SHA256) with this token first; a commit names only blobs its token uploaded "
                "or can read in a revision"
            )
        if size != entry.size:
            raise BadRequest(f"{entry.path!r:.300}: declared size {entry.size}, blob has {size} bytes")
        if entry.path.endswith(".safetensors") and not validated.get(entry.sha256):
            try:
                safetensors_check.validate_file(p)
            except InvalidSafetensors as e:
                raise InvalidSafetensors(f"{entry.path}: {e.message}") from None
            validated[entry.sha256] = True

    def commit(
        self,
        repo_id: str,
        branch: str,
        files: list[dict],
        *,
        message: str | None = None,
        parent: str | None = None,
        check_parent: bool = False,
        mode: str = "replace",
        delete: list[str] | None = None,
        token: Token,
    ) -> Commit:
        """Create a revision on ``branch`` and move the branch to it, atomically, as ``token`` (the pusher).

        ``files`` lists ``{"path", "sha256", "size"}``. With ``mode="replace"`` they are the whole
        tree; with ``mode="merge"`` they are laid over the parent's tree and ``delete`` removes
        paths. With ``check_parent`` the branch must currently point at ``parent`` (``None``: must
        not exist yet), else ``Conflict`` — optimistic concurrency. Every blob must be one ``token``
        may use (:meth:`usable_blobs`), stored with the declared size, and every ``.safetensors`` file
        must validate. ``branch`` must not be the name of a tag (``Conflict``): branches and tags share
        one namespace, so a branch can never shadow a tag.
        """
        check_new_ref_name(branch)
        if mode not in ("replace", "merge"):
            raise BadRequest("mode must be 'replace' or 'merge'")
        if not isinstance(files, list) or len(files) > MAX_FILES_PER_COMMIT:
            raise BadRequest(f"files must be a list of at most {MAX_FILES_PER_COMMIT} entries")
        if message is None:
            message = "Upload with tensorwire"
        if not isinstance(message, str) or len(message) > MAX_MESSAGE:
            raise BadRequest(f"message must be a string of at most {MAX_MESSAGE} characters")
        if parent is not None and (not isinstance(parent, str) or not COMMIT_RE.fullmatch(parent)):
            raise BadRequest("parent must be a 40-hex commit id or null")
        delete = delete or []
        if not isinstance(delete, list) or not all(isinstance(d, str) for d in delete):
            raise BadRequest("delete must be a list of paths")
        for d in delete:
            check_file_path(d)
        entries: list[FileEntry] = []
        for item in files:
            if not isinstance(item, dict):
                raise BadRequest("each file must be an object with path, sha256, size")
            path = check_file_path(item.get("path"))
            sha = check_sha256(item.get("sha256"))
            size = item.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise BadRequest(f"{path!r:.300}: size must be a non-negative integer")
            entries.append(FileEntry(path, sha, size))
        check_tree([e.path for e in entries])

        repo = self.get_repo(check_repo_id(repo_id))
        if repo is None:
            raise RepositoryNotFound(f"repository {repo_id} not found")
        validated: dict[str, bool] = {}
        usable = self.usable_blobs(token, [e.sha256 for e in entries])
        for e in entries:  # verify blobs before the transaction (reads only headers)
            self._check_blob(e, e.sha256 in usable, validated)

        with self._transaction() as db:
            self._refuse_ref_clash(db, repo, branch, "branch")
            row = db.execute(
                "SELECT commit_id FROM refs WHERE repo = ? AND kind = 'branch' AND name = ?",
                (repo.id, branch),
            ).fetchone()
            current = row[0] if row else None
            if check_parent and current != parent:
                raise Conflict(f"branch {branch!r} of {repo.name} is at {current}, not at the expected parent {parent}")
            tree: dict[str, FileEntry] = {}
            if mode == "merge" and current is not None:
                for r in db.execute("SELECT path, sha256, size FROM commit_files WHERE commit_id = ?", (current,)):
                    tree[r[0]] = FileEntry(*r)
            for d in delete:
                if tree.pop(d, None) is None and mode == "merge":
                    raise EntryNotFound(f"cannot delete {d!r:.300}: not in the parent revision")
            for e in entries:
                tree[e.path] = e
            check_tree(list(tree))
            if len(tree) > MAX_FILES_PER_COMMIT:
                raise BadRequest(f"a revision holds at most {MAX_FILES_PER_COMMIT} files")
            created = now_iso()
            body = json.dumps(
                {
                    "repo": repo.name,
                    "parent": current,
                    "message": message,
                    "created_at": created,
                    "files": sorted((e.path, e.sha256, e.size) for e in tree.values()),
                    "nonce": secrets.token_hex(8),
                },
                sort_keys=True,
            ).encode()
            cid = hashlib.sha1(body).hexdigest()
            db.execute(
                "INSERT INTO commits(id, repo, parent, message, created_at) VALUES (?, ?, ?, ?, ?)",
                (cid, repo.id, current, message, created),
            )
            db.executemany(
                "INSERT INTO commit_files(commit_id, path, sha256, size) VALUES (?, ?, ?, ?)",
                [(cid, e.path, e.sha256, e.size) for e in tree.values()],
            )
            db.execute(
                "INSERT INTO refs(repo, kind, name, commit_id) VALUES (?, 'branch', ?, ?) "
                "ON CONFLICT(repo, kind, name) DO UPDATE SET commit_id = excluded.commit_id",
                (repo.id, branch, cid),
            )
        return Commit(cid, repo.id, current, message, created)

    @staticmethod
    def _refuse_ref_clash(db: sqlite3.Connection, repo: Repo, name: str, kind: str) -> None:
        """``Conflict`` if ``name`` is taken by a ref of the other kind (or, for a tag, by any ref): branches and
        tags share one namespace. Call inside the write transaction that creates or moves the ref."""
        rows = {r[0] for r in db.execute("SELECT kind FROM refs WHERE repo = ? AND name = ?", (repo.id, name))}
        if kind == "tag" and "tag" in rows:
            raise Conflict(f"tag {name!r} already exists in {repo.name}; tags never move: pick another name")
        other = "branch" if kind == "tag" else "tag"
        if other in rows:
            raise Conflict(
                f"{name!r} is already a {other} of {repo.name}; branches and tags share one namespace, so a {kind} "
                f"cannot take that name: pick another"
            )

    def create_tag(self, repo_id: str, tag: str, revision: str = "main") -> Commit:
        """Point a new tag at ``revision``. Tags are immutable, and branches and tags share one namespace:
        ``Conflict`` if a tag or a branch of that name exists."""
        check_new_ref_name(tag)
        repo = self.get_repo(check_repo_id(repo_id))
        if repo is None:
            raise RepositoryNotFound(f"repository {repo_id} not found")
        commit = self.resolve(repo, revision)
        with self._transaction() as db:
            self._refuse_ref_clash(db, repo, tag, "tag")
            db.execute(
                "INSERT INTO refs(repo, kind, name, commit_id) VALUES (?, 'tag', ?, ?)",
                (repo.id, tag, commit.id),
            )
        return commit

    def set_private(self, repo_id: str, private: bool) -> Repo:
        """Change a repository's visibility."""
        repo = self.get_repo(check_repo_id(repo_id))
        if repo is None:
            raise RepositoryNotFound(f"repository {repo_id} not found")
        with self._transaction() as db:
            db.execute("UPDATE repos SET private = ? WHERE id = ?", (int(private), repo.id))
        return Repo(repo.id, repo.name, bool(private), repo.created_at)


def create_token(
    root: str | os.PathLike, name: str = "default", write: bool = True, scopes: list[str] | None = None
) -> str:
    """Create an API token in the hub stored at ``root`` and return it (it is stored hashed): what
    :meth:`Storage.create_token` does, for the hub's CLI, its server module and a local cluster that starts a hub.

    ``scopes`` (e.g. ``["write:acme", "read:other/model"]``) makes a fine-grained token limited to those
    namespaces and repositories; without it the token is global (read, and write when ``write``).
    """
    return Storage(root).create_token(name, write, scopes)


__all__ = [
    "Storage",
    "Token",
    "Scope",
    "parse_scope",
    "Repo",
    "Commit",
    "FileEntry",
    "git_oid",
    "lfs_pointer",
    "now_iso",
    "create_token",
]
