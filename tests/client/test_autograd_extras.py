"""torch.autograd's remaining user API and ``torch.utils.checkpoint``: ``Variable`` (the legacy wrapper), anomaly mode
(``detect_anomaly``, ``set_detect_anomaly``, ``torch.is_anomaly_enabled``: torch's error naming the op whose
backward made a NaN, and the user's line of its forward op), ``gradgradcheck``, ``autograd.functional`` (jacobian,
hessian, vjp, jvp, vhp, hvp against torch's), and ``checkpoint`` / ``checkpoint_sequential`` (results and gradients
equal to the plain call, dropout included; the reentrant variant recomputes).

torch is the reference (imported through a fixture: it is optional)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.utils.checkpoint import checkpoint, checkpoint_sequential

from ..programs._harness import tensorwire_as_torch

pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")


def test_variable_is_the_legacy_wrapper(torch):
    V = tw.autograd.Variable
    x = tw.ones(2) * 3
    v = V(x)
    assert v is not x and isinstance(v, tw.Tensor) and not v.requires_grad and v.tolist() == [3.0, 3.0]
    w = V(x, requires_grad=True)
    assert w.requires_grad and w.is_leaf and not x.requires_grad
    y = w * 2
    assert V(y).grad_fn is None and not V(y).requires_grad  # detached, as torch's
    assert isinstance(x, V) and isinstance(tw.nn.Parameter(x), V) and not isinstance(3, V)
    assert tuple(V().shape) == (0,)
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got int"):
        V(3)
    with pytest.warns(UserWarning, match="volatile was removed"):
        V(x, volatile=True)
    assert isinstance(torch.ones(1), torch.autograd.Variable)  # (the reference's behaviour)


def _nan_case(lib, case):
    x = lib.tensor([1.0, 0.0, 2.0], requires_grad=True)
    w = lib.tensor([0.5, 1.5, -1.0], requires_grad=True)
    if case == "sqrt":
        z = (x * w).sqrt().sum()  # sqrt of a negative: NaN forward and backward
    elif case == "div":
        z = ((x * w) / x).sum()  # 0 / 0: the gradient for the divisor (input 1) is NaN
    elif case == "hook":  # a hook makes the NaN: the op below it (a phase of its own) is named
        h = x * w
        h.register_hook(lambda g: g * float("nan"))
        z = (h * h).sum()
    elif case == "seed":
        z = (x * w).exp()
        return z, lib.tensor([1.0, float("nan"), 1.0]), x, w
    else:
        z = ((x.exp() * 0 + 1).log() * w).sum()  # no NaN anywhere
    return z, None, x, w


@pytest.mark.parametrize("case", ["sqrt", "div", "hook", "seed", "clean"])
def test_anomaly_mode_names_the_op_as_torch(torch, case):
    results = []
    for lib in (tw, torch):
        z, seed, x, w = _nan_case(lib, case)
        with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
            mode = lib.autograd.detect_anomaly()
        with mode, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                z.backward(seed)
                results.append(("ok", x.grad.tolist(), w.grad.tolist()))
            except RuntimeError as e:
                results.append(("error", str(e).split(" [")[0]))
                if lib is tw:
                    assert f"{__file__}:" in str(e)  # the forward op's line
                    assert any("Traceback of forward call that caused the error" in str(c.message) for c in caught)
        assert not lib.is_anomaly_enabled()
    assert results[0] == results[1]
    assert (results[0][0] == "ok") == (case == "clean")


def test_set_detect_anomaly_switches(torch):
    assert not tw.is_anomaly_enabled() and tw.autograd.anomaly_mode.is_anomaly_check_nan_enabled()
    with tw.autograd.set_detect_anomaly(True, check_nan=False):
        assert tw.is_anomaly_enabled() and not tw.autograd.anomaly_mode.is_anomaly_check_nan_enabled()
        x = tw.tensor([-1.0], requires_grad=True)
        x.sqrt().sum().backward()  # no NaN check: nothing raised
        assert np.isnan(x.grad.numpy()).all()
    assert not tw.is_anomaly_enabled()
    tw.autograd.set_detect_anomaly(True)
    try:
        assert tw.is_anomaly_enabled()
        x = tw.randn(4, 3, requires_grad=True)
        lin = tw.nn.Linear(3, 2)
        lin(x).tanh().sum().backward()  # a clean pass: the same gradients as without the mode
        g = x.grad.numpy()
    finally:
        tw.set_anomaly_enabled(False)
    x.grad = None
    lin.weight.grad = None
    lin(x).tanh().sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), g)


def test_gradgradcheck(torch):
    rng = np.random.default_rng(0)
    x = tw.tensor(rng.standard_normal(3), requires_grad=True)
    w = tw.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    assert tw.autograd.gradgradcheck(lambda x, w: (w @ x.sin()) * x.sum(), (x, w))
    assert tw.autograd.gradgradcheck(lambda x: x.tanh() * x, (x,), (tw.ones(3, dtype=tw.float64,
                                                                           requires_grad=True),))

    class WrongSecond(tw.autograd.Function):  # a backward whose own derivative is wrong
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * 2 * a.detach()  # the gradient is right, but it has no history in a

    assert tw.autograd.gradcheck(WrongSecond.apply, (x,))
    assert not tw.autograd.gradgradcheck(WrongSecond.apply, (x,), raise_exception=False)


def _functional_cases(lib, a0, b0, v0, vo):
    T = lib.tensor

    def f(x, W):
        return (W @ x.sin()) * x.sum()

    def s(x, W):
        return (W @ x.sin()).pow(2).sum() + (x * x * x).sum()

    F = lib.autograd.functional
    return {
        "jacobian": lambda: F.jacobian(lambda x: f(x, T(b0)), T(a0)),
        "jacobian2": lambda: F.jacobian(f, (T(a0), T(b0))),
        "jacobian_vec": lambda: F.jacobian(f, (T(a0), T(b0)), vectorize=True, strategy="forward-mode"),
        "jacobian_outs": lambda: F.jacobian(lambda x: (x.sin(), x.sum()), T(a0)),
        "hessian": lambda: F.hessian(lambda x: s(x, T(b0)), T(a0)),
        "hessian2": lambda: F.hessian(s, (T(a0), T(b0))),
        "vjp": lambda: F.vjp(f, (T(a0), T(b0)), T(vo)),
        "jvp": lambda: F.jvp(lambda x: f(x, T(b0)), T(a0), T(v0)),
        "vhp": lambda: F.vhp(lambda x: s(x, T(b0)), T(a0), T(v0)),
        "hvp": lambda: F.hvp(s, (T(a0), T(b0)), (T(v0), T(b0))),
    }


def _same_structure(mine, ref):
    if isinstance(ref, (tuple, list)):
        assert type(mine) is type(ref) and len(mine) == len(ref)
        for a, b in zip(mine, ref):
            _same_structure(a, b)
        return
    assert tuple(mine.shape) == tuple(ref.shape) and not mine.requires_grad
    np.testing.assert_allclose(mine.numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_autograd_functional_matches_torch(torch):
    rng = np.random.default_rng(0)
    args = (rng.standard_normal(3), rng.standard_normal((2, 3)), rng.standard_normal(3), rng.standard_normal(2))
    mine, ref = _functional_cases(tw, *args), _functional_cases(torch, *args)
    for name in mine:
        _same_structure(mine[name](), ref[name]())
    F = tw.autograd.functional
    x = tw.tensor(args[0], requires_grad=True)
    _, j = F.vjp(lambda t: (t * t).sum(), x, create_graph=True)  # with a graph: differentiable again
    assert j.requires_grad and tw.autograd.grad(j.sum(), x)[0].tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="The vector v can only be None"):
        F.vjp(lambda t: t * 2, tw.tensor(args[0]))
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        F.jacobian(lambda t: t, 3.0)
    with pytest.raises(RuntimeError, match="should contain a single element"):
        F.hessian(lambda t: t * 2, tw.tensor(args[0]))
    with pytest.raises(RuntimeError, match="independent of input 1"):
        F.vjp(lambda a, b: a.sum(), (tw.tensor(args[0]), tw.tensor(args[1])), strict=True)


def _net():
    tw.manual_seed(1)
    return tw.nn.Sequential(tw.nn.Linear(4, 8), tw.nn.Tanh(), tw.nn.Dropout(0.3), tw.nn.Linear(8, 8),
                            tw.nn.ReLU(), tw.nn.Linear(8, 2)).to(tw.float64)


@pytest.mark.parametrize("mode", [True, False, "sequential"])
def test_checkpoint_gives_the_plain_results_and_gradients(mode):
    x0 = np.random.default_rng(0).standard_normal((5, 4))
    out = []
    calls = [0]
    for variant in ("plain", mode):
        m = _net()

        def counted(t, m=m):
            calls[0] += 1
            return m(t)

        x = tw.tensor(x0, requires_grad=True)
        tw.manual_seed(7)  # the dropout masks (the recomputation must draw the same ones)
        if variant == "plain":
            y = m(x)
        elif variant == "sequential":
            y = checkpoint_sequential(m, 3, x, use_reentrant=True)
        else:
            calls[0] = 0
            y = checkpoint(counted, x, use_reentrant=variant)
        loss = (y * y).sum()
        loss.backward()
        out.append((loss.item(), x.grad.numpy(), [p.grad.numpy() for p in m.parameters()]))
    assert out[0][0] == out[1][0]
    np.testing.assert_array_equal(out[0][1], out[1][1])
    for a, b in zip(out[0][2], out[1][2]):
        np.testing.assert_array_equal(a, b)
    if mode is True:
        assert calls[0] == 2  # the forward, then the recomputation in the backward
    elif mode is False:
        assert calls[0] == 1


def test_checkpoint_warnings_and_checks():
    with pytest.warns(UserWarning, match="the use_reentrant parameter should be passed explicitly"):
        checkpoint(lambda a: a * 2, tw.ones(2, requires_grad=True))
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        checkpoint(lambda a: a * 2, tw.ones(2), use_reentrant=True)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(lambda a, scale=1: a * scale, tw.ones(2), use_reentrant=True, scale=2)
    y = checkpoint(lambda a, scale=1: a * scale, tw.ones(2, requires_grad=True), use_reentrant=False, scale=2)
    assert y.tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
        checkpoint(lambda a: a, tw.ones(1), use_reentrant=True, debug=True)
    assert tw.utils.checkpoint.checkpoint is checkpoint


def test_a_script_under_import_torch_finds_the_new_names():
    """The names as a third-party script reaches them with ``import torch`` resolving to tensorwire."""
    with tensorwire_as_torch():
        import torch  # noqa: PLC0415 - the aliased import is the point
        import torch.nn as nn  # noqa: PLC0415
        from torch.autograd import Variable  # noqa: PLC0415
        from torch.autograd.functional import jacobian  # noqa: PLC0415
        from torch.nn.modules.loss import _Loss  # noqa: PLC0415
        from torch.nn.modules.utils import _pair  # noqa: PLC0415
        from torch.utils.checkpoint import checkpoint as ckpt  # noqa: PLC0415

        assert torch is tw and issubclass(nn.KLDivLoss, _Loss) and _pair(2) == (2, 2)
        torch.manual_seed(0)
        model = nn.Sequential(nn.LazyLinear(4), nn.Hardswish(), nn.Linear(4, 1)).double()
        opt = torch.optim.Rprop(model.parameters(), lr=0.01)
        sched = torch.optim.lr_scheduler.CyclicLR(opt, 0.001, 0.01, step_size_up=2, cycle_momentum=False)
        x = Variable(torch.randn(8, 3, dtype=torch.float64), requires_grad=True)
        for _ in range(2):
            opt.zero_grad()
            loss = ckpt(model, x, use_reentrant=False).pow(2).mean()
            loss.backward()
            opt.step()
            sched.step()
        assert type(model[0]) is nn.Linear and model[0].weight.shape == (4, 3)
        torch.testing.assert_close(jacobian(lambda t: (t * t).sum(), torch.ones(2, dtype=torch.float64)),
                                   torch.full((2,), 2.0, dtype=torch.float64))
        assert not torch.is_anomaly_enabled()
