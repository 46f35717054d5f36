"""Issue 15, finding 3: a worker fetches only from the cluster's hub, with bounded requests and a verified cache.

Reproductions through the real services (dispatcher, worker, hub): a client records ``hub_tensor`` ops that name an
attacker's endpoint, a closed port, a silent port; the worker must refuse without connecting anywhere, never send
its hub token elsewhere, give one error text whatever the port, and never serve an attacker's weights to a victim
loading the same commit id from the real hub.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.protocol.safetensors_io import save_bytes
from tensorwire.session import Session

from ._hub_helpers import Listener, closed_port_url

WORKER_TOKEN_NAME = "cluster-worker"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from tensorwire.hub.server import create_token

    hub_root = tmp_path_factory.mktemp("hub")
    # the worker's own token reads what every user of the cluster may load: the shared acme namespace
    worker_token = create_token(hub_root, WORKER_TOKEN_NAME, scopes=["read:acme"])
    cache = tmp_path_factory.mktemp("worker-cache")
    env = {"TENSORWIRE_HUB_CACHE": str(cache), "TENSORWIRE_HUB_TOKEN": worker_token}
    with tw.LocalCluster(devices=["cpu:0"], hub_root=hub_root, autograd=False, extra_env=env) as c:
        c.worker_token = worker_token
        c.worker_cache = cache
        yield c


@pytest.fixture(scope="module")
def session(cluster):
    s = tw.connect(cluster.address)
    yield s
    s.close()
    tw.set_session(None)


def _attacker_answer(commit: str, payload: bytes) -> bytes:
    """What a hostile hub answers to any request: a revision naming ``commit`` and ``payload`` as the file."""
    import hashlib

    meta = {
        "repo_id": "acme/model",
        "revision": commit,
        "commit": commit,
        "parent": None,
        "message": "",
        "created_at": "",
        "private": False,
        "files": [{"path": "model.safetensors", "sha256": hashlib.sha256(payload).hexdigest(), "size": len(payload)}],
    }
    body = json.dumps(meta).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def _hub_tensor(session, endpoint: str | None, commit: str = "0" * 40, name: str = "w", shape=(2, 2), token=None):
    attrs = {
        "repo": "acme/model",
        "commit": commit,
        "path": "model.safetensors",
        "name": name,
        "shape": list(shape),
        "dtype": "float32",
    }
    if endpoint is not None:
        attrs["endpoint"] = endpoint
    if token is not None:
        attrs["token"] = token
    return session.record("hub_tensor", [], attrs, "cpu:0")


def test_client_named_endpoint_is_refused_and_never_contacted(cluster, session):
    evil = Listener(answer=_attacker_answer("1" * 40, save_bytes({"w": np.ones((2, 2), np.float32)})))
    try:
        t = _hub_tensor(session, evil.url)
        with pytest.raises(tw.Unauthorized, match="other than the cluster's"):
            t.numpy()
        assert evil.connections == 0  # nothing fetched: the worker never even connected
        assert cluster.worker_token.encode() not in evil.received
    finally:
        evil.close()
    # the session and the worker carry on
    np.testing.assert_array_equal((tw.ones(3) * 2).numpy(), np.full(3, 2.0, np.float32))


def test_errors_do_not_tell_open_from_closed_ports(cluster, session):
    silent = Listener()
    try:
        texts = []
        for url in (closed_port_url(), silent.url, "http://127.0.0.1:1", "http://[::1]:22"):
            with pytest.raises(tw.Unauthorized) as e:
                _hub_tensor(session, url).numpy()
            texts.append(e.value.message)
        assert len(set(texts)) == 1, texts
        assert silent.connections == 0
    finally:
        silent.close()


def test_poisoned_commit_id_never_reaches_a_victim(cluster, session):
    """The issue's attack: an attacker makes the worker cache its weights under the victim's commit id."""
    real = {"w": np.arange(4, dtype=np.float32).reshape(2, 2)}
    commit = tw.hub.push("acme/model", real, token=cluster.hub_token)
    evil = Listener(answer=_attacker_answer(commit, save_bytes({"w": np.full((2, 2), 666, np.float32)})))
    try:
        with pytest.raises(tw.Unauthorized):
            _hub_tensor(session, evil.url, commit=commit).numpy()
    finally:
        evil.close()
    victim = Session(cluster.address)
    try:
        got = tw.hub.load_state_dict("acme/model", revision=commit, session=victim)["w"]
        np.testing.assert_array_equal(got.numpy(), real["w"])
    finally:
        victim.close()


def test_worker_uses_the_cluster_hub_without_a_client_endpoint(cluster, session):
    commit = tw.hub.push("acme/plain", {"w": np.full((2, 2), 5, np.float32)}, token=cluster.hub_token)
    t = session.record(
        "hub_tensor",
        [],
        {
            "repo": "acme/plain",
            "commit": commit,
            "path": "model.safetensors",
            "name": "w",
            "shape": [2, 2],
            "dtype": "float32",
        },
        "cpu:0",
    )
    np.testing.assert_array_equal(t.numpy(), np.full((2, 2), 5, np.float32))
    # the cluster's hub, spelled differently, is still the cluster's hub
    spelled = cluster.hub_url.replace("http://", "HTTP://") + "/"
    t2 = session.record(
        "hub_tensor",
        [],
        {
            "repo": "acme/plain",
            "commit": commit,
            "path": "model.safetensors",
            "name": "w",
            "shape": [2, 2],
            "dtype": "float32",
            "endpoint": spelled,
        },
        "cpu:0",
    )
    np.testing.assert_array_equal(t2.numpy(), np.full((2, 2), 5, np.float32))


def test_private_file_cached_for_one_session_is_not_served_to_another(cluster, session):
    """The worker asks the hub, with the requesting session's token, before serving a file from its cache."""
    from tensorwire.hub.server import create_token

    reader = create_token(cluster.hub_root, "alice-reader", scopes=["read:alice"])
    commit = tw.hub.push("alice/secret", {"w": np.full((2, 2), 7, np.float32)}, token=cluster.hub_token, private=True)
    mine = session.record(
        "hub_tensor",
        [],
        {
            "repo": "alice/secret",
            "commit": commit,
            "path": "model.safetensors",
            "name": "w",
            "shape": [2, 2],
            "dtype": "float32",
            "token": reader,
        },
        "cpu:0",
    )
    np.testing.assert_array_equal(mine.numpy(), np.full((2, 2), 7, np.float32))  # alive: its bytes are cached
    other = Session(cluster.address)
    try:
        stolen = other.record(
            "hub_tensor",
            [],
            {
                "repo": "alice/secret",
                "commit": commit,
                "path": "model.safetensors",
                "name": "w",
                "shape": [2, 2],
                "dtype": "float32",
            },
            "cpu:0",
        )
        with pytest.raises(tw.NotFound):  # the worker's own read token is not scoped to alice's namespace
            stolen.numpy()
    finally:
        other.close()


def test_a_silent_hub_does_not_stall_the_worker(tmp_path):
    """Connect and read timeouts bound a fetch; the worker answers other work right after (measured ~2-4 s)."""
    silent = Listener()
    env = {
        "TENSORWIRE_HUB_URL": silent.url,
        "TENSORWIRE_HUB_READ_TIMEOUT": "2",
        "TENSORWIRE_HUB_CACHE": str(tmp_path / "cache"),
    }
    try:
        with tw.LocalCluster(devices=["cpu:0"], autograd=False, extra_env=env) as c:
            s = Session(c.address)
            try:
                t0 = time.monotonic()
                with pytest.raises(tw.ServiceUnavailable) as e:
                    _hub_tensor(s, silent.url).numpy()  # the configured hub, named explicitly
                assert time.monotonic() - t0 < 30
                assert "127.0.0.1" not in e.value.message and "refused" not in e.value.message
                assert silent.connections >= 1  # it did try the configured hub, and gave up
                with tw.use_session(s):
                    np.testing.assert_array_equal((tw.ones(2) + 1).numpy(), np.full(2, 2.0, np.float32))
            finally:
                s.close()
    finally:
        silent.close()
