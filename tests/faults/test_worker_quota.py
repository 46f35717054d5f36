"""Issue 16, finding 5: per-session memory quotas on each device, and the worker's plan cache bounded by bytes.

The cluster of this module gives each session 64 MiB per device and each worker 2 MiB of plans (1 MiB a session).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import tensorwire as tw

QUOTA = 64 << 20
PLAN_CACHE = 2 << 20
MIB = 1 << 20
BOUND_S = 30.0  # every test here runs in ~1-3 s


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(
        devices=["cpu:0", "cpu:1"],
        autograd=False,
        session_memory="64MiB",
        extra_env={"TENSORWIRE_PLAN_CACHE_BYTES": str(PLAN_CACHE)},
    ) as c:
        yield c


@pytest.fixture
def s(cluster):
    sess = tw.Session(cluster.address)
    with tw.use_session(sess):
        yield sess
    sess.close()


def _floats(mib: int) -> int:
    """How many float32 elements make ``mib`` MiB."""
    return mib * MIB // 4


def _filled(mib: int, **where) -> tw.Tensor:
    """A float32 tensor of ``mib`` MiB computed on its worker (``device=``, ``session=`` as for ``tw.arange``).
    arange, not randn: the quota counts the bytes either way, and randn took seconds of a worker for each of these."""
    return tw.arange(_floats(mib), dtype=tw.float32, **where)


def _mine(s: tw.Session, device: str = "cpu:0") -> dict:
    st = s.cluster_status()
    return st["devices"][device].get(st["session"], {"buffers": 0, "bytes": 0, "plans": 0, "plan_bytes": 0})


def test_over_quota_is_a_typed_error_naming_the_limit_and_the_use(s):
    t0 = time.monotonic()
    a = _filled(32)  # 32 MiB
    a.sum().item()
    b = _filled(40)  # 40 MiB more: over the 64 MiB limit
    with pytest.raises(tw.QuotaExceeded) as info:
        b.sum().item()
    assert isinstance(info.value, tw.OutOfMemory)  # except MemoryError / tw.OutOfMemory catch it too
    msg = str(info.value)
    assert "64.0 MiB" in msg and "32.0 MiB" in msg and "cpu:0" in msg, msg
    # the session goes on: freeing makes room again
    del a, b
    c = _filled(40)
    assert c.shape == (_floats(40),)
    assert np.isfinite(c.sum().item())
    assert _mine(s)["bytes"] <= QUOTA
    assert time.monotonic() - t0 < BOUND_S


def test_quota_is_per_session_and_per_device(cluster, s):
    a = _filled(48)  # 48 MiB on cpu:0
    a.sum().item()
    b = _filled(48, device="cpu:1")  # another device: a quota of its own
    assert np.isfinite(b.sum().item())
    other = tw.Session(cluster.address)
    try:
        c = _filled(48, session=other)  # another session on cpu:0: unaffected
        assert np.isfinite(c.sum().item())
    finally:
        other.close()
    with pytest.raises(tw.QuotaExceeded):
        _filled(48).sum().item()
    del a, b


def test_a_large_temporary_counts_against_the_quota(s):
    with pytest.raises(tw.QuotaExceeded):  # refused before it runs: nothing of it is kept, but arange and the
        # product hold 80 MiB at once
        (_filled(40) * 2).sum().item()
    assert tw.ones(3).sum().item() == 3.0


def test_views_of_one_tensor_count_once(s):
    before = _mine(s)["bytes"]
    x = _filled(16)  # 16 MiB
    views = [x.reshape(2, -1), x[::2], x.expand(3, x.shape[0]), x.reshape(4, -1).permute(1, 0)]
    s.synchronize()
    held = _mine(s)["bytes"] - before
    assert 16 * MIB <= held < 17 * MIB, held
    del views, x


def test_moving_a_tensor_in_counts_on_the_destination(s):
    x = _filled(40)  # 40 MiB on cpu:0
    y = _filled(40, device="cpu:1")  # 40 MiB on cpu:1
    s.synchronize()
    with pytest.raises(tw.QuotaExceeded):  # 80 MiB on cpu:1
        x.to("cpu:1").sum().item()
    del y
    assert np.isfinite(x.to("cpu:1").sum().item())


def test_plan_cache_is_bounded_by_bytes_and_evicted_plans_replay(s):
    x = tw.ones(4)
    t0 = time.monotonic()

    def structure(k: int):  # a distinct batch structure per k (a chain of k ops), replayed as a plan after its first
        y = x
        for i in range(k):
            y = y * 1.5 if i % 2 else y + 1
        return y.sum().item()

    def expect(k: int) -> float:
        v = np.ones(4)
        for i in range(k):
            v = v * 1.5 if i % 2 else v + 1
        return float(v.sum())

    kinds = range(1, 61)
    for _ in range(2):  # the second round replays plans, most of them evicted by then
        for k in kinds:
            assert structure(k) == pytest.approx(expect(k))
    mine = _mine(s)
    assert 0 < mine["plan_bytes"] <= PLAN_CACHE // 2, mine  # one session: at most half the worker's cache
    assert mine["plans"] < len(kinds), mine
    assert time.monotonic() - t0 < BOUND_S
