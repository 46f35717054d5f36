"""``layer_norm``'s and exact ``gelu``'s backward as one op each (``layer_norm_grad``, ``gelu_grad``, composites whose
decompositions are the closed forms): a backward records them instead of their ~14 and ~9 elementwise/reduction ops;
first and second derivatives checked against torch."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.nn import functional as F


def _both(shape, dtype, seed=0):
    """(tensorwire leaf, torch leaf) with the same values."""
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return tw.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def _close(mine, ref, tol):
    a, r = mine.detach().numpy(), ref.detach().numpy()
    assert a.shape == r.shape and a.dtype == r.dtype
    assert np.max(np.abs(a - r) / (1 + np.abs(r)), initial=0.0) <= tol, np.max(np.abs(a - r))


def test_backward_records_one_op_each(session):
    """A LayerNorm -> GELU backward records one layer_norm_grad and one gelu_grad, none of their closed forms' ops."""
    x = tw.randn(4, 6, requires_grad=True)
    ln = tw.nn.LayerNorm(6)
    y = F.gelu(ln(x))
    session.synchronize()
    (y * y).sum().backward()
    bwd = [p[1] for p in session._pending]
    assert bwd.count("layer_norm_grad") == 1 and bwd.count("gelu_grad") == 1, bwd
    assert not {"mean", "rsqrt", "erf", "exp"} & set(bwd), bwd
    session.synchronize()
    assert x.grad is not None and ln.weight.grad is not None


@pytest.mark.parametrize("dtype,tol", [("float32", 3e-6), ("float64", 1e-12)])
@pytest.mark.parametrize("shape,norm", [((5, 8), (8,)), ((2, 3, 4), (3, 4)), ((7,), (7,))], ids=["1d", "2d", "vec"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gradients_match_torch(session, dtype, tol, shape, norm, approximate):
    torch = pytest.importorskip("torch")
    x, xt = _both(shape, dtype)
    w, wt = _both(norm, dtype, seed=1)
    g = np.random.default_rng(2).standard_normal(shape).astype(dtype)
    F.gelu(F.layer_norm(x, norm, w, None, 1e-3), approximate=approximate).backward(tw.tensor(g))
    torch.nn.functional.gelu(torch.nn.functional.layer_norm(xt, norm, wt, None, 1e-3),
                             approximate=approximate).backward(torch.tensor(g))
    _close(x.grad, xt.grad, tol)
    _close(w.grad, wt.grad, tol)


@pytest.mark.parametrize("fn", ["layer_norm", "gelu"])
def test_second_derivatives_match_torch(session, fn):
    """Double backward goes through the backward ops' decompositions."""
    torch = pytest.importorskip("torch")
    x, xt = _both((3, 5), "float64")
    v = np.random.default_rng(3).standard_normal((3, 5))

    def f(lib, t):
        fn_ = lib.nn.functional
        return fn_.layer_norm(t, (5,)) if fn == "layer_norm" else fn_.gelu(t)

    def hvp(lib, t):
        y = f(lib, t)
        (gx,) = lib.autograd.grad((y * y * y).sum(), t, create_graph=True)
        (ggx,) = lib.autograd.grad((gx * lib.tensor(v)).sum(), t)
        return ggx
    _close(hvp(tw, x), hvp(torch, xt), 1e-10)
