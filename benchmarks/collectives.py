"""Issue 6's benchmark: all_reduce of 64 MiB float32 over 2 devices vs raw mpi4py Allreduce between 2 ranks."""

from __future__ import annotations

import json
import subprocess
import sys

import tensorwire as tw
from tensorwire.cluster import mpiexec

from .harness import Result

RAW = r"""
import json, time, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
a = np.ones(NBYTES // 4, np.float32) * (comm.rank + 1)
b = np.empty_like(a)
comm.Allreduce(a, b)
times = []
for _ in range(ROUNDS):
    comm.Barrier()
    t0 = time.perf_counter()
    comm.Allreduce(a, b)
    times.append(time.perf_counter() - t0)
if comm.rank == 0:
    print(json.dumps(sorted(times)[len(times) // 2]))
"""


def raw_allreduce(nbytes: int, rounds: int) -> float:
    code = RAW.replace("NBYTES", str(nbytes)).replace("ROUNDS", str(rounds))
    out = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_all_reduce(mib: int = 64, rounds: int = 5) -> Result:
    nbytes = mib << 20
    with tw.LocalCluster(devices=["cpu:0", "cpu:1"], autograd=False, collectives=True) as c:
        s = tw.Session(c.address)
        with tw.use_session(s):
            parts = [tw.ones(nbytes // 4, device=d) for d in ("cpu:0", "cpu:1")]
            tw.distributed.all_reduce(parts)
            tw.synchronize()
            import time

            times = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                tw.distributed.all_reduce(parts)
                tw.synchronize()
                times.append(time.perf_counter() - t0)
            ours = sorted(times)[len(times) // 2]
        s.close()
    peer = raw_allreduce(nbytes, rounds)
    gb = nbytes / 1e9
    r = (gb / ours) / (gb / peer)
    return Result(f"all_reduce {mib} MiB float32 over 2 devices vs raw mpi4py Allreduce, 2 ranks (bandwidth)",
                  gb / ours, gb / peer, "GB/s", r, ">= 0.7x", r >= 0.7,
                  "ours includes the copy into shared memory and the control messages")


def run_all() -> list[Result]:
    if mpiexec() is None:
        return []
    return [bench_all_reduce()]
