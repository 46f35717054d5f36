"""``Tensor.register_hook`` against torch: hooks on leaves and non-leaves change the gradient that is kept and, for a
non-leaf, everything below it; they run once with the whole gradient (two paths summed first), in registration
order, before ``retain_grad``'s copy; ``remove()`` takes one off; ``autograd.grad`` sees them too."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.usefixtures("session")

X = np.array([0.5, -1.0, 2.0], np.float32)
W = np.array([1.5, 0.5, -2.0], np.float32)


def _leaf_scaled(lib, x, w, log):
    x.register_hook(lambda g: g * 2)
    (x * w).sum().backward()


def _clamped_below(lib, x, w, log):
    y = x * w
    y.register_hook(lambda g: g.clamp(max=0.5))
    (y.exp() * 0.3 + y * y).sum().backward()


def _two_paths_squared(lib, x, w, log):  # (a nonlinear hook: right only on the gradient summed over both paths)
    y = x * 2
    y.register_hook(lambda g: g ** 2)
    (y.sin() + y * w).sum().backward()


def _observed_then_scaled_and_retained(lib, x, w, log):
    y = x.exp()
    y.retain_grad()
    y.register_hook(lambda g: log.append(g.detach().numpy().copy()))
    y.register_hook(lambda g: g * 3)
    (y * w).sum().backward()
    log.append(y.grad.numpy().copy())


def _removed(lib, x, w, log):
    y = x * 2
    y.register_hook(lambda g: g * 100).remove()
    (y * w).sum().backward()


def _on_the_root(lib, x, w, log):
    y = (x * w).sum()
    y.register_hook(lambda g: g * 5)
    y.backward()


def _chained(lib, x, w, log):
    y = x * w
    z = y.tanh()
    y.register_hook(lambda g: g * 2)
    z.register_hook(lambda g: g - 0.1)
    (z * z).sum().backward()


def _through_grad(lib, x, w, log):
    y = x * w
    y.register_hook(lambda g: g + 1)
    log.append(lib.autograd.grad((y * y).sum(), [x])[0].detach().numpy().copy())


@pytest.mark.parametrize("case", [_leaf_scaled, _clamped_below, _two_paths_squared,
                                  _observed_then_scaled_and_retained, _removed, _on_the_root, _chained,
                                  _through_grad], ids=lambda f: f.__name__.strip("_"))
def test_hooks_match_torch(case):
    torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")
    got = []
    for lib in (torch, tw):
        x, w = (lib.tensor(a, requires_grad=True) for a in (X, W))
        log: list = []
        case(lib, x, w, log)
        got.append([*log, *(t.grad.numpy() for t in (x, w) if t.grad is not None)])
    assert len(got[0]) == len(got[1])
    for want, have in zip(*got):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)


def test_a_hook_runs_once_a_pass_with_the_whole_gradient():
    x = tw.tensor(X, requires_grad=True)
    y = x * 2
    calls = []
    y.register_hook(lambda g: calls.append(g.numpy().copy()))
    (y * 3 + y.sin()).sum().backward()
    assert len(calls) == 1
    np.testing.assert_allclose(calls[0], 3 + np.cos(2 * X), rtol=1e-6)


def test_bad_hooks_are_refused():
    with pytest.raises(tw.TensorwireError, match="doesn't require gradient"):
        tw.tensor(X).register_hook(lambda g: g)
    x = tw.tensor(X, requires_grad=True)
    with pytest.raises(TypeError):
        x.register_hook("not a function")
    y = x * 2
    y.register_hook(lambda g: g[:2])
    with pytest.raises(tw.ShapeError, match="changed the size"):
        y.sum().backward()
