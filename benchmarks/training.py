"""Issue 4's benchmarks: one full training step (forward, backward, Adam) of the digits MLP and CNN on the
cluster against PyTorch CPU eager with the same thread count, plus device memory per step.

The worker runs its kernels on ``THREADS`` BLAS threads (``LocalCluster(worker_threads=)``, which the worker
applies with threadpoolctl) and torch on ``set_num_threads(THREADS)``: the same thread count on both sides."""

from __future__ import annotations

import numpy as np

import tensorwire as tw

from .harness import Result, adam_step, every, interleaved, warm_up

THREADS = 1
BATCH = 64
LOG_EVERY = 10  # how often the examples read the loss back


def _data(rng, cnn: bool):
    x = rng.random((BATCH, 64), dtype=np.float32)
    y = rng.integers(0, 10, BATCH)
    return (x.reshape(-1, 1, 8, 8) if cnn else x), y


def _models(cnn: bool):
    import torch

    if cnn:
        def make(m):
            return m.Sequential(m.Conv2d(1, 8, 3, padding=1), m.ReLU(), m.MaxPool2d(2), m.Conv2d(8, 16, 3, padding=1),
                                m.ReLU(), m.MaxPool2d(2), m.Flatten(), m.Linear(64, 64), m.ReLU(), m.Linear(64, 10))
    else:
        def make(m):
            return m.Sequential(m.Linear(64, 128), m.ReLU(), m.Linear(128, 10))
    tm = make(torch.nn)
    mm = make(tw.nn)
    mm.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    return mm, tm


def bench_step(cnn: bool) -> list[Result]:
    import torch

    torch.set_num_threads(THREADS)
    rng = np.random.default_rng(0)
    x, y = _data(rng, cnn)
    mm, tm = _models(cnn)
    xs, ys = tw.tensor(x), tw.tensor(y)
    tx, ty = torch.tensor(x), torch.tensor(y)
    opt = tw.optim.Adam(mm.parameters(), lr=1e-3)
    topt = torch.optim.Adam(tm.parameters(), lr=1e-3)

    def ours_step():
        return adam_step(tw.nn.functional, mm, opt, xs, ys)

    def peer_step():
        return adam_step(torch.nn.functional, tm, topt, tx, ty)

    name = "CNN" if cnn else "MLP"
    params = sum(p.nbytes for p in mm.parameters())
    out = []
    for k in (LOG_EVERY, 1):
        ours, peer = every(ours_step, k), every(peer_step, k)
        warm_up(ours, peer, max(1, 10 // k))  # (the worker compiles the step's plans meanwhile)
        t_ours, t_peer = interleaved(ours, peer, rounds=7, number=max(1, 20 // k))
        t_ours, t_peer = t_ours / k, t_peer / k
        ratio = t_ours / t_peer
        dev = tw.memory_stats()["devices"]["cpu:0"]
        read = "loss read every step" if k == 1 else f"loss read every {k} steps"
        out.append(Result(f"digits {name} training step (fwd+bwd+Adam, batch {BATCH}, {read}) vs torch eager, "
                          f"{THREADS} thread", t_ours * 1e3, t_peer * 1e3, "ms", ratio, "<= 1.5x", ratio <= 1.5,
                          note=f"device memory between steps: {dev['buffers']} buffers, {dev['bytes'] / 1024:.1f} KiB "
                               f"(parameters {params / 1024:.1f} KiB, Adam state {2 * params / 1024:.1f} KiB)"))
    return out


def run_all() -> list[Result]:
    results = []
    with tw.LocalCluster(devices=["cpu:0"], worker_threads=THREADS) as c:
        s = tw.connect(c.address)
        results.extend(bench_step(False))
        results.extend(bench_step(True))
        s.close()
    return results
