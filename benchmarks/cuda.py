"""The CUDA backend's rows (a GPU is needed; without one ``run_all`` returns one row whose note says
``skipped: <reason>``, and prints it).

Peers run in the same process on the same GPU, interleaved: PyTorch CUDA's matmul (cuBLAS, like ours) for
1024x1024 and 4096x4096 float32 and float16 (target: at least 0.9x), PyTorch eager for an 8-op elementwise
chain on 64M float32 elements (target: at least 2x, since we run it as one memory-bound kernel and eager runs 8), and
a digits-style MLP training step (784-512-512-10, batch 256, cross-entropy, backward, Adam) against the same model
in PyTorch CUDA eager (target: at most 1.2x its time).
Each round queues ``REPEAT`` operations and then waits for the device (ours: ``tw.synchronize()``; torch:
``torch.cuda.synchronize()``), so both sides are timed from submission to completion.
"""

from __future__ import annotations

import numpy as np

import tensorwire as tw

from .harness import Result, adam_step, every, interleaved

REPEAT = 10
CHAIN_N = 64 * 2**20
MLP_SIZES = (784, 512, 512, 10)
MLP_BATCH = 256
LOG_EVERY = 10  # the MLP loop reads its loss back every this many steps, as a training loop that logs it


def _chain(x):
    """8 elementwise ops: mul, add, relu, exp, sin, mul, sub, abs."""
    return (((x * 2 + 1).relu().exp().sin() * x) - 0.5).abs()


def why_not() -> str | None:
    """None when a CUDA GPU and PyTorch CUDA are here, else why the rows are left out."""
    from tensorwire.backends.cuda import CUDABackend

    info = CUDABackend().devices()[0]
    if not info.available:
        return f"no CUDA GPU: {info.reason}"
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (the peer)"
    if not torch.cuda.is_available():
        return "PyTorch has no CUDA here (a CPU-only build?)"
    return None


def bench_matmul(n: int, dtype: str) -> Result:
    import torch

    rng = np.random.default_rng(0)
    an, bn = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
    a, b = tw.tensor(an, device="cuda:0"), tw.tensor(bn, device="cuda:0")
    ta, tb = torch.from_numpy(an).cuda(), torch.from_numpy(bn).cuda()

    def ours():
        outs = [a @ b for _ in range(REPEAT)]
        tw.synchronize()
        return outs

    def peer():
        outs = [ta @ tb for _ in range(REPEAT)]
        torch.cuda.synchronize()
        return outs

    ours()
    peer()
    t_ours, t_peer = interleaved(ours, peer, rounds=5)
    np.testing.assert_allclose((a @ b).numpy().astype(np.float32), (ta @ tb).float().cpu().numpy(),
                               rtol=2e-2, atol=2e-2 * np.sqrt(n))
    r = t_peer / t_ours
    flops = 2 * n**3 * REPEAT
    return Result(f"{n}x{n} {dtype} matmul on cuda:0 (cuBLAS) vs PyTorch CUDA (speed)", t_ours / REPEAT * 1e3,
                  t_peer / REPEAT * 1e3, "ms", r, ">= 0.9x", r >= 0.9,
                  f"ours {flops / t_ours / 1e12:.1f} TFLOP/s, torch {flops / t_peer / 1e12:.1f} TFLOP/s")


def bench_chain() -> Result:
    import torch

    xn = np.random.default_rng(0).standard_normal(CHAIN_N).astype(np.float32)
    x = tw.tensor(xn, device="cuda:0")
    tx = torch.from_numpy(xn).cuda()

    def ours():
        y = _chain(x)
        tw.synchronize()
        return y

    def peer():
        y = _chain(tx)
        torch.cuda.synchronize()
        return y

    ours()
    peer()
    t_ours, t_peer = interleaved(ours, peer, rounds=5)
    np.testing.assert_allclose(_chain(x).numpy()[:4096], _chain(tx)[:4096].cpu().numpy(), rtol=1e-4, atol=1e-5)
    r = t_peer / t_ours
    return Result("8-op elementwise chain, 64M float32 on cuda:0 (one fused kernel) vs PyTorch eager CUDA (speed)",
                  t_ours * 1e3, t_peer * 1e3, "ms", r, ">= 2x", r >= 2.0, "includes one round trip to the worker")


def _mlp(m):
    i, h1, h2, o = MLP_SIZES
    return m.Sequential(m.Linear(i, h1), m.ReLU(), m.Linear(h1, h2), m.ReLU(), m.Linear(h2, o))


def bench_mlp_step() -> Result:
    """One training step (forward, cross-entropy, backward, Adam) of a 784-512-512-10 MLP on batch 256, ours on
    cuda:0 against PyTorch CUDA eager from the same initial weights and data; the first steps' losses must agree."""
    import torch

    rng = np.random.default_rng(0)
    xn = rng.random((MLP_BATCH, MLP_SIZES[0]), dtype=np.float32)
    yn = rng.integers(0, MLP_SIZES[-1], MLP_BATCH)
    torch.manual_seed(0)
    tm = _mlp(torch.nn).cuda()
    state = {k: v.detach().cpu().numpy() for k, v in tm.state_dict().items()}
    mm = _mlp(tw.nn)
    mm.load_state_dict({k: tw.tensor(v, device="cuda:0") for k, v in state.items()})
    mm = mm.to("cuda:0")
    x, y = tw.tensor(xn, device="cuda:0"), tw.tensor(yn, device="cuda:0")
    tx, ty = torch.from_numpy(xn).cuda(), torch.from_numpy(yn).cuda()
    opt = tw.optim.Adam(mm.parameters(), lr=1e-3)
    topt = torch.optim.Adam(tm.parameters(), lr=1e-3)

    def ours_step():
        return adam_step(tw.nn.functional, mm, opt, x, y)

    def peer_step():
        return adam_step(torch.nn.functional, tm, topt, tx, ty)

    first = [(ours_step().item(), peer_step().item()) for _ in range(3)]
    np.testing.assert_allclose(*zip(*first), rtol=1e-3)

    ours, peer = every(ours_step, LOG_EVERY), every(peer_step, LOG_EVERY)
    ours()
    peer()
    t_ours, t_peer = interleaved(ours, peer, rounds=7)
    t_ours, t_peer = t_ours / LOG_EVERY, t_peer / LOG_EVERY
    r = t_ours / t_peer
    return Result(f"MLP {'-'.join(map(str, MLP_SIZES))} training step (fwd+bwd+Adam, batch {MLP_BATCH}, loss read "
                  f"every {LOG_EVERY} steps) on cuda:0 vs PyTorch CUDA eager", t_ours * 1e3, t_peer * 1e3, "ms", r,
                  "<= 1.2x", r <= 1.2, "ratio: our time / torch's")


def run_all() -> list[Result]:
    why = why_not()
    if why:
        print(f"benchmarks.cuda: skipped: {why}")
        return [Result("cuda:0 rows (matmul, 8-op chain, MLP training step) vs PyTorch CUDA", float("nan"),
                       float("nan"), "ms", float("nan"), "see BENCHMARKS.md", False, f"skipped: {why}")]
    with tw.LocalCluster(devices=["cuda:0"], autograd=False) as c:
        s = tw.connect(c.address)
        try:
            return [*(bench_matmul(n, dt) for n in (1024, 4096) for dt in ("float32", "float16")), bench_chain(),
                    bench_mlp_step()]
        finally:
            s.close()
