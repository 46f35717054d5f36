"""Issue 16, finding 5: one session's long op does not hold the other sessions of its worker, and a session can
stop its running work (``tw.cancel()``, or closing the session) between steps with a typed ``Cancelled`` error.

Measured on a loaded 2-core VM: a victim's small op takes ~0.3 ms at p50 and ~0.7 ms at p99 while a neighbour's
single 1.3 s reduction runs (before: the victim waited for the whole reduction); a cancelled chain of matmuls answers
``Cancelled`` ~0.3 s after the cancel and the session's next op takes ~2 ms. The bounds below leave wide headroom.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import tensorwire as tw

from ._background import in_background

#: how long the neighbour's op should run; the victim's worst latency must stay far below it
LONG_OP_S = 6.0
VICTIM_WORST_S = 2.0
CANCEL_BOUND_S = 5.0


def _long_reduction_size(s: tw.Session) -> int:
    """Elements of ``ones(1).expand(n).sum()`` taking about LONG_OP_S on this machine (one kernel)."""
    n0 = 1 << 28
    took = []
    for _ in range(3):  # the first run compiles the kernel
        t0 = time.perf_counter()
        tw.ones(1, session=s).expand(n0).sum().item()
        took.append(time.perf_counter() - t0)
    return int(min(1 << 40, max(n0, n0 * LONG_OP_S / max(min(took), 1e-3))))


def _matmul_chain(s: tw.Session, steps: int = 400, n: int = 1024):
    """A batch of ``steps`` matmuls (~50 ms each here: one step at a time, nothing fuses them)."""
    w = tw.randn(n, n, session=s) / np.sqrt(n)
    x = tw.randn(n, n, session=s)
    for _ in range(steps):
        x = x @ w
    return x.sum()


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_long_op_does_not_stall_another_session(cluster):
    noisy, victim = tw.Session(cluster.address), tw.Session(cluster.address)
    try:
        n = _long_reduction_size(noisy)
        x = tw.ones(3, session=victim)
        for _ in range(3):  # the machine's speed varies (shared cores): a run too short to show anything is redone
            th, out = in_background(lambda n=n: tw.ones(1, session=noisy).expand(n).sum().item())
            lat = []
            for _ in range(1_000_000):  # for as long as the neighbour's op runs
                if not th.is_alive():
                    break
                t0 = time.perf_counter()
                assert (x + 1).tolist() == [2.0, 2.0, 2.0]
                lat.append(time.perf_counter() - t0)
            th.join(120)
            assert "error" not in out, out.get("error")
            assert abs(out["value"] - n) <= n * 1e-6  # (float32 sum)
            if out["seconds"] > 2 * VICTIM_WORST_S:
                break
            n = int(n * 3 * VICTIM_WORST_S / max(out["seconds"], 0.1))
        assert out["seconds"] > 2 * VICTIM_WORST_S, "the neighbour's op was too short to show anything"
        assert lat and max(lat) < VICTIM_WORST_S, (max(lat), out["seconds"])
    finally:
        noisy.close()
        victim.close()


def test_cancel_stops_running_work_between_steps_and_the_session_goes_on(cluster):
    s = tw.Session(cluster.address)
    try:
        total = _matmul_chain(s)
        stop = threading.Event()

        def canceller():  # cancel as soon as the batch is out (a cancel before it ships has nothing to stop)
            for _ in range(1000):
                if stop.wait(0.2):
                    return
                tw.cancel(s)

        ct = threading.Thread(target=canceller, daemon=True)
        ct.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(tw.Cancelled):
                total.item()
        finally:
            stop.set()
            ct.join(10)
        assert time.monotonic() - t0 < CANCEL_BOUND_S  # the chain alone runs ~20 s here
        t0 = time.monotonic()
        assert (tw.ones(2, session=s) + 1).tolist() == [2.0, 2.0]  # the next op does not wait for the chain
        assert time.monotonic() - t0 < CANCEL_BOUND_S
        with pytest.raises(tw.TensorwireError):  # the cancelled value stays failed
            total.item()
    finally:
        s.close()


def test_cancel_from_the_same_thread_stops_submitted_work(cluster):
    s = tw.Session(cluster.address)
    try:
        total = _matmul_chain(s)
        s.flush()  # shipped, not waited for
        tw.cancel(s)
        t0 = time.monotonic()
        with pytest.raises(tw.Cancelled):
            total.item()
        assert time.monotonic() - t0 < CANCEL_BOUND_S
        assert tw.arange(3, session=s).tolist() == [0, 1, 2]
        s.synchronize()  # the cancel was reported once; the session is clean
    finally:
        s.close()


def test_closing_the_session_stops_its_work(cluster):
    pid = cluster.services["cpu:0"].proc.pid
    s = tw.Session(cluster.address)
    total = _matmul_chain(s)
    s.flush()
    busy0 = _cpu_seconds(pid)
    t0 = time.monotonic()
    deadline = t0 + 30
    while _cpu_seconds(pid) - busy0 < 0.5 and time.monotonic() < deadline:  # the chain is running
        time.sleep(0.05)
    s.close()
    del total
    time.sleep(0.5)  # one step (~50 ms here) may still finish
    idle0, w0 = _cpu_seconds(pid), time.monotonic()
    time.sleep(1.0)  # (100 clock ticks: a core's half is 50 of them)
    used = (_cpu_seconds(pid) - idle0) / (time.monotonic() - w0)
    assert used < 0.5, f"the worker still uses {used:.0%} of a core after the session closed"
    other = tw.Session(cluster.address)
    try:
        assert (tw.ones(2, session=other) * 3).tolist() == [3.0, 3.0]
    finally:
        other.close()


def test_a_pooled_batch_answers_its_fetch_before_the_rest_runs(cluster):
    """A fetched value made early in a long batch (on a pool thread) comes back before the rest runs: the rest can
    still be cancelled after the answer (were the answer sent at the end, the chain would have run to completion)."""
    s = tw.Session(cluster.address)
    try:
        a = tw.randn(1024, 1024, session=s)
        first = (a @ a).sum()  # the batch's first steps
        total = _matmul_chain(s)  # recorded after it: the same batch, ~20 s of work
        assert np.isfinite(first.item())
        tw.cancel(s)
        with pytest.raises(tw.Cancelled):
            total.item()
        assert tw.arange(3, session=s).tolist() == [0, 1, 2]
    finally:
        s.close()
