"""The hub as seen by the ``huggingface_hub`` client (read side of the HF API)."""

from __future__ import annotations

import filecmp
import hashlib
import os
from pathlib import Path

import pytest

import tensorwire.hub as twhub

hf = pytest.importorskip("huggingface_hub")
from huggingface_hub import HfApi, hf_hub_download, snapshot_download  # noqa: E402
from huggingface_hub.utils import (  # noqa: E402
    EntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

REPO = "acme/bert-tiny"


@pytest.fixture(scope="module")
def pushed(hub, model_dir, tmp_path_factory):
    """Push v1 (main), tag it, then push v2 on main and a branch with a slash in its name."""
    v1 = twhub.push_folder(REPO, model_dir, endpoint=hub.url, token=hub.token, message="v1", progress=False)
    assert twhub.create_tag(REPO, "v1.0", v1, endpoint=hub.url, token=hub.token) == v1
    v2 = twhub.push_files(
        REPO, {"extra/notes.txt": b"second revision\n"}, endpoint=hub.url, token=hub.token, message="v2"
    )
    pr = twhub.push_files(REPO, {"pr.txt": b"pr"}, endpoint=hub.url, token=hub.token, revision="refs/pr/1")
    return {"v1": v1, "v2": v2, "pr": pr}


def _cache(tmp_path: Path) -> str:
    return str(tmp_path / "hfcache")


def test_snapshot_download_matches_folder(hub, model_dir, pushed, tmp_path):
    path = snapshot_download(REPO, revision="v1.0", endpoint=hub.url, cache_dir=_cache(tmp_path), token=False)
    assert Path(path).name == pushed["v1"]
    names = sorted(str(p.relative_to(path)) for p in Path(path).rglob("*") if p.is_file())
    assert names == ["README.md", "config.json", "model.safetensors"]
    for n in names:
        assert filecmp.cmp(Path(path) / n, model_dir / n, shallow=False)


def test_snapshot_download_branch_and_commit(hub, pushed, tmp_path):
    main = snapshot_download(REPO, endpoint=hub.url, cache_dir=_cache(tmp_path), token=False)
    assert Path(main).name == pushed["v2"]
    assert (Path(main) / "extra" / "notes.txt").read_bytes() == b"second revision\n"
    by_commit = snapshot_download(REPO, revision=pushed["v1"], endpoint=hub.url, cache_dir=_cache(tmp_path))
    assert not (Path(by_commit) / "extra").exists()


def test_hf_hub_download_by_branch_tag_commit_and_encoded_revision(hub, model_dir, pushed, tmp_path):
    expected = (model_dir / "model.safetensors").read_bytes()
    for rev in ("main", "v1.0", pushed["v1"], pushed["v2"]):
        p = hf_hub_download(
            REPO, "model.safetensors", revision=rev, endpoint=hub.url, cache_dir=_cache(tmp_path), token=False
        )
        assert Path(p).read_bytes() == expected
    # "refs/pr/1" travels URL-encoded as refs%2Fpr%2F1
    p = hf_hub_download(REPO, "pr.txt", revision="refs/pr/1", endpoint=hub.url, cache_dir=_cache(tmp_path))
    assert Path(p).read_bytes() == b"pr"


def test_hf_endpoint_env_var(hub, pushed, tmp_path):
    import subprocess
    import sys

    code = (
        "from huggingface_hub import snapshot_download; "
        f"print(snapshot_download({REPO!r}, cache_dir={_cache(tmp_path)!r}))"
    )
    # huggingface_hub gives a metadata request 10 s, then reports the file as missing from its cache ("outgoing
    # traffic has been disabled"): on a loaded 2-core runner the hub's answer took longer once; the test is about
    # HF_ENDPOINT, not speed
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_ETAG_TIMEOUT": "120", "HF_HUB_DOWNLOAD_TIMEOUT": "120"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(pushed["v2"])


def test_model_info_and_listings(hub, model_dir, pushed):
    api = HfApi(endpoint=hub.url, token=False)
    info = api.model_info(REPO, files_metadata=True)
    assert info.id == REPO and info.sha == pushed["v2"] and info.private is False
    assert info.last_modified is not None
    sib = {s.rfilename: s for s in info.siblings}
    data = (model_dir / "model.safetensors").read_bytes()
    st = sib["model.safetensors"]
    assert st.size == len(data) and st.lfs.sha256 == hashlib.sha256(data).hexdigest()
    assert "safetensors" in info.tags and "tiny" in info.tags
    assert info.card_data is not None and info.card_data.get("license") == "mit"
    assert info.safetensors.total == 32 * 16 + 16

    old = api.model_info(REPO, revision="v1.0")
    assert old.sha == pushed["v1"] and "extra/notes.txt" not in {s.rfilename for s in old.siblings}

    assert sorted(api.list_repo_files(REPO, revision="v1.0")) == [
        "README.md",
        "config.json",
        "model.safetensors",
    ]
    assert "extra/notes.txt" in api.list_repo_files(REPO)
    top = {(e.path, type(e).__name__) for e in api.list_repo_tree(REPO)}
    assert ("extra", "RepoFolder") in top and ("config.json", "RepoFile") in top
    assert [e.path for e in api.list_repo_tree(REPO, path_in_repo="extra")] == ["extra/notes.txt"]
    assert REPO in [m.id for m in api.list_models()]
    assert [m.id for m in api.list_models(author="nobody")] == []
    refs = api.list_repo_refs(REPO)
    assert {b.name for b in refs.branches} == {"main", "refs/pr/1"}
    assert [t.target_commit for t in refs.tags] == [pushed["v1"]]
    assert [c.commit_id for c in api.list_repo_commits(REPO)] == [pushed["v2"], pushed["v1"]]


def test_missing_repo_revision_file_raise_hf_errors(hub, pushed, tmp_path):
    api = HfApi(endpoint=hub.url, token=False)
    kw = {"endpoint": hub.url, "cache_dir": _cache(tmp_path), "token": False}
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("acme/does-not-exist")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("acme/does-not-exist", "config.json", **kw)
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download("acme/does-not-exist", **kw)
    with pytest.raises(RevisionNotFoundError):
        api.model_info(REPO, revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "config.json", revision="no-such-branch", **kw)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "config.json", revision="0" * 40, **kw)
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(REPO, revision="v9", **kw)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "nope.bin", **kw)
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(REPO, path_in_repo="no-folder"))


def test_etag_and_range(hub, model_dir, pushed):
    data = (model_dir / "model.safetensors").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    path = f"/{REPO}/resolve/main/model.safetensors"
    status, h, body = hub.http("HEAD", path)
    assert status == 200 and body == b""
    assert h["etag"] == f'"{sha}"' and h["x-linked-etag"] == f'"{sha}"'
    assert h["x-repo-commit"] == pushed["v2"] and int(h["content-length"]) == len(data)
    assert h["accept-ranges"] == "bytes" and h["location"].endswith(f"/resolve/{pushed['v2']}/model.safetensors")

    status, h, body = hub.http("GET", path, headers={"Range": "bytes=10-"})
    assert status == 206 and body == data[10:] and h["content-range"] == f"bytes 10-{len(data) - 1}/{len(data)}"
    status, _, body = hub.http("GET", path, headers={"Range": "bytes=5-9"})
    assert status == 206 and body == data[5:10]
    status, _, body = hub.http("GET", path, headers={"Range": "bytes=-4"})
    assert status == 206 and body == data[-4:]
    status, h, _ = hub.http("GET", path, headers={"Range": f"bytes={len(data)}-"})
    assert status == 416 and h["content-range"] == f"bytes */{len(data)}"
    status, _, body = hub.http("GET", path, headers={"Range": "bytes=0-1,4-5"})  # multi-range: whole file
    assert status == 200 and body == data
    status, _, _ = hub.http("GET", path, headers={"If-None-Match": f'"{sha}"'})
    assert status == 304


def test_hf_resume_partial_download(hub, model_dir, pushed, tmp_path):
    """huggingface_hub resumes an ``.incomplete`` file with a Range request."""
    data = (model_dir / "model.safetensors").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    blobs = tmp_path / "hfcache" / "models--acme--bert-tiny" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{sha}.incomplete").write_bytes(data[:50])
    p = hf_hub_download(REPO, "model.safetensors", revision=pushed["v1"], endpoint=hub.url, cache_dir=_cache(tmp_path))
    assert Path(p).read_bytes() == data


def test_private_repo(hub, model_dir, tmp_path):
    repo = "acme/secret"
    commit = twhub.push_folder(repo, model_dir, endpoint=hub.url, token=hub.token, private=True, progress=False)
    anon = HfApi(endpoint=hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError):
        anon.model_info(repo)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download(repo, "config.json", endpoint=hub.url, cache_dir=_cache(tmp_path), token=False)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download(repo, "config.json", endpoint=hub.url, cache_dir=_cache(tmp_path), token="tw_wrong")
    assert repo not in [m.id for m in anon.list_models()]
    # a read-only token may read it, through huggingface_hub and tensorwire.hub
    reader = HfApi(endpoint=hub.url, token=hub.read_token)
    assert reader.model_info(repo).private is True
    assert repo in [m.id for m in reader.list_models()]
    p = snapshot_download(repo, endpoint=hub.url, cache_dir=_cache(tmp_path), token=hub.read_token)
    assert Path(p).name == commit
    with pytest.raises(twhub.RepositoryNotFound):
        twhub.resolve(repo, endpoint=hub.url, token="")
    assert twhub.resolve(repo, endpoint=hub.url, token=hub.read_token)["commit"] == commit
    assert repo not in [r["repo_id"] for r in twhub.list_repos(hub.url, token="")]
    assert repo in [r["repo_id"] for r in twhub.list_repos(hub.url, token=hub.read_token)]
    # the same 404 whether the repo is private or missing: nothing leaks
    s1, h1, _ = hub.http("HEAD", f"/{repo}/resolve/main/config.json")
    s2, h2, _ = hub.http("HEAD", "/acme/nothing-here/resolve/main/config.json")
    assert (s1, h1["x-error-code"]) == (s2, h2["x-error-code"]) == (404, "RepoNotFound")
