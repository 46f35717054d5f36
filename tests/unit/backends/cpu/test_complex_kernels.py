"""Complex values on the CPU backend (issue 33): the compiled CPU runs fragments with complex values on its numpy
kernels (the kernel compiler has no complex arithmetic) and gets numpy's answers; the compiled devices without a host
interpreter refuse them by name."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.base import Step
from tensorwire.backends.compiled_device import refuse_complex
from tensorwire.backends.cpu import CompiledBackend, NumpyBackend, compiled
from tensorwire.protocol import dtypes as D

N = 1 << 12
NODES = [["cast", [-1], {"dtype": "complex64"}], ["mul", [0, -2], None], ["exp", [1], None],
         ["fft_c2c", [2], {"dims": [0], "norm": "sqrt", "forward": True}], ["abs", [3], None],
         ["sum", [4], {"dims": None}], ["real", [3], None]]


def _reference(x, z):
    y = np.fft.fft(np.exp(x.astype(np.complex128) * z), norm="ortho")
    return np.abs(y).sum(), y.real


@pytest.mark.parametrize("make", [NumpyBackend, lambda: CompiledBackend(min_work=0, large_runs=0)],
                         ids=["numpy", "compiled"])
def test_a_complex_fragment_gives_numpy_s_answer(make):
    if make is not NumpyBackend and compiled.runtime() is None:
        pytest.skip(f"no C compiler: {compiled.why_not()}")
    dev = make().open(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(N).astype(np.float32) * 0.1
    z = (rng.standard_normal(N) + 1j * rng.standard_normal(N)).astype(np.complex64) * 0.1
    plan = X.compile_plan(dev, NODES, [((N,), D.float32), ((N,), D.complex64)])
    if make is not NumpyBackend:
        assert dev.interpreted(plan.program.steps, hot=True) and dev.runner(plan, {5, 6}) is None
    got = X.run_plan(dev, plan, [x, z], list(range(20, 27)), {}, [], set(plan.node_slot))
    total, re = _reference(x, z)
    assert got[25].dtype == np.float32 and got[26].dtype == np.float32
    np.testing.assert_allclose(float(got[25]), total, rtol=1e-5)
    np.testing.assert_allclose(got[26], re, rtol=1e-4, atol=1e-5)


def test_compiled_devices_refuse_complex_by_op_and_device():
    dev = SimpleNamespace(backend=SimpleNamespace(name="opencl"), index=1)
    def step(dt):
        return Step(op="exp", ins=(0,), out=1, origin=0, attrs={}, shape=(4,), dtype=dt, in_meta=(((4,), dt),))

    real, cplx = step(D.float32), step(D.complex64)
    refuse_complex(dev, [real])
    with pytest.raises(NotImplementedError, match=r"exp on complex64 .*opencl:1"):
        refuse_complex(dev, [real, cplx])
