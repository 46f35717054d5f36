"""Kernels that loop over the coordinates their index arithmetic divides out (issue 37, ``Options.nest``): per-channel
broadcasts and reductions over several runs of axes, compiled for the CPU and run against numpy at several shapes in a
row (odd sizes, sizes of 1; after the first shape a structure's changed sizes are kernel parameters, so the generic
kernels run too). The lowering's shape is checked in ``tests/unit/backends/codegen/test_nesting.py``."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.cpu import compiled
from tensorwire.protocol import dtypes as D

pytestmark = pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")

SHAPES = [(3, 4, 5, 6), (2, 4, 5, 6), (3, 7, 3, 9), (1, 5, 2, 8), (4, 3, 1, 16)]


def _run(device, nodes, inputs):
    plan = X.compile_plan(device, nodes, [(a.shape, D.from_numpy(a.dtype)) for a in inputs])
    ids = list(range(100, 100 + len(nodes)))
    return np.asarray(X.run_plan(device, plan, list(inputs), ids, {}, [], {plan.node_slot[-1]})[ids[-1]])


@pytest.mark.parametrize("op", ["sum", "amax", "amin", "prod"])
@pytest.mark.parametrize("dims,keep", [([0, 2, 3], False), ([0, 2, 3], True), ([0, 2], False), ([0, 1, 3], True)])
def test_reductions_over_several_runs_of_axes(compiled_device, fallbacks, op, dims, keep):
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        x = rng.uniform(0.5, 1.5, shape).astype(np.float32) if op == "prod" else \
            rng.standard_normal(shape).astype(np.float32)
        if op in ("amax", "amin"):
            x[0, 0, 0, -1] = np.nan  # NaN wins, from any run
        got = _run(compiled_device, [[op, [-1], {"dims": dims, "keepdim": keep}]], [x])
        ref = {"sum": np.sum, "amax": np.max, "amin": np.min, "prod": np.prod}[op](
            x.astype(np.float64), axis=tuple(dims), keepdims=keep)
        np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-6, err_msg=f"{op} {shape} {dims}")
    assert fallbacks["n"] == 0


def test_integer_and_centred_sums(compiled_device, fallbacks):
    """Batch norm's variance (``((x - m[c])**2).sum((0, 2, 3))``, the channel broadcast inside the nested loop) and an
    int64 sum over the same runs."""
    rng = np.random.default_rng(1)
    for shape in SHAPES:
        x = rng.standard_normal(shape).astype(np.float32)
        m = rng.standard_normal(shape[1]).astype(np.float32)
        cs = [1, shape[1], 1, 1]
        got = _run(compiled_device, [["reshape", [-2], {"shape": cs}], ["sub", [-1, 0], None], ["mul", [1, 1], None],
                            ["sum", [2], {"dims": [0, 2, 3]}]], [x, m])
        d = x.astype(np.float64) - m.reshape(cs)
        np.testing.assert_allclose(got, (d * d).sum((0, 2, 3)), rtol=2e-6)
        xi = rng.integers(-1000, 1000, shape)
        got = _run(compiled_device, [["sum", [-1], {"dims": [0, 2, 3]}]], [xi])
        np.testing.assert_array_equal(got, xi.sum((0, 2, 3)))
    assert fallbacks["n"] == 0


def test_elementwise_broadcasts_and_permutes(compiled_device, fallbacks):
    """Per-channel scale and shift (``(i // HW) % C``), a broadcast over the leading dims (``i % W``) and a permuted
    read: one item per divided-out coordinate, every element right."""
    rng = np.random.default_rng(2)
    for shape in SHAPES:
        n, c, h, w = shape
        x = rng.standard_normal(shape).astype(np.float32)
        a, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
        cs = [1, c, 1, 1]
        got = _run(compiled_device, [["reshape", [-2], {"shape": cs}], ["sub", [-1, 0], None],
                            ["reshape", [-3], {"shape": cs}], ["mul", [1, 2], None]], [x, a, b])
        np.testing.assert_array_equal(got, (x - a.reshape(cs)) * b.reshape(cs))
        row = rng.standard_normal(w).astype(np.float32)
        np.testing.assert_array_equal(_run(compiled_device, [["add", [-1, -2], None]], [x, row]), x + row)
        y = rng.standard_normal((n, c, w, h)).astype(np.float32)
        got = _run(compiled_device, [["permute", [-1], {"dims": [0, 1, 3, 2]}], ["add", [0, -2], None]], [x, y])
        np.testing.assert_array_equal(got, x.transpose(0, 1, 3, 2) + y)
    assert fallbacks["n"] == 0
