"""Issue 30, nothing lost when something fails: what a failure leaves behind stays bounded and the session goes on.

- a cancel that stops the batch which made a cached Python-scalar tensor (the ``2.5`` of ``x + 2.5``) does not leave
  it reading the cancelled value: the next ``x + 2.5`` works (before: ``DependencyFailed`` for the rest of the
  session), on the dispatcher's path and on a direct channel, and so does a compiled graph that reads it; and the
  same for a kept tensor of small Python data (``tw.tensor([0.5])``) and its view.
- after a lost worker, each batch of a chain of 1000 dependent batches fails naming the first failure once: the
  last one's message is as short as the first's (before: each nested the one before, tens of KB by batch 1500).
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import tensorwire as tw
from tests._liveness import FAST_HEARTBEAT

from .conftest import wait_until

START_BOUND_S = 60  # a worker starts in ~1-2 s on the 2-core test machine


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(devices=["cpu:0", "cpu:1"], autograd=False, collectives=False, extra_env=FAST_HEARTBEAT) as c:
        yield c


def _matmul_chain(s: tw.Session, steps: int = 400, n: int = 1024):
    """A batch of ``steps`` matmuls on cpu:0 (~50 ms each on the 2-core test machine; cancelled between steps)."""
    w = tw.randn(n, n, session=s, device="cpu:0") / np.sqrt(n)
    x = tw.randn(n, n, session=s, device="cpu:0")
    for _ in range(steps):
        x = x @ w
    return x.sum()


@pytest.mark.parametrize("direct", [False, True], ids=["relay", "direct"])
def test_a_cancelled_batch_that_made_a_cached_scalar_does_not_poison_it(cluster, direct):
    s = tw.Session(cluster.address)
    s._plane.enabled = direct  # (False: as TENSORWIRE_DIRECT=0 for this session, every batch through the dispatcher)
    try:
        total = _matmul_chain(s)
        s.flush()  # the worker is busy with the chain ...
        y = s.const(np.zeros(4, np.float32), "cpu:0") + 2.5  # ... and this batch, which makes the cached 2.5, waits
        s.flush()
        tw.cancel(s)  # stops both
        with pytest.raises(tw.Cancelled):
            total.item()
        with pytest.raises(tw.TensorwireError):  # the cancel hit the batch that made the scalar
            y.numpy()
        for _ in range(3):  # the same Python scalar again: a new tensor, not the cancelled one
            z = s.const(np.ones(4, np.float32), "cpu:0") + 2.5
            np.testing.assert_array_equal(z.numpy(), np.full(4, 3.5, np.float32))
        s.synchronize()
    finally:
        s.close()


def test_a_cancelled_batch_that_uploaded_kept_small_data_does_not_poison_it(cluster):
    """The same for a tensor of small Python data and its view, kept and aliased (``Session.small_data``: the
    ``as_tensor(mean).view(-1, 1, 1)`` of torchvision's ``Normalize``)."""
    s = tw.Session(cluster.address)
    try:
        total = _matmul_chain(s)
        s.flush()  # the worker is busy with the chain ...
        tw.tensor([0.5], session=s, device="cpu:0")  # (seen once: kept from the next call, Session.small_data)
        mean = tw.tensor([0.5], session=s, device="cpu:0").view(-1, 1)
        assert s._small_data
        y = s.const(np.zeros((2, 2), np.float32), "cpu:0") - mean  # ... and this batch, which uploads them, waits
        s.flush()
        tw.cancel(s)
        with pytest.raises(tw.Cancelled):
            total.item()
        with pytest.raises(tw.TensorwireError):
            y.numpy()
        for _ in range(3):  # the same data again: tensors that exist
            z = s.const(np.ones((2, 2), np.float32), "cpu:0") - tw.tensor([0.5], session=s, device="cpu:0").view(-1, 1)
            np.testing.assert_array_equal(z.numpy(), np.full((2, 2), 0.5, np.float32))
    finally:
        s.close()


def test_a_compiled_graph_reading_a_cancelled_cached_scalar_replays_with_a_live_one(cluster):
    """A compiled graph reads the cached scalars its traces found (an input of the graph, held by the graph): the
    cancel that stopped the batches which made them leaves the same objects reading new values, so it replays."""
    s = tw.Session(cluster.address)
    try:
        f = tw.compile(lambda x: x * 3.25 + 1.75)
        total = _matmul_chain(s)
        s.flush()  # the worker is busy with the chain, and the traced calls wait behind it
        a = s.const(np.ones(4, np.float32), "cpu:0")
        outs = [f(a) for _ in range(3)]  # the 3.25 and 1.75 are made by the first of these batches
        s.flush()
        tw.cancel(s)
        with pytest.raises(tw.Cancelled):
            total.item()
        with pytest.raises(tw.TensorwireError):  # the cancel hit the batches that made the scalars
            outs[0].numpy()
        replays = f.stats["replays"]
        for k in range(3):
            out = f(s.const(np.full(4, k, np.float32), "cpu:0"))
            np.testing.assert_array_equal(out.numpy(), np.full(4, k * 3.25 + 1.75, np.float32))
        assert f.stats["replays"] > replays and not f.eager, f.stats
    finally:
        s.close()


def test_a_chain_of_failures_after_a_lost_worker_names_the_root_once(cluster):
    s = tw.Session(cluster.address)
    s._plane.enabled = False  # every batch through the dispatcher, which fails each one with its lost input
    try:
        x = tw.arange(8.0, device="cpu:1", session=s) + 1
        np.testing.assert_array_equal(x.numpy(), np.arange(8) + 1)
        old = cluster.services["cpu:1"]
        os.kill(old.proc.pid, signal.SIGKILL)
        old.proc.wait(30)
        wait_until(lambda: next((d.get("pid") for d in s.device_info() if d["device"] == "cpu:1"), None)
                   not in (None, old.proc.pid), START_BOUND_S, "the worker for cpu:1 restarted and registered")
        first = x + 1
        with pytest.raises(tw.WorkerLost) as one:
            first.numpy()
        y = x
        for _ in range(1000):
            y = y + 1
            s.flush()
        with pytest.raises(tw.WorkerLost) as last:
            y.numpy()
        msg = str(last.value)
        print(f"the first failure's message: {len(str(one.value))} chars, the 1000th's: {len(msg)}")
        assert last.value.device == "cpu:1"
        assert msg.count("tensors on cpu:1 are lost") == 1, msg[:2000]  # the root, once
        assert msg.count("was killed by SIGKILL") == 1, msg[:2000]  # how its worker ended, once
        assert msg.count("was lost") <= 2, msg[:2000]  # this batch's input and the root: nothing nested
        assert len(msg) <= len(str(one.value)) + 40, (len(msg), msg[:2000])  # as short as the first (ids' digits)
        z = tw.arange(3.0, device="cpu:1", session=s) + 1  # the device is back
        np.testing.assert_array_equal(z.numpy(), [1.0, 2.0, 3.0])
    finally:
        s.close()
