"""Crash safety of pushes, ``tensorwire.hub.fetch`` caching and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
import safetensors.numpy as stnp

import tensorwire.hub as twhub
from tensorwire.hub.server import create_token
from tensorwire.protocol.hub import client as hubclient


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_import_is_light():
    code = "import sys, tensorwire.hub; print('http.server' in sys.modules or 'sqlite3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_push_killed_before_commit_leaves_previous_revision(tmp_path, hub_factory):
    root = tmp_path / "root"
    token = create_token(root, "w", write=True)
    hub = hub_factory(root)
    repo = "acme/crashy"
    v1 = twhub.push_files(repo, {"config.json": b'{"v": 1}'}, endpoint=hub.url, token=token, replace=True)

    # second push: upload its blobs, then the hub dies before the commit arrives
    new = stnp.save({"w": np.ones((8, 8), dtype=np.float32)})
    for blob in (new, b'{"v": 2}'):
        s, _, _ = hub.http("PUT", f"/api/tw/blobs/{_sha(blob)}", blob, token=token)
        assert s == 201
    # and one more upload is cut halfway through its body
    parts = urlsplit(hub.url)
    half = socket.create_connection((parts.hostname, parts.port), timeout=10)
    big = os.urandom(1 << 20)
    half.sendall(
        f"PUT /api/tw/blobs/{_sha(big)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Length: {len(big)}\r\n\r\n".encode()
        + big[: len(big) // 2]
    )
    for _ in range(500):  # bounded wait (<= 5 s) until the server has started writing the temp file
        if any((root / "tmp").iterdir()):
            break
        time.sleep(0.01)
    assert any((root / "tmp").iterdir())
    hub.kill()
    half.close()

    hub = hub_factory(root)
    assert not any((root / "tmp").iterdir())  # the interrupted upload left nothing behind
    assert not (root / "blobs" / _sha(big)[:2] / _sha(big)).exists()
    info = twhub.resolve(repo, endpoint=hub.url)
    assert info["commit"] == v1 and [f["path"] for f in info["files"]] == ["config.json"]
    assert twhub.fetch(repo, "config.json", endpoint=hub.url, cache_dir=tmp_path / "c").read_bytes() == b'{"v": 1}'

    n = hub.blob_count()
    v2 = twhub.push_files(
        repo, {"config.json": b'{"v": 2}', "model.safetensors": new}, endpoint=hub.url, token=token, parent=v1
    )
    assert hub.blob_count() == n  # the blobs uploaded before the crash are reused
    info = twhub.resolve(repo, endpoint=hub.url)
    assert info["commit"] == v2 and info["parent"] == v1
    assert hub.stop() == 0  # SIGTERM stops it cleanly


def test_fetch_caches_resumes_and_verifies(hub, tmp_path, monkeypatch):
    repo = "acme/fetchme"
    payload = os.urandom(300_000)
    commit = twhub.push_files(
        repo, {"big.bin": payload, "small.txt": b"hello"}, endpoint=hub.url, token=hub.token, replace=True
    )
    cache = tmp_path / "cache"
    p = twhub.fetch(repo, "big.bin", endpoint=hub.url, cache_dir=cache)
    assert p.read_bytes() == payload and p.name == _sha(payload) and p.parent == cache / "blobs"

    # a commit-id fetch of a cached file makes no HTTP request at all
    calls = []
    real_open = hubclient._open
    monkeypatch.setattr(hubclient, "_open", lambda req, timeout: calls.append(req.full_url) or real_open(req, timeout))
    assert twhub.fetch(repo, "big.bin", revision=commit, endpoint=hub.url, cache_dir=cache) == p
    assert calls == []
    # a branch fetch asks only for the revision (small JSON), never the bytes again
    assert twhub.fetch(repo, "big.bin", endpoint=hub.url, cache_dir=cache) == p
    assert len(calls) == 1 and "/revision/main" in calls[0]

    # resume: a partial download is completed with a Range request
    calls.clear()
    ranges = []

    def spy(req, timeout):
        ranges.append(req.get_header("Range"))
        return real_open(req, timeout)

    monkeypatch.setattr(hubclient, "_open", spy)
    cache2 = tmp_path / "cache2"
    (cache2 / "blobs").mkdir(parents=True)
    (cache2 / "blobs" / f"{_sha(payload)}.incomplete").write_bytes(payload[:123_456])
    p2 = twhub.fetch(repo, "big.bin", revision=commit, endpoint=hub.url, cache_dir=cache2)
    assert p2.read_bytes() == payload and "bytes=123456-" in ranges
    assert not (cache2 / "blobs" / f"{_sha(payload)}.incomplete").exists()

    # verification: a corrupt partial file is detected, removed, and the next fetch succeeds
    cache3 = tmp_path / "cache3"
    (cache3 / "blobs").mkdir(parents=True)
    (cache3 / "blobs" / f"{_sha(payload)}.incomplete").write_bytes(b"\0" * 1000)
    with pytest.raises(twhub.HashMismatch):
        twhub.fetch(repo, "big.bin", revision=commit, endpoint=hub.url, cache_dir=cache3)
    assert not (cache3 / "blobs" / _sha(payload)).exists()
    assert twhub.fetch(repo, "big.bin", revision=commit, endpoint=hub.url, cache_dir=cache3).read_bytes() == payload

    with pytest.raises(twhub.EntryNotFound):
        twhub.fetch(repo, "nope.bin", endpoint=hub.url, cache_dir=cache)
    with pytest.raises(twhub.InvalidPath):
        twhub.fetch(repo, "../x", endpoint=hub.url, cache_dir=cache)


def test_fetch_from_cache_when_hub_is_down(tmp_path, hub_factory):
    root = tmp_path / "root"
    token = create_token(root, "w", write=True)
    hub = hub_factory(root)
    repo = "acme/offline"
    commit = twhub.push_files(repo, {"w.bin": b"weights", "other.bin": b"x"}, endpoint=hub.url, token=token)
    cache = tmp_path / "cache"
    p = twhub.fetch(repo, "w.bin", endpoint=hub.url, cache_dir=cache)
    url = hub.url
    assert hub.stop() == 0
    assert twhub.fetch(repo, "w.bin", endpoint=url, cache_dir=cache) == p  # branch: last known commit
    assert twhub.fetch(repo, "w.bin", revision=commit, endpoint=url, cache_dir=cache) == p
    with pytest.raises(twhub.HubUnavailable):
        twhub.fetch(repo, "other.bin", endpoint=url, cache_dir=cache)  # never downloaded
    with pytest.raises(twhub.HubUnavailable):
        twhub.fetch(repo, "w.bin", revision="v-unknown", endpoint=url, cache_dir=cache)


def test_cli_token_push_ls(tmp_path, hub_factory, model_dir):
    root = tmp_path / "root"
    run = [sys.executable, "-m", "tensorwire.hub"]
    out = subprocess.run(
        [*run, "token", "create", "--root", str(root), "--name", "ci", "--write"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert token.startswith("tw_") and len(out.stdout.splitlines()) == 1
    hub = hub_factory(root)
    env = {**os.environ, "TENSORWIRE_HUB_URL": hub.url, "TENSORWIRE_HUB_TOKEN": token}
    out = subprocess.run(
        [*run, "push", str(model_dir), "--repo", "acme/cli", "--message", "hi", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    commit = out.stdout.strip()
    assert len(commit) == 40
    out = subprocess.run([*run, "ls", "--endpoint", hub.url], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split("\t")[:3] == ["acme/cli", "public", commit]
    out = subprocess.run(
        [*run, "push", str(model_dir), "--repo", "acme/cli", "--token", "bad"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 1 and "Unauthorized" in out.stderr
    # the token is stored hashed, never in clear
    assert token.encode() not in (root / "index.sqlite").read_bytes()
    from tensorwire.hub.cli import main

    assert main(["token"]) == 2
    assert main(["--help"]) == 0


def test_ready_line_format(tmp_path, hub_factory):
    hub = hub_factory(tmp_path / "r")
    assert hub.url.startswith("http://127.0.0.1:")
    status, h, body = hub.http("GET", "/api/tw/health")
    assert status == 200 and json.loads(body)["ok"] is True
    assert Path(tmp_path / "r" / "index.sqlite").is_file()
