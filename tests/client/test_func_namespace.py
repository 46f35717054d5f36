"""``tw.func.functional_call`` and ``tw.nn.utils.stateless.functional_call`` against torch's (2.13, CPU): a module
called with other tensors for its parameters and buffers, the gradients reaching those tensors, the module's own
tensors back after the call (after an exception too), tied weights, ``strict``, a sequence of dicts, buffers the call
rebinds written back to the dict, and a MAML step (the inner update differentiated through) as torch computes it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.func

torch = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")

pytestmark = pytest.mark.usefixtures("session")


def _pair(seed: int = 0):
    torch.manual_seed(seed)
    mt = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    m = tw.nn.Sequential(tw.nn.Linear(3, 4), tw.nn.BatchNorm1d(4), tw.nn.Tanh(), tw.nn.Linear(4, 2))
    m.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in mt.state_dict().items()})
    return m, mt


def _given(mt, seed: int = 1):
    rng = np.random.default_rng(seed)
    vals = {k: rng.standard_normal(tuple(v.shape)).astype(np.float32) for k, v in mt.named_parameters()}
    return ({k: tw.tensor(v, requires_grad=True) for k, v in vals.items()},
            {k: torch.tensor(v, requires_grad=True) for k, v in vals.items()})


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a.detach().numpy()), b.detach().numpy(), rtol=tol, atol=tol)


def test_functional_call_matches_torch_and_restores_the_module():
    m, mt = _pair()
    pw, pt = _given(mt)
    own = {k: v for k, v in m.named_parameters()}
    x = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    bw, bt = {"1.running_mean": tw.zeros(4)}, {"1.running_mean": torch.zeros(4)}
    yw = tw.func.functional_call(m, (pw, bw), (tw.tensor(x),))
    yt = torch.func.functional_call(mt, (pt, bt), (torch.tensor(x),))
    _close(yw, yt)
    yw.square().sum().backward()
    yt.square().sum().backward()
    for k in pt:
        _close(pw[k].grad, pt[k].grad, 1e-4)
    # the module's own tensors are back, untouched; the running mean the call updated is the dict's
    assert {k: v for k, v in m.named_parameters()} == own and all(p.grad is None for p in m.parameters())
    assert m[0].weight is own["0.weight"]
    _close(bw["1.running_mean"], bt["1.running_mean"])
    _close(m[1].running_mean, mt[1].running_mean)
    # the module as it is, after: its own values
    _close(m(tw.tensor(x)), mt(torch.tensor(x)))


def test_functional_call_arguments_kwargs_and_the_deprecated_spelling():
    class Scale(tw.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = tw.nn.Parameter(tw.ones(3))

        def forward(self, x, *, shift=0.0):
            return x * self.w + shift

    m = Scale()
    x = tw.tensor([1.0, 2.0, 3.0])
    out = tw.func.functional_call(m, {"w": tw.tensor([2.0, 2.0, 2.0])}, x, {"shift": 1.0})  # (one argument, no tuple)
    np.testing.assert_allclose(out.numpy(), [3.0, 5.0, 7.0])
    with pytest.warns(FutureWarning, match="torch.func.functional_call"):
        out = tw.nn.utils.stateless.functional_call(m, {"w": tw.tensor([0.0, 1.0, 0.0])}, (x,))
    np.testing.assert_allclose(out.numpy(), [0.0, 2.0, 0.0])
    np.testing.assert_allclose(m.w.detach().numpy(), [1.0, 1.0, 1.0])
    # a name the module lacks is set for the call only
    tw.func.functional_call(m, {"extra": tw.ones(1)}, (x,))
    assert not hasattr(m, "extra")


def test_functional_call_restores_after_an_exception():
    class Boom(tw.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = tw.nn.Linear(2, 2)

        def forward(self, x):
            raise RuntimeError("boom")

    m = Boom()
    w = m.lin.weight
    with pytest.raises(RuntimeError, match="boom"):
        tw.func.functional_call(m, {"lin.weight": tw.zeros(2, 2)}, (tw.ones(2),))
    assert m.lin.weight is w and m.lin._parameters["weight"] is w


def _tied(lib):
    class Tied(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = lib.nn.Linear(2, 2, bias=False)
            self.b = lib.nn.Linear(2, 2, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    return Tied()


def test_tie_weights_and_strict_match_torch():
    x = np.random.default_rng(3).standard_normal((2, 2)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((2, 2)).astype(np.float32)
    m, mt = _tied(tw), _tied(torch)
    m.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in mt.state_dict().items()})
    for tie in (True, False):
        got = tw.func.functional_call(m, {"a.weight": tw.tensor(w)}, (tw.tensor(x),), tie_weights=tie)
        want = torch.func.functional_call(mt, {"a.weight": torch.tensor(w)}, (torch.tensor(x),), tie_weights=tie)
        _close(got, want)
    two = {"a.weight": tw.tensor(w), "b.weight": tw.tensor(w + 1)}
    with pytest.raises(ValueError, match="which are tied"):
        tw.func.functional_call(m, two, (tw.tensor(x),))
    got = tw.func.functional_call(m, two, (tw.tensor(x),), tie_weights=False)
    want = torch.func.functional_call(mt, {"a.weight": torch.tensor(w), "b.weight": torch.tensor(w + 1)},
                                      (torch.tensor(x),), tie_weights=False)
    _close(got, want)
    with pytest.raises(RuntimeError) as e_ours:
        tw.func.functional_call(m, {"a.weight": tw.tensor(w), "c": tw.ones(1)}, (tw.tensor(x),), strict=True,
                                tie_weights=False)
    with pytest.raises(RuntimeError) as e_torch:
        torch.func.functional_call(mt, {"a.weight": torch.tensor(w), "c": torch.ones(1)}, (torch.tensor(x),),
                                   strict=True, tie_weights=False)
    assert str(e_ours.value).split(":", 1)[1] == str(e_torch.value).split(":", 1)[1]
    with pytest.raises(ValueError, match="appeared in multiple dictionaries"):
        tw.func.functional_call(m, ({"a.weight": tw.tensor(w)}, {"a.weight": tw.tensor(w)}), (tw.tensor(x),))


def test_maml_step_through_functional_call_matches_torch():
    """One task's inner SGD step on the given parameters, differentiated through (second order), then the outer
    loss's gradients w.r.t. the model's own parameters."""
    m, mt = _pair(5)
    m.eval()
    mt.eval()
    rng = np.random.default_rng(6)
    xs, ys, xq, yq = (rng.standard_normal(s).astype(np.float32) for s in ((6, 3), (6, 2), (4, 3), (4, 2)))

    def step(lib, model, grad):
        params = dict(model.named_parameters())
        loss = ((lib.func.functional_call(model, params, (lib.tensor(xs),)) - lib.tensor(ys)) ** 2).mean()
        grads = grad(loss, list(params.values()), create_graph=True)
        fast = {k: p - 0.1 * g for (k, p), g in zip(params.items(), grads)}
        outer = ((lib.func.functional_call(model, fast, (lib.tensor(xq),)) - lib.tensor(yq)) ** 2).mean()
        outer.backward()
        return outer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _close(step(tw, m, tw.autograd.grad), step(torch, mt, torch.autograd.grad))
    for p, pt in zip(m.parameters(), mt.parameters()):
        _close(p.grad, pt.grad, 1e-4)
