"""A worker dies: sessions get WorkerLost within a bounded time; a restarted worker serves new work."""

from __future__ import annotations

import time

import numpy as np
import pytest

import tensorwire as tw


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(devices=["cpu:0", "cpu:1"]) as c:
        yield c


def test_worker_lost_then_restarted(cluster, session):
    a = tw.arange(6, device="cpu:1") * 2
    keep = tw.arange(4, device="cpu:0") + 1
    a.numpy()
    cluster.services["cpu:1"].kill()
    t0 = time.monotonic()
    with pytest.raises(tw.WorkerLost, match="cpu:1"):
        (a + 1).numpy()
    assert time.monotonic() - t0 < 30
    # other devices are untouched
    np.testing.assert_array_equal(keep.numpy(), np.arange(4) + 1)
    cluster.start_workers(["cpu:1"])
    b = tw.ones(3, device="cpu:1") * 5
    np.testing.assert_array_equal(b.numpy(), [5, 5, 5])
    with pytest.raises(tw.TensorwireError):  # a's buffer died with the old worker
        a.numpy()


def test_dispatcher_death_is_reported_not_hung():
    c = tw.LocalCluster(devices=["cpu:0"], autograd=False)
    try:
        s = tw.Session(c.address)
        x = tw.ones(3, session=s)
        x.numpy()
        c.services["dispatcher"].kill()
        t0 = time.monotonic()
        with pytest.raises((tw.ConnectionFailed, tw.TensorwireError), match="dispatcher"):
            (x + 1).numpy()
        assert time.monotonic() - t0 < 30
        s.close()
    finally:
        c.close()
