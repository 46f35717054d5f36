"""Issue 15, finding 3 (cache): the download cache is keyed by endpoint, repository and commit, and verified.

An attacker's hub answering the victim's commit id must not poison what the victim later fetches from the real hub;
a cached blob whose bytes were changed on disk is detected on read and fetched again, or refused, never served.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from tensorwire import hub as twhub

from ._hub_helpers import HubProcess, Listener

REPO = "acme/model"
REAL = b"the real weights " * 100


@pytest.fixture(scope="module")
def real_hub(tmp_path_factory):
    from tensorwire.hub.server import create_token

    root = tmp_path_factory.mktemp("real") / "root"
    root.mkdir()
    token = create_token(root, "w", write=True)
    proc = HubProcess(root).start()
    proc.commit = twhub.push_files(REPO, {"model.bin": REAL}, endpoint=proc.url, token=token)
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def _evil_hub(commit: str, payload: bytes, repo: str = REPO) -> Listener:
    """A hostile server that answers every request with a file list naming ``commit`` and then ``payload``."""
    meta = {
        "repo_id": repo,
        "revision": commit,
        "commit": commit,
        "parent": None,
        "message": "",
        "created_at": "",
        "private": False,
        "files": [{"path": "model.bin", "sha256": hashlib.sha256(payload).hexdigest(), "size": len(payload)}],
    }
    body = json.dumps(meta).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    return Listener(answer=head + body)


def test_attacker_hub_cannot_poison_a_commit_id(real_hub, tmp_path):
    cache = tmp_path / "cache"
    evil_bytes = b"attacker weights " * 100
    evil = _evil_hub(real_hub.commit, evil_bytes)
    try:
        # the file list for the victim's commit id, as the attacker tells it, lands in the cache
        with pytest.raises(twhub.HubError):  # its "file" request gets the JSON again: a hash mismatch
            twhub.fetch(REPO, "model.bin", revision=real_hub.commit, endpoint=evil.url, cache_dir=cache)
    finally:
        evil.close()
    # plant the attacker's bytes as a verified blob too, as a complete download would have
    blobs = cache / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    (blobs / hashlib.sha256(evil_bytes).hexdigest()).write_bytes(evil_bytes)
    # the victim, from the real hub, with the same commit id, gets the real bytes
    p = twhub.fetch(REPO, "model.bin", revision=real_hub.commit, endpoint=real_hub.url, cache_dir=cache)
    assert p.read_bytes() == REAL
    got = twhub.fetch(
        REPO, "model.bin", revision=real_hub.commit, endpoint=real_hub.url, cache_dir=cache, into_memory=True
    )
    assert bytes(got) == REAL


def test_tampered_blob_is_detected_and_fetched_again(real_hub, tmp_path):
    cache = tmp_path / "cache"
    p = twhub.fetch(REPO, "model.bin", revision=real_hub.commit, endpoint=real_hub.url, cache_dir=cache)
    assert p.read_bytes() == REAL
    poisoned = bytearray(REAL)
    poisoned[:8] = b"POISONED"
    p.write_bytes(bytes(poisoned))  # same size, other bytes
    assert twhub.fetch(REPO, "model.bin", revision=real_hub.commit, endpoint=real_hub.url, cache_dir=cache) == p
    assert p.read_bytes() == REAL  # re-fetched
    p.write_bytes(bytes(poisoned))
    got = twhub.fetch(
        REPO, "model.bin", revision=real_hub.commit, endpoint=real_hub.url, cache_dir=cache, into_memory=True
    )
    assert bytes(np.asarray(got)) == REAL


def test_tampered_blob_with_the_hub_down_is_refused(tmp_path):
    from tensorwire.hub.server import create_token

    root = tmp_path / "root"
    token = create_token(root, "w", write=True)
    hub = HubProcess(root).start()
    try:
        commit = twhub.push_files(REPO, {"model.bin": REAL}, endpoint=hub.url, token=token)
        cache = tmp_path / "cache"
        p = twhub.fetch(REPO, "model.bin", revision=commit, endpoint=hub.url, cache_dir=cache)
        url = hub.url
    finally:
        assert hub.stop() == 0
    p.write_bytes(b"X" * len(REAL))
    with pytest.raises(twhub.HubUnavailable):  # cannot re-fetch: a typed error, not the poisoned bytes
        twhub.fetch(REPO, "model.bin", revision=commit, endpoint=url, cache_dir=cache)
    assert not p.exists()  # the poisoned entry is gone


def test_cache_folders_are_private(real_hub, tmp_path):
    cache = tmp_path / "cache"
    twhub.fetch(REPO, "model.bin", endpoint=real_hub.url, cache_dir=cache)
    for d in (cache, cache / "blobs", cache / "trees", cache / "refs"):
        assert d.stat().st_mode & 0o077 == 0, d
