"""The push API: auth, verification of uploads, validation of names, dedup, concurrency, robustness."""

from __future__ import annotations

import hashlib
import json
import socket
import struct
from urllib.parse import urlsplit

import numpy as np
import pytest
import safetensors.numpy as stnp

import tensorwire.hub as twhub

REPO = "acme/push-tests"


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _st(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


GOOD = stnp.save({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(2, dtype=np.int64)})

BAD_SAFETENSORS = {
    "truncated": GOOD[:-5],
    "header_past_eof": struct.pack("<Q", 10_000) + b"{}",
    "too_short": b"abc",
    "not_json": struct.pack("<Q", 4) + b"nope",
    "offsets_out_of_bounds": _st({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8),
    "unknown_dtype": _st({"w": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, b"\0" * 16),
    "size_mismatch": _st({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, b"\0" * 16),
    "overlapping": _st(
        {
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
        },
        b"\0" * 12,
    ),
    "gap": _st({"a": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}}, b"\0" * 4),
    "bad_metadata": _st({"__metadata__": {"k": 1}, "a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
    "negative_shape": _st({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}, b""),
}


@pytest.fixture(scope="module")
def base(hub):
    """A repository with one revision; returns its commit id."""
    return twhub.push_files(
        REPO,
        {"config.json": b"{}", "model.safetensors": GOOD},
        endpoint=hub.url,
        token=hub.token,
        replace=True,
    )


def test_safetensors_checker_unit():
    from tensorwire.protocol.hub.safetensors_check import validate_bytes

    assert set(validate_bytes(GOOD)) == {"w", "b"}
    for name, blob in BAD_SAFETENSORS.items():
        with pytest.raises(twhub.InvalidSafetensors):
            validate_bytes(blob)
            pytest.fail(name)


def test_writes_need_a_write_token(hub, base):
    before = hub.state()
    body_repo = {"repo_id": "acme/x", "private": False}
    for token, status in ((None, 401), ("tw_not-a-token", 401), (hub.read_token, 403)):
        assert hub.json("POST", "/api/tw/repos", body_repo, token=token)[0] == status
        assert hub.json("POST", "/api/tw/blobs/missing", {"sha256": [_sha(b"x")]}, token=token)[0] == status
        s, h, _ = hub.http("PUT", f"/api/tw/blobs/{_sha(b'x')}", b"x", token=token)
        assert s == status and h["x-error-code"] in ("Unauthorized", "Forbidden")
        s, err = hub.json("POST", f"/api/tw/repos/{REPO}/commit/main", {"files": []}, token=token)
        assert s == status and err["error"] in ("Unauthorized", "Forbidden")
        assert hub.json("POST", f"/api/tw/repos/{REPO}/tag", {"tag": "t"}, token=token)[0] == status
    s, h, _ = hub.http("POST", "/api/tw/repos", b"{}", headers={"Authorization": "Basic abc"})
    assert s == 401 and "bearer" in h["www-authenticate"].lower()
    with pytest.raises(twhub.Unauthorized):
        twhub.push_files(REPO, {"a.txt": b"a"}, endpoint=hub.url, token="")
    with pytest.raises(twhub.Forbidden):
        twhub.push_files(REPO, {"a.txt": b"a"}, endpoint=hub.url, token=hub.read_token)
    assert hub.state() == before


def test_hash_mismatch_rejected(hub, base):
    before = hub.state()
    payload = b"the real bytes"
    s, h, body = hub.http("PUT", f"/api/tw/blobs/{_sha(b'other bytes')}", payload, token=hub.token)
    assert s == 400 and json.loads(body)["error"] == "HashMismatch" and h["x-error-code"] == "HashMismatch"
    s, _, _ = hub.http("PUT", "/api/tw/blobs/not-a-digest", payload, token=hub.token)
    assert s == 400
    assert hub.state() == before
    assert not any((hub.root / "tmp").iterdir())


def test_commit_needs_uploaded_blobs_with_right_size(hub, base):
    before = hub.state()
    files = [{"path": "x.bin", "sha256": _sha(b"never uploaded"), "size": 14}]
    s, err = hub.json("POST", f"/api/tw/repos/{REPO}/commit/main", {"files": files}, token=hub.token)
    assert s == 400 and "not been uploaded" in err["message"]
    files = [{"path": "config.json", "sha256": _sha(b"{}"), "size": 99}]
    assert hub.json("POST", f"/api/tw/repos/{REPO}/commit/main", {"files": files}, token=hub.token)[0] == 400
    assert hub.state() == before


@pytest.mark.parametrize("name", sorted(BAD_SAFETENSORS))
def test_invalid_safetensors_rejected(hub, base, name):
    blob = BAD_SAFETENSORS[name]
    before = hub.state()
    # through the client: rejected at upload (the path hint), nothing stored
    with pytest.raises(twhub.InvalidSafetensors):
        twhub.push_files(REPO, {"model.safetensors": blob}, endpoint=hub.url, token=hub.token)
    assert hub.state() == before
    # raw: upload without a hint succeeds (just bytes), but the commit is refused and changes nothing
    s, _, _ = hub.http("PUT", f"/api/tw/blobs/{_sha(blob)}", blob, token=hub.token)
    assert s in (200, 201)
    after_upload = hub.state()
    files = [{"path": "weights/model.safetensors", "sha256": _sha(blob), "size": len(blob)}]
    s, err = hub.json("POST", f"/api/tw/repos/{REPO}/commit/main", {"files": files}, token=hub.token)
    assert s == 400 and err["error"] == "InvalidSafetensors", err
    assert hub.state() == after_upload
    assert twhub.resolve(REPO, endpoint=hub.url)["commit"] == base


BAD_PATHS = ["../x", "/etc/passwd", "a/../../b", "a//b", "a/./b", "a\\b", "nul\x00byte", "", "..", "a/"]


def test_path_traversal_in_commit_file_names(hub, base):
    s, _, _ = hub.http("PUT", f"/api/tw/blobs/{_sha(b'p')}", b"p", token=hub.token)
    before = hub.state()
    for bad in BAD_PATHS:
        files = [{"path": bad, "sha256": _sha(b"p"), "size": 1}]
        s, err = hub.json("POST", f"/api/tw/repos/{REPO}/commit/main", {"files": files}, token=hub.token)
        assert s == 400 and err["error"] == "InvalidPath", (bad, err)
    with pytest.raises(twhub.InvalidPath):
        twhub.push_files(REPO, {"../evil": b"p"}, endpoint=hub.url, token=hub.token)
    # a file and a folder of the same name
    files = [{"path": "a", "sha256": _sha(b"p"), "size": 1}, {"path": "a/b", "sha256": _sha(b"p"), "size": 1}]
    assert hub.json("POST", f"/api/tw/repos/{REPO}/commit/main", {"files": files}, token=hub.token)[0] == 400
    assert hub.state() == before


@pytest.mark.parametrize(
    "url",
    [
        f"/{REPO}/resolve/main/../../etc/passwd",
        f"/{REPO}/resolve/main/%2e%2e/%2e%2e/etc/passwd",
        f"/{REPO}/resolve/main/%2Fetc%2Fpasswd",
        f"/{REPO}/resolve/main/a%5cb",
        f"/{REPO}/resolve/main/a%00b",
        "/../x/resolve/main/config.json",
        "/%2e%2e/x/resolve/main/config.json",
        "/acme/..%2f..%2fetc/resolve/main/config.json",
        "/api/models/../x",
        "/api/models/%2e%2e/x/tree/main",
        f"/api/models/{REPO}/tree/main/%2e%2e%2f%2e%2e",
        "/api/tw/repos/%2e%2e/x/revision/main",
        f"/{REPO}/resolve/%ff/config.json",
    ],
)
def test_path_traversal_in_urls(hub, base, url):
    before = hub.state()
    s, h, body = hub.http("GET", url)
    assert s in (400, 404), (url, s)
    assert b"root:" not in body
    assert json.loads(body)["error"] in ("InvalidPath", "RepoNotFound", "EntryNotFound", "NotFound")
    assert hub.http("GET", f"/{REPO}/resolve/main/config.json")[0] == 200
    assert hub.state() == before


def test_bad_repo_ids_on_push(hub, base):
    before = hub.state()
    for bad in ["../x", "acme/..", "acme", "a/b/c", "-a/b", "acme/" + "x" * 97, "ac me/b", ".x/b"]:
        s, err = hub.json("POST", "/api/tw/repos", {"repo_id": bad}, token=hub.token)
        assert s == 400 and err["error"] == "InvalidPath", bad
    s, err = hub.json("POST", "/api/tw/repos/acme/%2e%2e/commit/main", {"files": []}, token=hub.token)
    assert s == 400
    for bad_branch in ["..%2Fx", "-x", "a%20b", "0" * 40]:
        s, err = hub.json("POST", f"/api/tw/repos/{REPO}/commit/{bad_branch}", {"files": []}, token=hub.token)
        assert s == 400, bad_branch
    assert hub.state() == before


def test_unknown_revision_and_repo(hub, base):
    s, h, _ = hub.http("GET", f"/api/models/{REPO}/revision/nope")
    assert s == 404 and h["x-error-code"] == "RevisionNotFound"
    with pytest.raises(twhub.RevisionNotFound):
        twhub.resolve(REPO, "nope", endpoint=hub.url)
    with pytest.raises(twhub.RevisionNotFound):
        twhub.resolve(REPO, "f" * 40, endpoint=hub.url)
    with pytest.raises(twhub.RepositoryNotFound):
        twhub.resolve("acme/missing", endpoint=hub.url)
    s, h, _ = hub.http("HEAD", f"/{REPO}/resolve/main/missing.txt")
    assert s == 404 and h["x-error-code"] == "EntryNotFound" and h["x-repo-commit"] == base
    # a commit of another repository is not a revision of this one
    other = twhub.push_files("acme/other", {"a": b"a"}, endpoint=hub.url, token=hub.token)
    with pytest.raises(twhub.RevisionNotFound):
        twhub.resolve(REPO, other, endpoint=hub.url)


def test_dedup_same_blob_stored_once(hub, base, model_dir):
    twhub.push_folder("acme/dedup-1", model_dir, endpoint=hub.url, token=hub.token, progress=False)
    n = hub.blob_count()
    for repo in ("acme/dedup-1", "acme/dedup-2"):
        twhub.push_folder(repo, model_dir, endpoint=hub.url, token=hub.token, progress=False)
    assert hub.blob_count() == n
    shas = [_sha(p.read_bytes()) for p in sorted(model_dir.iterdir())]
    s, out = hub.json("POST", "/api/tw/blobs/missing", {"sha256": shas + [_sha(b"new")]}, token=hub.token)
    assert s == 200 and out["missing"] == [_sha(b"new")]
    s, out = hub.json("PUT", f"/api/tw/blobs/{shas[0]}", (model_dir / "README.md").read_bytes(), token=hub.token)
    assert s == 200 and out["created"] is False
    assert hub.blob_count() == n


def test_commit_history_parent_and_optimistic_concurrency(hub, base):
    repo = "acme/history"
    c1 = twhub.push_files(repo, {"a.txt": b"1"}, endpoint=hub.url, token=hub.token, message="first")
    c2 = twhub.push_files(repo, {"b.txt": b"2"}, endpoint=hub.url, token=hub.token, parent=c1)
    info = twhub.resolve(repo, endpoint=hub.url)
    assert info["commit"] == c2 and info["parent"] == c1
    assert [f["path"] for f in info["files"]] == ["a.txt", "b.txt"]  # merge mode keeps a.txt
    before = hub.state()
    with pytest.raises(twhub.Conflict):
        twhub.push_files(repo, {"c.txt": b"3"}, endpoint=hub.url, token=hub.token, parent=c1)
    assert hub.state()[1] == before[1]
    c3 = twhub.push_files(repo, {"c.txt": b"3"}, endpoint=hub.url, token=hub.token, replace=True)
    assert [f["path"] for f in twhub.resolve(repo, endpoint=hub.url)["files"]] == ["c.txt"]
    assert twhub.resolve(repo, c1, endpoint=hub.url)["files"][0]["path"] == "a.txt"  # immutable
    assert twhub.resolve(repo, endpoint=hub.url)["commit"] == c3
    assert twhub.create_tag(repo, "v1", c1, endpoint=hub.url, token=hub.token) == c1
    with pytest.raises(twhub.Conflict):
        twhub.create_tag(repo, "v1", c3, endpoint=hub.url, token=hub.token)
    assert twhub.resolve(repo, "v1", endpoint=hub.url)["commit"] == c1


def test_malformed_requests_never_kill_the_server(hub, base):
    before = hub.state()
    t = hub.token
    assert hub.http("POST", "/api/tw/repos", b"{not json", token=t)[0] == 400
    assert hub.http("POST", "/api/tw/repos", b"[1, 2]", token=t)[0] == 400
    assert hub.http("POST", f"/api/tw/repos/{REPO}/commit/main", {"files": "x"}, token=t)[0] == 400
    assert hub.http("POST", f"/api/tw/repos/{REPO}/commit/main", {"files": [{"path": 1}]}, token=t)[0] == 400
    assert hub.http("POST", f"/api/tw/repos/{REPO}/commit/main", {"files": [], "message": 5}, token=t)[0] == 400
    assert hub.http("POST", "/api/tw/blobs/missing", {"sha256": ["zz"]}, token=t)[0] == 400
    assert hub.http("DELETE", f"/api/models/{REPO}")[0] == 405
    assert hub.http("GET", "/no/such/route/at/all")[0] == 404
    assert hub.http("POST", "/api/tw/repos", b"{}", token=t, headers={"Content-Length": "-3"})[0] == 400
    # a body larger than the JSON limit is refused before being read
    parts = urlsplit(hub.url)
    for raw in (
        b"POST /api/tw/repos HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + t.encode()
        + b"\r\nContent-Length: 999999999\r\n\r\n{",
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"\x00\xff" * 100 + b"\r\n\r\n",
    ):
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
            reply = s.recv(4096)
        assert reply.startswith(b"HTTP/1.") and b" 200 " not in reply.split(b"\r\n")[0], reply[:80]
        if b"999999999" in raw:
            assert b" 413 " in reply.split(b"\r\n")[0]
    # a client that disconnects mid-upload
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(
            f"PUT /api/tw/blobs/{_sha(b'x' * 1000)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n"
            "Content-Length: 1000\r\n\r\n".encode()
            + b"x" * 100
        )
    assert hub.http("GET", f"/api/models/{REPO}")[0] == 200
    assert hub.state() == before
