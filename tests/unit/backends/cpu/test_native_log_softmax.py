"""The CPU's native ``log_softmax`` kernel gives the very values its decomposition gives (the numpy kernels step by
step: amax, sub, exp, sum, log, add, sub), so that a program's losses do not move when the backend runs it whole:
float32 and float64 bit for bit, the half types too (each step rounded as its kernel rounds it), with infinite and
nan rows, any dim, 0-d and empty inputs. Its values against float64 references, and its gradient (the autograd
rule reads its output), are checked with every composite's in test_composites.py and the autograd tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.cpu import NumpyBackend
from tensorwire.protocol import dtypes as D

NATIVE = NumpyBackend()
DECOMPOSED = NumpyBackend()
DECOMPOSED.kernels = {k: f for k, f in NATIVE.kernels.items() if k != "log_softmax"}


def _run(backend, x: np.ndarray, dim: int):
    """The result of ``log_softmax(x, dim)`` on ``backend``: a buffer, or the node's ``Fail``."""
    device = backend.open(0)
    plan = X.compile_plan(device, [["log_softmax", [-1], {"dim": dim}]], [(x.shape, D.from_numpy(x.dtype))])
    if plan.failed_nodes:  # (refused when planned)
        return plan.node_meta[0]
    assert len(plan.program.steps) == 1 if backend is NATIVE else len(plan.program.steps) > 1
    host = np.array(x, copy=True)
    host.setflags(write=False)
    return X.run_plan(device, plan, [device.upload(host)], [7], {}, [], {plan.node_slot[0]})[7]


def _log_softmax(backend, x: np.ndarray, dim: int) -> np.ndarray:
    out = _run(backend, x, dim)
    assert not isinstance(out, X.Fail), out.err
    return np.asarray(out)


def _bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _inputs(dtype) -> list[tuple[np.ndarray, int]]:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((5, 7)) * 4).astype(dtype)  # (half types: finfo's max is their own)
    special = x.copy()
    special[1, 2] = np.inf
    special[2, :] = -np.inf
    special[3, 4] = np.nan
    huge = x.copy()
    huge[:, 0] = ml_dtypes.finfo(dtype).max / 2  # (finite maxima whose sum overflows)
    return [(x, 1), (x, 0), (x, -1), (special, 1), (special, 0), (huge, 1), (x.reshape(5, 7, 1), 1),
            (rng.standard_normal((2, 3, 4)).astype(dtype), 2), (np.asarray(1.5, dtype), 0),
            (np.zeros((0, 3), dtype), 1), (np.zeros((3, 0), dtype), 1)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_native_log_softmax_is_its_decomposition_bit_for_bit(dtype):
    np_dtype = D.BY_NAME[dtype].np
    assert "log_softmax" in NATIVE.native and "log_softmax" not in DECOMPOSED.native
    for x, dim in _inputs(np_dtype):
        got, want = _log_softmax(NATIVE, x, dim), _log_softmax(DECOMPOSED, x, dim)
        assert got.dtype == want.dtype == np_dtype and got.shape == want.shape == x.shape
        np.testing.assert_array_equal(_bytes(got), _bytes(want), err_msg=f"{dtype} {x.shape} {dim}")


def test_native_log_softmax_of_integers_is_in_their_float_dtype():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    got, want = _log_softmax(NATIVE, x, 1), _log_softmax(DECOMPOSED, x, 1)
    assert got.dtype == want.dtype and got.dtype.kind == "f"
    np.testing.assert_array_equal(got, want)


def test_native_log_softmax_refuses_complex_values_as_its_decomposition_does():
    x = np.ones((2, 3), np.complex64)
    got, want = _run(NATIVE, x, 1), _run(DECOMPOSED, x, 1)
    assert isinstance(got, X.Fail) and isinstance(want, X.Fail)
    assert got.err["code"] == want.err["code"] == "DTypeError", (got.err, want.err)
    assert "complex tensors are not supported (complex64)" in got.err["message"]
