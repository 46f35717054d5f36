"""Small fragments compiled to C (issue 30: a polynomial fit's step plan, 7 kernels over 2,000 floats, ran no faster
compiled than on numpy): a float power of 2 or 3 multiplies in C as the numpy kernel does (a version of the grid loop
a value: ``backends/codegen/c.py`` ``POWERS``), a grid's items run in a function of their own, and the runner makes
each buffer's pointer once a run (``backends/codegen/program.py`` ``_run_on_pointers``). Results are the numpy
kernels' to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends.codegen.program import scalar_value
from tensorwire.backends.cpu import CompiledBackend, NumpyBackend, compiled
from tensorwire.backends.executor import compile_plan, run_plan
from tensorwire.protocol import dtypes as D

pytestmark = pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")

N = 2000
#: ``a + b * x + c * x ** 2 + d * x ** e - y`` squared, its sum, and the products its backward reads (the exponent
#: ``e`` a 0-d input, as a client sends ``x ** 3``): ext inputs a, b, c, d, e (0-d), x, y (N)
NODES = [
    ["mul", [-2, -6], None],        # 0: b * x
    ["add", [-1, 0], None],         # 1: a + b * x
    ["square", [-6], None],         # 2: x ** 2
    ["mul", [-3, 2], None],         # 3: c * x ** 2
    ["add", [1, 3], None],          # 4
    ["pow", [-6, -5], None],        # 5: x ** e
    ["mul", [-4, 5], None],         # 6: d * x ** e
    ["add", [4, 6], None],          # 7
    ["sub", [7, -7], None],         # 8: y_pred - y
    ["square", [8], None],          # 9
    ["sum", [9], {"dims": None, "keepdim": False}],  # 10: the loss
    ["mul", [8, -6], None],         # 11: (y_pred - y) * x (x read by several kernels)
    ["sum", [11], {"dims": None, "keepdim": False}],  # 12
    ["mul", [8, 5], None],          # 13
    ["sum", [13], {"dims": None, "keepdim": False}],  # 14
]
METAS = [((), D.float32)] * 5 + [((N,), D.float32)] * 2


def _device(tmp_path, monkeypatch, compiles: bool):
    if not compiles:
        return NumpyBackend().open(0)
    monkeypatch.setenv("TENSORWIRE_KERNEL_CACHE", str(tmp_path))
    base = compiled.runtime()
    rt = compiled.CRuntime(base.compiler, base.version)  # (a cold cache of its own)
    return CompiledBackend(rt, min_work=0, large_runs=0, hot_runs=0).open(0)


def _inputs(e: float, scalars_as_numpy: bool = False) -> list:
    rng = np.random.default_rng(0)
    coef = [np.array(v, np.float32) for v in rng.standard_normal(4)]
    if scalars_as_numpy:  # (a full reduction's value on the numpy kernels: a numpy scalar, not an array)
        coef = [np.float32(c) for c in coef]
    x = np.linspace(-np.pi, np.pi, N, dtype=np.float32)
    return [*coef, np.array(e, np.float32), x, np.sin(x)]


def _run(dev, ext: list, hot: bool) -> dict:
    plan = compile_plan(dev, NODES, METAS, hot=hot)
    assert plan.interpreted is not hot
    keep = {plan.node_slot[j] for j in range(len(NODES))}
    outs = list(range(len(NODES)))
    for _ in range(3):  # (the runner built, then run again: its pointers are made anew each run)
        got = run_plan(dev, plan, ext, outs, {}, [], keep)
    return {k: np.asarray(v) for k, v in got.items()}


@pytest.mark.parametrize("e", [2.0, 3.0, 2.5, -1.0])
@pytest.mark.parametrize("scalars_as_numpy", [False, True])
def test_a_compiled_fragment_matches_the_numpy_kernels_to_the_bit(e, scalars_as_numpy, tmp_path, monkeypatch):
    ext = _inputs(e, scalars_as_numpy)
    want = _run(_device(tmp_path, monkeypatch, False), ext, hot=False)
    got = _run(_device(tmp_path, monkeypatch, True), ext, hot=True)
    assert got.keys() == want.keys()
    powered = e not in (2.0, 3.0)  # (any other exponent: libmvec's vector pow, within 4 ulp of numpy's)
    for k in want:
        if NODES[k][0] == "sum":  # (a float32 sum: C accumulates in float64, numpy pairwise)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, err_msg=f"node {k}")
        elif powered and k >= 5:  # (the power's node and those it reaches)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=f"node {k}")
        else:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"node {k} ({NODES[k][0]}, e={e})")
    if e == 3.0:  # (what pow() would not give: powf's cube differs from the product in some last bits)
        x = ext[5]
        assert np.array_equal(got[5], x * x * x) and not np.array_equal(got[5], np.power(x, np.float32(3)))


def test_the_power_s_versions_and_the_items_function(tmp_path, monkeypatch):
    dev = _device(tmp_path, monkeypatch, True)
    _run(dev, _inputs(3.0), hot=True)
    (src,) = [p.read_text() for p in tmp_path.glob("c/*.c")]
    assert " == 2) {" in src and " == 3) {" in src  # (a grid loop for each power, and one for any other)
    assert "_items(long long lo, long long hi, " in src  # (the items' function: restrict buffers, one thread or many)
    assert "[0ll];\n  if (" in src or "[0ll];\n  #pragma omp simd" in src  # (the exponent read before the loop)


def test_a_view_input_is_copied_contiguous_for_its_kernel(tmp_path, monkeypatch):
    ext = _inputs(3.0)
    wide = np.stack([ext[5], np.zeros(N, np.float32)], axis=1)
    ext_view = [*ext[:5], wide[:, 0], ext[6]]  # (x a strided column: not C-contiguous)
    assert not ext_view[5].flags.c_contiguous
    want = _run(_device(tmp_path, monkeypatch, False), ext, hot=False)
    got = _run(_device(tmp_path, monkeypatch, True), ext_view, hot=True)
    for k in (5, 8, 9, 11):
        np.testing.assert_array_equal(got[k], want[k])


def test_a_converted_scalar_is_remembered_by_value_and_type():
    spec = (0, "value", 0.0, D.float32)
    assert scalar_value(spec, {0: {"value": 2}}) == 2.0
    assert scalar_value(spec, {0: {"value": 0.0}}) == 0.0
    neg = scalar_value(spec, {0: {"value": -0.0}})
    assert neg == 0.0 and np.signbit(neg)  # (not the remembered 0.0's conversion)
    assert np.isnan(scalar_value(spec, {0: {"value": float("nan")}}))
    ints = (0, "value", 0, D.int32)
    assert scalar_value(ints, {0: {"value": 7}}) == 7 and type(scalar_value(ints, {0: {"value": 7}})) is int
    assert scalar_value(ints, {0: {"value": 2**31 + 5}}) == -(2**31) + 5  # (wraps as numpy's astype)
