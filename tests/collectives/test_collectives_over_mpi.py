"""The collectives' MPI path, which ranks on different hosts take: forced on one host with
``TENSORWIRE_COLLECTIVES_SHARED_MEMORY=0`` (the other tests run on the ranks' shared memory), against numpy."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.collectives.shared_memory import ENV

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                reason="mpi4py/mpich not installed (pip install 'tensorwire[mpi]')")

DEVICES = ["cpu:0", "cpu:1"]


@pytest.fixture(scope="module")
def session():
    with tw.LocalCluster(devices=DEVICES, autograd=False, collectives=True, extra_env={ENV: "0"}) as c:
        s = tw.Session(c.address)
        with tw.use_session(s):
            yield s
        s.close()


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_every_collective_over_mpi(session, dtype):
    rng = np.random.default_rng(0)
    arrs = [(rng.standard_normal((6, 5)) * 10).astype(dtype) for _ in DEVICES]
    wide = [a.astype(np.float64) for a in arrs]
    parts = [tw.tensor(a, device=d) for a, d in zip(arrs, DEVICES)]
    tw.distributed.all_reduce(parts, op="max")
    for p in parts:
        np.testing.assert_array_equal(p.numpy().astype(np.float64), np.max(wide, axis=0))
    parts = [tw.tensor(a, device=d) for a, d in zip(arrs, DEVICES)]
    tw.distributed.all_reduce(parts)
    tol = 1e-2 if dtype == "float16" else 1e-6
    for p in parts:
        np.testing.assert_allclose(p.numpy().astype(np.float64), np.sum(wide, axis=0), rtol=tol, atol=tol)
    outs = tw.distributed.reduce_scatter([tw.tensor(a, device=d) for a, d in zip(arrs, DEVICES)])
    for o, ref in zip(outs, np.array_split(np.sum(wide, axis=0), 2)):
        np.testing.assert_allclose(o.numpy().astype(np.float64), ref, rtol=tol, atol=tol)
    gathered = tw.distributed.all_gather([tw.tensor(a, device=d) for a, d in zip(arrs, DEVICES)])
    for g in gathered:
        np.testing.assert_array_equal(g.numpy(), np.stack(arrs))
    parts = [tw.tensor(a, device=d) for a, d in zip(arrs, DEVICES)]
    tw.distributed.broadcast(parts, src=1)
    for p in parts:
        np.testing.assert_array_equal(p.numpy(), arrs[1])


def test_the_shared_memory_path_gives_the_same_bits_as_numpy_in_rank_order():
    """The reduction the ranks do on each other's memory, in process: rank order, blocks, wide dtypes, mean."""
    from tensorwire.collectives import shared_memory as sm
    from tensorwire.protocol import dtypes as D

    rng = np.random.default_rng(1)
    n = sm.BLOCK * 2 + 7  # several blocks and a ragged end
    for dt, op in ((D.float32, "sum"), (D.float64, "mean"), (D.int32, "max"), (D.float16, "sum"), (D.bool_, "sum")):
        xs = [(rng.standard_normal(n) * 4).astype(dt.np) for _ in range(3)]
        outs = [np.empty_like(x) for x in xs]
        sm.reduce_into(xs, outs, op, dt)
        wide = [x.astype(sm.work_dtype(dt)) for x in xs]
        ref = {"sum": np.add, "mean": np.add, "max": np.maximum}[op](wide[0], wide[1])
        ref = {"sum": np.add, "mean": np.add, "max": np.maximum}[op](ref, wide[2])
        if op == "mean":
            ref = ref / 3
        for o in outs:
            np.testing.assert_array_equal(o, ref.astype(dt.np))
    assert [sm.share(10, 3, r) for r in range(3)] == [(0, 4), (4, 7), (7, 10)]
