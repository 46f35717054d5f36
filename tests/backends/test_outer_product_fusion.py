"""Outer products in compiled fragments (issue 37): a matmul that contracts a dimension of 1 (``[..., M, 1] @
[..., 1, N]``, a recurrent layer's weight gradient a letter) is lowered as the elementwise product it is, so a fused
kernel sums the letters' products and updates the weight without a BLAS call and a buffer per letter. Its values are
the numpy kernel's (``np.multiply``) bit for bit, zeros' signs, infinities and NaN included, and so are the sums the
kernel fuses after it (``-ffp-contract=off``: a product and a sum round apart, as numpy rounds them)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.codegen.lower import HostStep, lower
from tensorwire.backends.cpu import compiled
from tensorwire.protocol import dtypes as D

pytestmark = pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")


#: two letters' weight gradients summed and taken off the weight: ``w + (x1 @ y1 + x2 @ y2) * -0.05``
NODES = [["matmul", [-1, -2], None], ["matmul", [-3, -4], None], ["add", [0, 1], None],
         ["full", [], {"shape": [], "dtype": "float32", "value": -0.05}], ["mul", [2, 3], None],
         ["add", [-5, 4], None]]


def _inputs(rng, lead: tuple, m: int, n: int, dt) -> list:
    xs = [rng.standard_normal((*lead, m, 1)).astype(dt) for _ in range(2)]
    ys = [rng.standard_normal((1, n)).astype(dt) for _ in range(2)]
    for k, v in enumerate((-0.0, np.inf, np.nan)):  # signed zeros, inf * 0, NaN (as many as there are rows)
        xs[0].flat[k % xs[0].size] = v
    ys[0][0, 0] = 0.0
    ys[0][0, -1] = -0.0
    xs[1].flat[0] = 0.0
    w = rng.standard_normal((*lead, m, n)).astype(dt)
    return [xs[0], ys[0], xs[1], ys[1], w]


def _numpy(ins: list, dt) -> np.ndarray:
    x1, y1, x2, y2, w = ins
    return np.add(w, np.multiply(np.add(np.multiply(x1, y1), np.multiply(x2, y2)), dt(-0.05)))


@pytest.mark.parametrize("lead,m,n", [((), 128, 185), ((), 1, 7), ((), 5, 1), ((3,), 4, 6)])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_outer_products_fuse_and_match_numpy_bit_for_bit(compiled_device, fallbacks, lead, m, n, dt):
    ins = _inputs(np.random.default_rng(0), lead, m, n, dt)
    nodes = [list(x) for x in NODES]
    nodes[3] = ["full", [], {"shape": [], "dtype": D.from_numpy(np.dtype(dt)).name, "value": -0.05}]
    plan = X.compile_plan(compiled_device, nodes, [(a.shape, D.from_numpy(a.dtype)) for a in ins])
    keep = {plan.node_slot[-1], plan.node_slot[2]}  # (the summed gradient is kept too: p.grad)
    host = [it.step.op for it in lower(plan.program.steps, keep, compiled_device.lowering_options).items
            if isinstance(it, HostStep)]
    assert "matmul" not in host
    ids = list(range(100, 100 + len(nodes)))
    got = X.run_plan(compiled_device, plan, list(ins), ids, {}, [], keep)
    x1, y1, x2, y2, _ = ins
    with np.errstate(all="ignore"):
        want_grad, want_w = np.add(np.multiply(x1, y1), np.multiply(x2, y2)), _numpy(ins, dt)
    for have, want in ((got[ids[2]], want_grad), (got[ids[-1]], want_w)):
        have = np.asarray(have)
        assert have.shape == want.shape and have.dtype == want.dtype
        assert np.array_equal(have, want, equal_nan=True)
        assert np.array_equal(np.signbit(have), np.signbit(want))  # (-0.0 stays -0.0)
    assert fallbacks["n"] == 0


def test_a_matmul_that_contracts_more_stays_on_blas(compiled_device):
    """``[M, K] @ [K, N]`` with K > 1 is a host step (BLAS), as before."""
    ins = [np.ones((3, 2), np.float32), np.ones((2, 4), np.float32)]
    plan = X.compile_plan(compiled_device, [["matmul", [-1, -2], None]], [(a.shape, D.float32) for a in ins])
    items = lower(plan.program.steps, {plan.node_slot[-1]}, compiled_device.lowering_options).items
    assert [it.step.op for it in items if isinstance(it, HostStep)] == ["matmul"]
