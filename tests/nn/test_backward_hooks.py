"""A module's backward hooks (``register_full_backward_hook``, ``register_full_backward_pre_hook``, the deprecated
``register_backward_hook``; ``client/nn/backward_hooks.py``): when they fire, with what, and what their returns
replace, against PyTorch where installed (the old tutorials' ``nn_tutorial`` registers one on a Conv2d)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorwire as tw

pytestmark = pytest.mark.usefixtures("session")


def _shapes(gs):
    return [None if g is None else tuple(g.shape) for g in gs]


def _scenario(lib) -> list:
    nn = lib.nn
    lib.manual_seed(0)
    got = []
    m = nn.Linear(3, 2)
    m.register_full_backward_hook(lambda mod, gi, go: got.append(("full", _shapes(gi), _shapes(go))))
    m.register_full_backward_pre_hook(lambda mod, go: got.append(("pre", _shapes(go))))
    m(lib.ones(4, 3, requires_grad=True)).sum().backward()
    with warnings.catch_warnings(record=True) as caught:  # (no input requires grad: the hooks fire at the outputs)
        warnings.simplefilter("always")
        m(lib.ones(4, 3)).sum().backward()
    got.append([str(w.message)[:60] for w in caught])
    doubling = nn.Linear(3, 1)
    h = doubling.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 2,))
    x = lib.ones(2, 3, requires_grad=True)
    doubling(x).sum().backward()
    hooked = x.grad.clone()
    h.remove()
    x.grad = None
    doubling(x).sum().backward()
    got.append((hooked / x.grad).tolist())
    zeroing = nn.Linear(3, 1)
    zeroing.register_full_backward_pre_hook(lambda mod, go: (go[0] * 0,))
    y = lib.ones(2, 3, requires_grad=True)
    zeroing(y).sum().backward()
    got.append((y.grad.abs().sum().item(), zeroing.weight.grad.abs().sum().item()))
    seq = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))  # (hooks of submodules, in backward order)
    for i, sub in enumerate(seq):
        sub.register_full_backward_hook(lambda mod, gi, go, i=i: got.append(("sub", i, _shapes(gi))))
    seq(lib.ones(5, 3, requires_grad=True)).sum().backward()
    return got


def test_backward_hooks_fire_with_torchs_gradients_and_replace_them():
    got = _scenario(tw)
    assert got[:4] == [("pre", [(4, 2)]), ("full", [(4, 3)], [(4, 2)]), ("pre", [(4, 2)]), ("full", [None], [(4, 2)])]
    assert got[4] == ["Full backward hook is firing when gradients are computed wit"]
    assert got[5] == [[2.0] * 3] * 2 and got[6] == (0.0, 0.0)
    assert got[7:] == [("sub", 2, [(5, 3)]), ("sub", 1, [(5, 3)]), ("sub", 0, [(5, 3)])]
    torch = pytest.importorskip("torch")
    assert _scenario(torch) == got


def test_the_deprecated_backward_hook_is_the_full_one_and_says_so():
    m = tw.nn.Conv2d(1, 2, 3)
    seen = []
    with pytest.warns(FutureWarning, match="runs it as register_full_backward_hook"):
        m.register_backward_hook(lambda mod, gi, go: seen.append((_shapes(gi), _shapes(go))))
    m(tw.ones(1, 1, 5, 5, requires_grad=True)).sum().backward()
    assert seen == [([(1, 1, 5, 5)], [(1, 2, 3, 3)])]


def test_no_hook_no_wrapping_and_hooks_outside_autograd_do_nothing():
    m = tw.nn.Linear(2, 2)
    out = m(tw.ones(1, 2))
    assert type(out.grad_fn).__name__ != "FunctionOutput"
    fired = []
    m.register_full_backward_hook(lambda *a: fired.append(1))
    with tw.no_grad():
        m(tw.ones(1, 2, requires_grad=True))
    assert fired == []
    want = (tw.ones(1, 2) @ m.weight.T + m.bias).detach().numpy()
    np.testing.assert_allclose(m(tw.ones(1, 2)).detach().numpy(), want)
