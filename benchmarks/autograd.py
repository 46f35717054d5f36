"""Issue 3's benchmarks: a training step (forward + backward + SGD) against PyTorch CPU eager."""

from __future__ import annotations

import os

import numpy as np

import tensorwire as tw

from .harness import Result, interleaved

SIZES = (784, 512, 512, 10)
BATCH = 256
LR = 0.01


def _params(rng):
    ps = []
    for i, o in zip(SIZES, SIZES[1:]):
        ps.append((rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32))
        ps.append(np.zeros(o, np.float32))
    return ps


def _loss(x, y, ps):
    """A 3-layer MLP with raw tensors and a cross-entropy built from log_softmax + gather (torch or tw)."""
    w1, b1, w2, b2, w3, b3 = ps
    h = (x @ w1 + b1).relu()
    h = (h @ w2 + b2).relu()
    logits = h @ w3 + b3
    return -logits.log_softmax(-1).gather(1, y).mean()


def bench_mlp_step() -> Result:
    name = (f"MLP {'-'.join(map(str, SIZES))} batch {BATCH} float32: forward + backward + SGD step, "
            "cached plan and backward graph, vs PyTorch CPU eager")
    try:
        import torch
    except ImportError:
        return Result(name, float("nan"), float("nan"), "ms", float("nan"), "<= 1.5x", False,
                      "skipped: torch is not installed (pip install torch)")
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    yn = rng.integers(0, SIZES[-1], size=(BATCH, 1)).astype(np.int64)
    pn = _params(rng)

    x, y = tw.from_numpy(xn), tw.from_numpy(yn)
    ps = [tw.from_numpy(p).requires_grad_() for p in pn]
    xt, yt = torch.from_numpy(xn), torch.from_numpy(yn)
    pt = [torch.from_numpy(p.copy()).requires_grad_() for p in pn]
    out = {}

    def ours():
        loss = _loss(x, y, ps)
        loss.backward()
        with tw.no_grad():
            for p in ps:
                p -= LR * p.grad
                p.grad = None
        out["tw"] = loss.item()

    def peer():
        loss = _loss(xt, yt, pt)
        loss.backward()
        with torch.no_grad():
            for p in pt:
                p -= LR * p.grad
                p.grad = None
        out["torch"] = loss.item()

    requests = tw.autograd.stats.requests
    for _ in range(3):  # warm: plans compiled, backward graph cached
        ours()
        peer()
    np.testing.assert_allclose(out["tw"], out["torch"], rtol=1e-3)
    asked = tw.autograd.stats.requests - requests
    t_ours, t_peer = interleaved(ours, peer, rounds=7, number=5)
    np.testing.assert_allclose(out["tw"], out["torch"], rtol=1e-3)
    r = t_ours / t_peer
    return Result(name, t_ours * 1e3, t_peer * 1e3, "ms", r, "<= 1.5x", r <= 1.5,
                  f"{threads} threads each; {asked} autograd-service request(s) over all the steps; "
                  "losses agree with torch to 1e-3")


def run_all() -> list[Result]:
    with tw.LocalCluster(devices=["cpu:0"]) as c:
        s = tw.connect(c.address)
        try:
            return [bench_mlp_step()]
        finally:
            s.close()
