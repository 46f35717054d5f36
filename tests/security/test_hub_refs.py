"""Issue 34, finding 6 (hub refs): branches and tags share one namespace, so a pinned tag keeps serving its bytes.

The attack: a repository's writer (or a compromised CI token) pushes a branch named ``v1.0`` next to the tag
``v1.0``; every user pinned to ``revision="v1.0"`` then downloads the branch's bytes. The hub must refuse a branch
that takes a tag's name and a tag that takes a branch's name (409 ``Conflict``), and resolve a revision string to
exactly one commit.
"""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from tensorwire import hub as twhub
from tensorwire.hub.server import create_token

from ._hub_helpers import HubProcess

REPO = "acme/model"
V1 = b"weights v1"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub") / "root"
    root.mkdir()
    proc = HubProcess(root)
    proc.token = create_token(root, "acme", scopes=["write:acme"])
    proc.start()
    proc.v1 = twhub.push_files(REPO, {"w.bin": V1}, endpoint=proc.url, token=proc.token)
    twhub.create_tag(REPO, "v1.0", proc.v1, endpoint=proc.url, token=proc.token)
    proc.dev = twhub.push_files(REPO, {"w.bin": b"dev"}, endpoint=proc.url, token=proc.token, revision="dev")
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def _pinned_bytes(hub, revision: str = "v1.0") -> bytes:
    status, _, body = hub.http("GET", f"/{REPO}/resolve/{revision}/w.bin")
    assert status == 200
    return body


def test_a_branch_cannot_shadow_a_tag(hub):
    before = hub.state()
    with pytest.raises(twhub.Conflict, match="share one namespace"):
        twhub.push_files(REPO, {"w.bin": b"evil"}, endpoint=hub.url, token=hub.token, revision="v1.0")
    status, err = hub.json(
        "POST",
        f"/api/tw/repos/{REPO}/commit/v1.0",
        {"files": [{"path": "w.bin", "sha256": hashlib.sha256(V1).hexdigest(), "size": len(V1)}]},
        token=hub.token,
    )
    assert status == 409 and err["error"] == "Conflict"
    assert hub.state()[1] == before[1]  # no commit, no ref
    assert twhub.resolve(REPO, "v1.0", endpoint=hub.url)["commit"] == hub.v1
    assert _pinned_bytes(hub) == V1


def test_a_tag_cannot_shadow_a_branch(hub):
    before = hub.state()
    with pytest.raises(twhub.Conflict, match="share one namespace"):
        twhub.create_tag(REPO, "dev", hub.v1, endpoint=hub.url, token=hub.token)
    status, err = hub.json("POST", f"/api/tw/repos/{REPO}/tag", {"tag": "dev", "revision": hub.v1}, token=hub.token)
    assert status == 409 and err["error"] == "Conflict"
    assert hub.state() == before
    assert twhub.resolve(REPO, "dev", endpoint=hub.url)["commit"] == hub.dev


def test_ref_names_that_a_revision_prefix_would_hide_are_refused(hub):
    before = hub.state()
    for name in ("refs/tags/v2.0", "refs/heads/main"):
        with pytest.raises(twhub.InvalidPath):
            twhub.push_files(REPO, {"w.bin": b"x"}, endpoint=hub.url, token=hub.token, revision=name)
        status, err = hub.json("POST", f"/api/tw/repos/{REPO}/tag", {"tag": name}, token=hub.token)
        assert status == 400 and err["error"] == "InvalidPath"
    assert hub.state()[1] == before[1]


def test_a_store_written_before_the_rule_resolves_the_tag(hub):
    """A branch ``v0.9`` made before branches and tags shared a namespace: the tag wins (as in git); the branch
    stays reachable as ``refs/heads/v0.9`` and can no longer move."""
    twhub.create_tag(REPO, "v0.9", hub.v1, endpoint=hub.url, token=hub.token)
    db = sqlite3.connect(hub.root / "index.sqlite")
    try:
        with db:
            (repo_id,) = db.execute("SELECT id FROM repos WHERE name = ?", (REPO,)).fetchone()
            db.execute(
                "INSERT INTO refs(repo, kind, name, commit_id) VALUES (?, 'branch', 'v0.9', ?)", (repo_id, hub.dev)
            )
    finally:
        db.close()
    assert twhub.resolve(REPO, "v0.9", endpoint=hub.url)["commit"] == hub.v1
    assert _pinned_bytes(hub, "v0.9") == V1
    status, info = hub.json("GET", f"/api/models/{REPO}/revision/v0.9")
    assert status == 200 and info["sha"] == hub.v1
    assert twhub.resolve(REPO, "refs/heads/v0.9", endpoint=hub.url)["commit"] == hub.dev
    assert twhub.resolve(REPO, "refs/tags/v0.9", endpoint=hub.url)["commit"] == hub.v1
    with pytest.raises(twhub.Conflict):
        twhub.push_files(REPO, {"w.bin": b"evil"}, endpoint=hub.url, token=hub.token, revision="v0.9")
