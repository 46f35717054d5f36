"""The CUDA backend's rows (a GPU is needed; without one ``run_all`` returns one row whose note says
``skipped: <reason>``, and prints it).

The rows are ``tensorwire selftest``'s speed rows (:mod:`tensorwire.selftest`, their one home), against PyTorch on the
same GPU, run in the same process and interleaved: matmul for 1024- and 4096-cubes in float32 and float16 (cuBLAS on
both sides; target at least 0.9x), the 8-op elementwise chain on 64M float32 elements, ``tw.compile`` against
``torch.compile`` (target at least 1.0x; both eager times are noted), and a 784-512-512-10 MLP training step
against PyTorch CUDA eager (target at most 1.2x its time). Each timed round queues the work and then waits for the
device (ours: ``tw.synchronize()`` or a loss read; torch: ``torch.cuda.synchronize()``).
"""

from __future__ import annotations

import tensorwire as tw
from tensorwire import selftest as S

from .harness import Result

DEVICE = "cuda:0"


def why_not() -> str | None:
    """None when a CUDA GPU and PyTorch CUDA are here, else why the rows are left out."""
    from tensorwire.backends.cuda import CUDABackend

    info = CUDABackend().devices()[0]
    if not info.available:
        return f"no CUDA GPU: {info.reason}"
    torch, why = S.torch_device(DEVICE)
    return None if torch is not None else why


def _result(sp: S.Speed, unit: str = "ms") -> Result:
    return Result(sp.name, sp.ours_ms, sp.peer_ms, unit, sp.ratio, sp.target, bool(sp.met), sp.note)


def run_all() -> list[Result]:
    why = why_not()
    if why:
        print(f"benchmarks.cuda: skipped: {why}")
        return [Result("cuda:0 rows (matmul, 8-op chain, MLP training step) vs PyTorch CUDA", float("nan"),
                       float("nan"), "ms", float("nan"), "see BENCHMARKS.md", False, f"skipped: {why}")]
    with tw.LocalCluster(devices=[DEVICE]) as c:
        s = tw.connect(c.address)
        try:
            rows = [S.speed_matmul(DEVICE, n, dt) for n in (1024, 4096) for dt in ("float32", "float16")]
            return [_result(r) for r in (*rows, S.speed_chain(DEVICE), S.speed_mlp_step(DEVICE))]
        finally:
            s.close()
