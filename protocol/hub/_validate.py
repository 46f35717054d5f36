"""Validation of the names that cross the hub's boundary: repo ids, revisions, file paths, digests.

Every function raises :class:`~tensorwire.protocol.hub.errors.InvalidPath` (or ``BadRequest``) with a
message that says what is wrong; none of them touches the disk.
"""

from __future__ import annotations

import re

from .errors import BadRequest, InvalidPath

MAX_REPO_PART = 96
MAX_REF = 200
MAX_PATH = 1024
MAX_PATH_DEPTH = 64

_PART_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_REF_RE = re.compile(r"[A-Za-z0-9._/-]+")
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")


def check_repo_id(repo_id: object) -> str:
    """Return ``repo_id`` if it is ``owner/name`` with safe parts, else raise ``InvalidPath``."""
    if not isinstance(repo_id, str):
        raise InvalidPath("repo id must be a string 'owner/name'")
    parts = repo_id.split("/")
    if len(parts) != 2:
        raise InvalidPath(f"repo id must be 'owner/name', got {repo_id!r:.250}")
    for part in parts:
        if len(part) > MAX_REPO_PART or not _PART_RE.fullmatch(part) or ".." in part:
            raise InvalidPath(
                f"invalid repo id {repo_id!r:.250}: each part must match [A-Za-z0-9][A-Za-z0-9._-]* "
                f"(at most {MAX_REPO_PART} characters, no '..')"
            )
    return repo_id


def check_namespace(name: object) -> str:
    """Return ``name`` if it is a valid owner (the first part of a repo id), else raise ``InvalidPath``."""
    if not isinstance(name, str) or len(name) > MAX_REPO_PART or not _PART_RE.fullmatch(name) or ".." in name:
        raise InvalidPath(f"invalid namespace {str(name)!r:.250}: it must match [A-Za-z0-9][A-Za-z0-9._-]*")
    return name


def check_ref_name(name: object) -> str:
    """Return a valid branch or tag name (``[A-Za-z0-9._/-]``, no ``..``, not a 40-hex commit id)."""
    if not isinstance(name, str) or not name:
        raise InvalidPath("revision name must be a non-empty string")
    if (
        len(name) > MAX_REF
        or not _REF_RE.fullmatch(name)
        or ".." in name
        or name.startswith("/")
        or name.endswith("/")
        or "//" in name
        or name.startswith("-")
    ):
        raise InvalidPath(f"invalid branch or tag name {name!r:.250}")
    if COMMIT_RE.fullmatch(name):
        raise InvalidPath("a branch or tag name cannot look like a commit id (40 hex digits)")
    return name


def check_new_ref_name(name: object) -> str:
    """Return ``name`` if a new branch or tag may take it: a valid name (:func:`check_ref_name`) that does not
    start with ``refs/heads/`` or ``refs/tags/`` (how a revision names branch or tag ``x``, so a ref called that
    could never be reached by its own name). ``refs/pr/1`` and the like stay allowed, as on the HF Hub."""
    check_ref_name(name)
    assert isinstance(name, str)
    if name.startswith(("refs/heads/", "refs/tags/")):
        raise InvalidPath(
            f"a branch or tag name cannot start with 'refs/heads/' or 'refs/tags/' (those prefixes select a branch "
            f"or a tag when resolving a revision), got {name!r:.250}: drop the prefix"
        )
    return name


def check_revision(rev: object) -> str:
    """Return ``rev`` if it is a commit id or a valid branch/tag name."""
    if isinstance(rev, str) and COMMIT_RE.fullmatch(rev):
        return rev
    return check_ref_name(rev)


def check_file_path(path: object) -> str:
    """Return ``path`` if it is a safe relative POSIX path inside a repository.

    Refused: empty, absolute, backslashes, NUL or other control characters, empty components,
    ``.`` or ``..`` components, more than ``MAX_PATH`` characters or ``MAX_PATH_DEPTH`` levels.
    """
    if not isinstance(path, str) or not path:
        raise InvalidPath("file path must be a non-empty string")
    if len(path) > MAX_PATH:
        raise InvalidPath(f"file path longer than {MAX_PATH} characters")
    if path.startswith("/"):
        raise InvalidPath(f"file path must be relative, got {path!r:.250}")
    if "\\" in path:
        raise InvalidPath(f"file path must not contain backslashes: {path!r:.250}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise InvalidPath(f"file path must not contain NUL or control characters: {path!r:.250}")
    parts = path.split("/")
    if len(parts) > MAX_PATH_DEPTH:
        raise InvalidPath(f"file path deeper than {MAX_PATH_DEPTH} levels")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidPath(f"file path has an empty, '.' or '..' component: {path!r:.250}")
    return path


def check_sha256(digest: object) -> str:
    """Return ``digest`` if it is 64 lowercase hex digits."""
    if not isinstance(digest, str) or not SHA256_RE.fullmatch(digest):
        raise BadRequest(f"not a sha256 hex digest: {str(digest)!r:.100}")
    return digest


def check_tree(paths: list[str]) -> None:
    """Refuse a file list where one path is also a folder of another (``a`` and ``a/b``) or repeats."""
    seen: set[str] = set()
    for p in paths:
        if p in seen:
            raise InvalidPath(f"duplicate file path {p!r:.250}")
        seen.add(p)
    for p in paths:
        parts = p.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in seen:
                raise InvalidPath(f"{'/'.join(parts[:i])!r:.250} is both a file and a folder")
