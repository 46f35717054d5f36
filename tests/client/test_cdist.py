"""``tw.cdist`` against PyTorch (2.13, CPU): values and gradients for every kind of p, batched and broadcast inputs,
each ``compute_mode``, and the pairs at distance zero, whose gradient is torch's 0 (``cdist(z, z)``: kNN, triplet
mining; the gradient was NaN for every p but 0, 1 and inf), and ties for p = inf (each gets the whole gradient)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.array_extras import CDIST_MODES

pytestmark = pytest.mark.usefixtures("session")

RNG = np.random.default_rng(524)
PS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf)


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def _both(a: np.ndarray, b: np.ndarray, p: float, mode: str = CDIST_MODES[0], dtype: str = "float64"):
    """``(ours, torch's)``: each ``(distances, grad of x1, grad of x2)`` for the loss ``sum(cdist * w)``."""
    torch = _torch()
    w = RNG.standard_normal(a.shape[:-1] + (b.shape[-2],))
    out = []
    for lib in (tw, torch):
        x1 = lib.tensor(a, dtype=getattr(lib, dtype), requires_grad=True)
        x2 = lib.tensor(b, dtype=getattr(lib, dtype), requires_grad=True)
        d = lib.cdist(x1, x2, p=p, compute_mode=mode)
        g1, g2 = lib.autograd.grad((d * lib.tensor(np.broadcast_to(w, d.shape).copy(), dtype=d.dtype)).sum(),
                                   [x1, x2])
        out.append([np.asarray(t.detach().numpy(), np.float64) for t in (d, g1, g2)])
    return out


def _close(ours, ref, rtol=1e-9, atol=1e-9):
    for got, want in zip(ours, ref):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("p", PS)
def test_values_and_gradients_are_torchs(p):
    a, b = RNG.standard_normal((5, 3)), RNG.standard_normal((4, 3))
    _close(*_both(a, b, p))


@pytest.mark.parametrize("p", PS)
def test_the_gradient_at_distance_zero_is_torchs_zero(p):
    """``cdist(z, z)`` and a row repeated across the inputs: every pair at distance 0 adds nothing."""
    z = RNG.standard_normal((4, 3))
    ours, ref = _both(z, z, p)
    _close(ours, ref)
    b = np.concatenate([z[1:3], RNG.standard_normal((2, 3))])
    _close(*_both(z, b, p))


def test_the_reproducer():
    z = tw.tensor([[1.0, 2.0], [3.0, 5.0]], requires_grad=True)
    tw.cdist(z, z).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [[-1.1094003, -1.6641006], [1.1094003, 1.6641006]], rtol=1e-6)


@pytest.mark.parametrize("p", (1.0, 2.0, math.inf))
def test_ties_and_zero_differences(p):
    """Integer points: equal coordinates (a zero difference: sign 0), several coordinates as large as the distance
    (p = inf gives each the whole gradient, as torch's cdist does, where amax would split it)."""
    a = RNG.integers(-2, 3, (6, 3)).astype(np.float64)
    b = RNG.integers(-2, 3, (5, 3)).astype(np.float64)
    _close(*_both(a, b, p))


@pytest.mark.parametrize("p", (0.0, 1.0, 2.0, 3.0, math.inf))
def test_batched_and_broadcast_inputs(p):
    _close(*_both(RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 5, 4)), p))
    _close(*_both(RNG.standard_normal((1, 3, 4)), RNG.standard_normal((2, 5, 4)), p))
    z = RNG.standard_normal((2, 3, 4))
    _close(*_both(z, z, p))


@pytest.mark.parametrize("mode", CDIST_MODES)
def test_compute_modes(mode):
    """torch's matrix-product modes (always, or past 25 rows) approximate the differences' distances: the values and
    gradients agree to rounding away from zero distance, and at it for exact inputs (integers, whose products are)."""
    a, b = RNG.standard_normal((30, 3)), RNG.standard_normal((27, 3))
    _close(*_both(a, b, 2.0, mode), rtol=1e-6, atol=1e-9)
    z = RNG.integers(-3, 4, (6, 2)).astype(np.float64)
    _close(*_both(z, z, 2.0, mode), rtol=1e-6, atol=1e-9)
    _close(*_both(a, b, 1.0, mode))  # (any other p ignores the mode)


def test_float32():
    z = RNG.standard_normal((5, 3))
    _close(*_both(z, z, 2.0, dtype="float32"), rtol=1e-5, atol=1e-6)
    _close(*_both(z, z, math.inf, dtype="float32"), rtol=1e-5, atol=1e-6)


def test_torchs_refusals():
    x = tw.ones(2, 2)
    with pytest.raises(RuntimeError, match="non-negative p"):
        tw.cdist(x, x, p=-1.0)
    with pytest.raises(TypeError, match="floating-point dtypes, X1 got: Int64"):
        tw.cdist(tw.ones(2, 2, dtype=tw.int64), x)
