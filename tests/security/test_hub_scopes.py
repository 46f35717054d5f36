"""Issue 15, finding 4 (hub): write tokens are scoped; one for namespace A cannot push to B nor flip B's ``private``.

Fine-grained tokens in the manner of the Hugging Face Hub: ``read:``/``write:`` grants on a namespace or one
repository. Every refused request leaves the store exactly as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tensorwire import hub as twhub
from tensorwire.hub.server import create_token

from ._hub_helpers import HubProcess


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub") / "root"
    root.mkdir()
    proc = HubProcess(root)
    proc.admin = create_token(root, "admin", write=True)  # a global write token: the default setup
    proc.alice = create_token(root, "alice", scopes=["write:alice"])
    proc.bob_model = create_token(root, "bob-model", scopes=["write:bob/model", "read:bob"])
    proc.start()
    twhub.push_files("bob/model", {"a.txt": b"bob"}, endpoint=proc.url, token=proc.admin)
    twhub.push_files("bob/secret", {"s.txt": b"secret"}, endpoint=proc.url, token=proc.admin, private=True)
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def test_namespace_write_token_pushes_only_in_its_namespace(hub):
    c = twhub.push_files("alice/x", {"f.txt": b"mine"}, endpoint=hub.url, token=hub.alice)
    assert twhub.resolve("alice/x", endpoint=hub.url)["commit"] == c
    before = hub.state()
    with pytest.raises(twhub.Forbidden):
        twhub.push_files("bob/model", {"a.txt": b"pwned"}, endpoint=hub.url, token=hub.alice)
    with pytest.raises(twhub.Forbidden):
        twhub.push_files("bob/new", {"a.txt": b"squat"}, endpoint=hub.url, token=hub.alice)
    with pytest.raises(twhub.Forbidden):
        twhub.create_tag("bob/model", "evil", endpoint=hub.url, token=hub.alice)
    # the name differs only in case: still bob's namespace
    with pytest.raises(twhub.Forbidden):
        twhub.push_files("BOB/model", {"a.txt": b"pwned"}, endpoint=hub.url, token=hub.alice)
    blobs, state = hub.state()
    assert state == before[1]  # no repository, commit, ref or flag changed (uploaded blobs are content-addressed)


def test_write_token_cannot_flip_anothers_private_flag(hub):
    before = hub.state()
    status, body = hub.json("POST", "/api/tw/repos/bob/secret/settings", {"private": False}, token=hub.alice)
    assert status == 403 and body["error"] == "Forbidden"
    status, body = hub.json("POST", "/api/tw/repos/bob/model/settings", {"private": True}, token=hub.alice)
    assert status == 403
    assert hub.state() == before
    status, body = hub.json("POST", "/api/tw/repos/alice/x/settings", {"private": True}, token=hub.alice)
    assert status in (200, 404)  # its own namespace: allowed (404 only if the push test did not run first)


def test_repository_scope_and_read_scopes(hub):
    c = twhub.push_files("bob/model", {"a.txt": b"v2"}, endpoint=hub.url, token=hub.bob_model)
    assert len(c) == 40
    with pytest.raises(twhub.Forbidden):  # read:bob does not grant writes to bob/secret
        twhub.push_files("bob/secret", {"s.txt": b"x"}, endpoint=hub.url, token=hub.bob_model)
    assert twhub.resolve("bob/secret", endpoint=hub.url, token=hub.bob_model)["private"] is True
    with pytest.raises(twhub.RepositoryNotFound):  # alice's token does not cover bob's private repo
        twhub.resolve("bob/secret", endpoint=hub.url, token=hub.alice)
    listed = {r["repo_id"] for r in twhub.list_repos(hub.url, hub.alice)}
    assert "bob/secret" not in listed and "bob/model" in listed
    status, body = hub.json("GET", "/api/whoami-v2", token=hub.bob_model)
    assert status == 200 and body["auth"]["accessToken"]["role"] == "fineGrained"
    scoped = body["auth"]["accessToken"]["fineGrained"]["scoped"]
    assert {"entity": {"type": "model", "name": "bob/model"}, "permissions": ["repo.content.read", "repo.write"]} in (
        scoped
    )


def test_global_tokens_keep_working(hub):
    reader = create_token(hub.root, "reader", write=False)
    assert twhub.resolve("bob/secret", endpoint=hub.url, token=reader)["private"] is True
    with pytest.raises(twhub.Forbidden):
        twhub.push_files("bob/model", {"a.txt": b"x"}, endpoint=hub.url, token=reader)
    assert len(twhub.push_files("anyone/repo", {"a": b"1"}, endpoint=hub.url, token=hub.admin)) == 40


def test_cli_creates_scoped_tokens(hub):
    run = [sys.executable, "-m", "tensorwire.hub", "token", "create", "--root", str(hub.root), "--name", "ci"]
    out = subprocess.run([*run, "--scope", "write:ci"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert len(twhub.push_files("ci/model", {"a": b"1"}, endpoint=hub.url, token=token)) == 40
    with pytest.raises(twhub.Forbidden):
        twhub.push_files("alice/y", {"a": b"1"}, endpoint=hub.url, token=token)
    bad = subprocess.run([*run, "--scope", "admin:everything"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "scope" in bad.stderr
    both = subprocess.run(
        [*run, "--scope", "write:ci", "--write"], capture_output=True, text=True, timeout=60, env={**os.environ}
    )
    assert both.returncode == 2
