"""tw.hub.push / tw.hub.load_state_dict: weights go from the hub to the worker, never through the client."""

from __future__ import annotations

import os

import numpy as np
import pytest
import safetensors.numpy

import tensorwire as tw


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cache = tmp_path_factory.mktemp("worker-cache")
    with tw.LocalCluster(devices=["cpu:0", "cpu:1"], hub_root=tmp_path_factory.mktemp("hub"), autograd=False,
                         extra_env={"TENSORWIRE_HUB_CACHE": str(cache)}) as c:
        c.worker_cache = cache
        yield c


def test_push_state_dict_then_load_on_another_device(cluster, session):
    tw.manual_seed(1)
    sd = {"layer.weight": tw.randn(8, 4), "layer.bias": tw.arange(4.0),
          "emb": tw.ones(3, 2, dtype=tw.bfloat16), "steps": tw.tensor([7], dtype=tw.int64)}
    commit = tw.hub.push("acme/tiny", sd, token=cluster.hub_token, config={"architectures": ["MLP"]})
    assert len(commit) == 40
    got = tw.hub.load_state_dict("acme/tiny", device="cpu:1")
    assert set(got) == set(sd)
    for k, v in sd.items():
        assert got[k].device == "cpu:1" and got[k].dtype is v.dtype and got[k].shape == v.shape
        np.testing.assert_array_equal(got[k].numpy(), v.numpy())
    # the worker cached the file by sha256 on its host
    assert any(p.name for p in (cluster.worker_cache / "blobs").iterdir())


def test_loaded_weights_compute_and_pin_revisions(cluster, session):
    w1 = tw.ones(2, 2)
    c1 = tw.hub.push("acme/pinned", {"w": w1}, token=cluster.hub_token)
    tw.hub.push("acme/pinned", {"w": w1 * 3}, token=cluster.hub_token)
    old = tw.hub.load_state_dict("acme/pinned", revision=c1)["w"]
    new = tw.hub.load_state_dict("acme/pinned")["w"]
    np.testing.assert_array_equal((old @ new).numpy(), np.full((2, 2), 6.0, np.float32))


def test_file_is_readable_by_safetensors(cluster, session, tmp_path):
    sd = {"a": tw.arange(6.0).reshape(2, 3)}
    tw.hub.push("acme/st", sd, token=cluster.hub_token)
    path = tw.hub.fetch("acme/st", "model.safetensors", endpoint=cluster.hub_url, cache_dir=tmp_path)
    loaded = safetensors.numpy.load_file(str(path))
    np.testing.assert_array_equal(loaded["a"], np.arange(6.0, dtype=np.float32).reshape(2, 3))


def test_push_needs_a_write_token(cluster, session):
    with pytest.raises(tw.hub.HubError):
        tw.hub.push("acme/nope", {"a": tw.ones(1)}, token="tw_wrong")
    with pytest.raises(tw.hub.RepositoryNotFound):
        tw.hub.load_state_dict("acme/nope")


def test_endpoint_comes_from_the_dispatcher(cluster, session):
    assert session.hub_url == cluster.hub_url
    assert not os.environ.get("TENSORWIRE_HUB_URL")  # so load_state_dict above used the dispatcher's URL


def test_a_cluster_can_use_a_hub_that_runs_elsewhere_and_a_hubless_one_refuses_at_once(cluster, session,
                                                                                        shared_clusters):
    """Issue 36, finding 5: ``LocalCluster(hub_url=...)`` points the workers (and sessions) at a running hub; a
    cluster without a hub (the run's shared one), or a load naming another hub than the workers', fails at the call
    with what to do, not later at first use."""
    tw.hub.push("acme/elsewhere", {"w": tw.arange(3.0)}, token=cluster.hub_token)
    with tw.LocalCluster(devices=["cpu:0"], autograd=False, collectives=False, hub_url=cluster.hub_url) as other:
        s = tw.Session(other.address)
        try:
            assert s.hub_url == cluster.hub_url
            w = tw.hub.load_state_dict("acme/elsewhere", session=s)["w"]
            np.testing.assert_array_equal(w.numpy(), [0.0, 1.0, 2.0])
        finally:
            s.close()
    hubless = shared_clusters.default()
    assert hubless.hub_url is None
    s = tw.Session(hubless.address)
    try:
        with pytest.raises(tw.hub.Unauthorized, match="no hub to download from.*hub_url=URL"):
            tw.hub.load_state_dict("acme/elsewhere", endpoint=cluster.hub_url, session=s)
    finally:
        s.close()
    with pytest.raises(tw.hub.Unauthorized, match="download from .* only"):
        tw.hub.load_state_dict("acme/elsewhere", endpoint="http://127.0.0.1:9/")
    with pytest.raises(ValueError, match="not both"):
        tw.LocalCluster(hub_root="x", hub_url="http://127.0.0.1:9")
