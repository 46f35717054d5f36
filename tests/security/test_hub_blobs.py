"""Issue 34, finding 6 (hub blobs): a commit names only blobs its token uploaded or can read in a revision.

The attack: a token scoped to write ``evil/*`` learns the sha256 and size of ``acme/secret``'s private file (from a
leaked listing, a guess, a log) and commits that digest into its own repository, then downloads it from there. The
hub must refuse the commit exactly as it refuses a blob that was never uploaded, so that neither the blob's
existence nor its size leaks, and no read route may serve the private bytes through the attacker's repository.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from tensorwire import hub as twhub
from tensorwire.hub.server import create_token
from tensorwire.protocol.safetensors_io import save_bytes

from ._hub_helpers import HubProcess

SECRET = save_bytes({"secret.weight": np.arange(12, dtype=np.float32).reshape(3, 4)})
PUBLIC = b'{"model_type": "bert"}'


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub") / "root"
    root.mkdir()
    proc = HubProcess(root)
    proc.acme = create_token(root, "acme", scopes=["write:acme"])
    proc.evil = create_token(root, "evil", scopes=["write:evil"])
    proc.carol = create_token(root, "carol", scopes=["write:carol", "read:acme/secret"])
    proc.start()
    files = {"model.safetensors": SECRET, "notes.txt": b"the launch date is 2031-04-01\n"}
    twhub.push_files("acme/secret", files, endpoint=proc.url, token=proc.acme, private=True)
    twhub.push_files("acme/public", {"config.json": PUBLIC}, endpoint=proc.url, token=proc.acme)
    proc.evil_base = twhub.push_files("evil/x", {"README.md": b"hi"}, endpoint=proc.url, token=proc.evil)
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def _commit(hub, token: str, repo: str, files: list[dict], mode: str = "merge") -> tuple[int, dict]:
    return hub.json("POST", f"/api/tw/repos/{repo}/commit/main", {"files": files, "mode": mode}, token=token)


def test_committing_another_repos_private_blob_is_refused(hub, tmp_path):
    before = hub.state()
    for path in ("model.safetensors", "stolen.bin"):
        for mode in ("merge", "replace"):
            entry = {"path": path, "sha256": _sha(SECRET), "size": len(SECRET)}
            status, err = _commit(hub, hub.evil, "evil/x", [entry], mode)
            assert status == 400 and err["error"] == "BadRequest" and "not been uploaded" in err["message"], err
    assert hub.state() == before  # no commit, no ref moved
    # the dedup check does not tell the attacker either: to it, the private blob is missing
    status, out = hub.json("POST", "/api/tw/blobs/missing", {"sha256": [_sha(SECRET)]}, token=hub.evil)
    assert status == 200 and out["missing"] == [_sha(SECRET)]

    # and no read route serves the private bytes through the attacker's repository
    for rev in ("main", hub.evil_base):
        status, _, body = hub.http("GET", f"/evil/x/resolve/{rev}/model.safetensors", token=hub.evil)
        assert status == 404 and SECRET not in body
    status, tree = hub.json("GET", "/api/models/evil/x/tree/main?recursive=true", token=hub.evil)
    assert status == 200 and _sha(SECRET) not in json.dumps(tree)
    status, info = hub.json("GET", "/api/models/evil/x?blobs=true", token=hub.evil)
    assert status == 200 and _sha(SECRET) not in json.dumps(info)
    with pytest.raises(twhub.EntryNotFound):
        twhub.fetch("evil/x", "model.safetensors", endpoint=hub.url, token=hub.evil, cache_dir=tmp_path / "c")
    with pytest.raises(twhub.EntryNotFound):  # what a worker does to load tensors
        twhub.fetch(
            "evil/x", "model.safetensors", endpoint=hub.url, token=hub.evil, cache_dir=tmp_path / "w",
            into_memory=True, revalidate=True,
        )
    with pytest.raises(twhub.HubError):  # what load_state_dict reads before recording hub_tensor ops
        twhub.remote_header(hub.url, "evil/x", hub.evil_base, "model.safetensors", hub.evil)
    hf = pytest.importorskip("huggingface_hub")
    from huggingface_hub.utils import EntryNotFoundError

    with pytest.raises(EntryNotFoundError):
        hf.hf_hub_download("evil/x", "model.safetensors", endpoint=hub.url, token=hub.evil,
                           cache_dir=str(tmp_path / "hf"))


def test_wrong_size_answer_is_the_same_for_an_unreadable_blob_and_an_absent_one(hub):
    """The size oracle: before, a wrong size on a stored blob answered 'blob has N bytes'."""
    absent = _sha(b"never uploaded anywhere")

    def answer(sha: str, size: int) -> tuple[int, dict]:
        status, err = _commit(hub, hub.evil, "evil/x", [{"path": "w.safetensors", "sha256": sha, "size": size}])
        return status, {k: v.replace(sha, "SHA") for k, v in err.items()}

    for size in (len(SECRET), len(SECRET) + 1, 1):
        assert answer(_sha(SECRET), size) == answer(absent, size)
        assert str(len(SECRET)) not in answer(_sha(SECRET), size)[1]["message"]


def test_a_token_reuses_blobs_it_can_read_or_has_uploaded(hub, tmp_path):
    """Decided: a commit may name a blob of any revision its token can read (a public repo's, or a private one its
    scopes cover: it could download the bytes anyway), and any blob it uploaded itself (it holds the bytes)."""
    # a public repository's blob, without uploading it again
    status, out = hub.json("POST", "/api/tw/blobs/missing", {"sha256": [_sha(PUBLIC)]}, token=hub.evil)
    assert out["missing"] == []
    entry = {"path": "config.json", "sha256": _sha(PUBLIC), "size": len(PUBLIC)}
    status, out = _commit(hub, hub.evil, "evil/x", [entry])
    assert status == 201, out
    # a private repository's blob, by a token that may read that repository
    entry = {"path": "model.safetensors", "sha256": _sha(SECRET), "size": len(SECRET)}
    status, _ = hub.json("POST", "/api/tw/repos", {"repo_id": "carol/copy", "private": True}, token=hub.carol)
    assert status == 201
    status, out = _commit(hub, hub.carol, "carol/copy", [entry])
    assert status == 201, out
    copy = twhub.fetch("carol/copy", "model.safetensors", endpoint=hub.url, token=hub.carol, cache_dir=tmp_path)
    assert copy.read_bytes() == SECRET
    # whoever holds the bytes may push them: the upload proves it, and 'created' does not say they were stored
    status, _, body = hub.http("PUT", f"/api/tw/blobs/{_sha(SECRET)}", SECRET, token=hub.evil)
    assert status == 201 and json.loads(body)["created"] is True
    status, out = _commit(hub, hub.evil, "evil/x", [{"path": "mine.safetensors", "sha256": _sha(SECRET), "size": 1}])
    assert status == 400 and f"has {len(SECRET)} bytes" in out["message"]  # its own upload: the size may be told
    assert twhub.push_files("evil/x", {"mine.safetensors": SECRET}, endpoint=hub.url, token=hub.evil)
    status, _, body = hub.http("PUT", f"/api/tw/blobs/{_sha(SECRET)}", SECRET, token=hub.evil)
    assert status == 200 and json.loads(body)["created"] is False

