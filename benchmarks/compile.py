"""Issue 19's benchmarks: ``tw.compile`` replays against the peers of the uncompiled rows (numpy eager, PyTorch eager
with the same thread count, the uncompiled function), run side by side in the same process."""

from __future__ import annotations

import numpy as np

import tensorwire as tw

from .harness import Result, adam_step, every, interleaved, warm_up
from .training import THREADS, _data, _models


def bench_loop(n: int = 10_000) -> Result:
    """The 10,000-op elementwise loop of ``core.bench_recorded_ops`` inside ``tw.compile``, replayed."""
    x = tw.ones(4)
    xn = np.ones(4, np.float32)

    @tw.compile
    def loop(y):
        for _ in range(n):
            y = y + 1
        return y

    def ours():
        loop(x).numpy()

    def peer():
        y = xn
        for _ in range(n):
            y = y + np.float32(1)
        return y

    for _ in range(4):  # two calls that agree compile the graph; the next ones replay it
        ours()
    assert loop.stats["replays"] > 0, loop.stats
    np.testing.assert_array_equal(loop(x).numpy(), peer())
    t_ours, t_peer = interleaved(ours, peer, rounds=5)
    r = t_ours / t_peer
    return Result(
        f"the {n:,}-op elementwise loop inside tw.compile, replayed, then one numpy(), per op vs numpy eager",
        t_ours / n * 1e6,
        t_peer / n * 1e6,
        "us/op",
        r,
        "<= 2x",
        r <= 2,
    )


def _torch_step(tm, x, y):
    """PyTorch's eager step of the digits MLP ``tm`` on ``(x, y)`` with its own Adam, on ``THREADS`` threads: the
    peer of the step rows."""
    import torch

    torch.set_num_threads(THREADS)
    tx, ty = torch.tensor(x), torch.tensor(y)
    topt = torch.optim.Adam(tm.parameters(), lr=1e-3)
    return lambda: adam_step(torch.nn.functional, tm, topt, tx, ty)


def bench_step(k: int, steps_a_round: int = 20) -> Result:
    """The digits MLP training step (forward, backward, Adam) inside ``tw.compile``, the loss read every ``k`` steps,
    against PyTorch eager with the same thread count, alternating ``steps_a_round`` steps of each. A row with longer
    rounds is a report: torch's steps, run in the client's process between ours, slow our next round down (see
    BENCHMARKS.md, session 13), and the longer the rounds, the less of that is in the figure."""
    x, y = _data(np.random.default_rng(0), False)
    mm, tm = _models(False)
    xs, ys = tw.tensor(x), tw.tensor(y)
    opt = tw.optim.Adam(mm.parameters(), lr=1e-3)
    peer_step = _torch_step(tm, x, y)

    @tw.compile
    def ours_step(xb, yb):
        return adam_step(tw.nn.functional, mm, opt, xb, yb)

    ours, peer = every(lambda: ours_step(xs, ys), k), every(peer_step, k)

    warm_up(ours, peer, max(2, 10 // k))  # (the worker compiles the step's plans meanwhile)
    assert ours_step.stats["replays"] > 0, ours_step.stats
    t_ours, t_peer = interleaved(ours, peer, rounds=7, number=max(1, steps_a_round // k))
    t_ours, t_peer = t_ours / k, t_peer / k
    r = t_ours / t_peer
    target = 1.2 if k == 1 else 1.0
    read = "loss read every step" if k == 1 else f"loss read every {k} steps"
    name = f"digits MLP training step inside tw.compile (fwd+bwd+Adam, {read}) vs torch eager, {THREADS} thread"
    if steps_a_round != 20:
        return Result(f"{name}, {steps_a_round}-step rounds (report)", t_ours * 1e3, t_peer * 1e3, "ms", r,
                      "report", True)
    return Result(name, t_ours * 1e3, t_peer * 1e3, "ms", r, f"<= {target}x", r <= target)


def bench_roundtrip() -> Result:
    """The round trip of a compiled one-op function against the same op uncompiled."""
    x = tw.ones(4)

    @tw.compile
    def add_one(y):
        return y + 1

    for _ in range(200):
        add_one(x).numpy()
        (x + 1).numpy()
    assert add_one.stats["replays"] > 0, add_one.stats
    t_ours, t_peer = interleaved(lambda: add_one(x).numpy(), lambda: (x + 1).numpy(), rounds=9, number=300)
    r = t_ours / t_peer
    return Result(
        "round trip of a compiled one-op function `f(x).numpy()` vs the op uncompiled `(x + 1).numpy()`",
        t_ours * 1e6,
        t_peer * 1e6,
        "us",
        r,
        "report",
        True,
        "a replay sends the same one message; the difference is the signature check and the bindings",
    )


def bench_floor() -> Result:
    """What the every-step row's target leaves: the round trip of a compiled one-op function (client -> dispatcher ->
    worker -> dispatcher -> client, no work to speak of) against PyTorch's whole eager MLP step, side by side."""
    x, y = _data(np.random.default_rng(0), False)
    _, tm = _models(False)
    peer = every(_torch_step(tm, x, y), 1)
    z = tw.ones(4)

    @tw.compile
    def add_one(v):
        return v + 1

    def ours():
        add_one(z).numpy()

    warm_up(ours, peer, 200)
    assert add_one.stats["replays"] > 0, add_one.stats
    t_ours, t_peer = interleaved(ours, peer, rounds=9, number=100)
    r = t_ours / t_peer
    return Result(
        "the broker's floor: a compiled one-op round trip `f(x).numpy()` vs torch's whole eager digits MLP step "
        f"(fwd+bwd+Adam, loss read), {THREADS} thread",
        t_ours * 1e3,
        t_peer * 1e3,
        "ms",
        r,
        "report",
        True,
        "the every-step row's 1.2x leaves (1.2 - this ratio) of torch's step for the replay, the forward pass and "
        "the answer: four socket hops through three processes cost about as much as torch's whole step here",
    )


def run_all() -> list[Result]:
    results = []
    with tw.LocalCluster(devices=["cpu:0"], worker_threads=THREADS) as c:
        s = tw.connect(c.address)
        results.append(bench_loop())
        results.append(bench_step(1))
        results.append(bench_floor())
        results.append(bench_step(10))
        results.append(bench_step(10, steps_a_round=200))
        results.append(bench_roundtrip())
        s.close()
    return results
