"""``tw.nn.utils``' weight and spectral normalisation (the hook-based forms and the parametrizations),
``parametrize``, BatchNorm fusion, ``skip_init``, the deprecated ``clip_grad_norm`` and ``tw.random.fork_rng``,
against torch's with the same weights (and the same power-iteration vectors) copied in (float64): outputs,
gradients, state dict keys and values, the vectors after steps in train and eval mode, removal, an optimizer step
through a parametrization.

torch is the reference (imported through a fixture: it is optional)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire.nn.utils import parametrize

pytestmark = pytest.mark.usefixtures("session")


@pytest.fixture(scope="module")
def torch():
    t = pytest.importorskip("torch", reason="PyTorch is the reference here (pip install torch==2.13.0)")
    t.set_default_dtype(t.float64)
    yield t
    t.set_default_dtype(t.float32)


def _np(t):
    return np.asarray(t.detach().numpy())


def _close(mine, ref, tol=1e-10):
    a, r = _np(mine), _np(ref)
    assert a.shape == r.shape, (a.shape, r.shape)
    np.testing.assert_allclose(a, r, rtol=tol, atol=tol)


def _tw(t, requires_grad=False):
    return tw.tensor(_np(t), dtype=tw.float64, requires_grad=requires_grad)


def _pair(torch, cls_name, *args):
    torch.manual_seed(0)
    ref = getattr(torch.nn, cls_name)(*args).double()
    mine = getattr(nn, cls_name)(*args, dtype=tw.float64)
    mine.load_state_dict({k: _tw(v) for k, v in ref.state_dict().items()})
    return mine, ref


def _load(mine, ref) -> None:
    """``ref``'s state dict into ``mine``, and the same keys on both sides."""
    sd = ref.state_dict()
    assert list(mine.state_dict()) == list(sd)
    mine.load_state_dict({k: _tw(v) for k, v in sd.items()})


def _fwd_bwd(mine, ref, x):
    xm, xr = _tw(x, True), x.clone().requires_grad_(True)
    ym, yr = mine(xm), ref(xr)
    _close(ym, yr)
    (ym * ym).sum().backward()
    (yr * yr).sum().backward()
    _close(xm.grad, xr.grad)
    return ym, yr


def _grads_close(mine, ref) -> None:
    pm, pr = dict(mine.named_parameters()), dict(ref.named_parameters())
    assert list(pm) == list(pr)
    for k in pr:
        _close(pm[k].grad, pr[k].grad)


def test_weight_norm_hooks(torch):
    mine, ref = _pair(torch, "Linear", 4, 3)
    x = torch.randn(5, 4)
    with pytest.warns(FutureWarning, match="parametrizations.weight_norm"):
        nn.utils.weight_norm(mine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.nn.utils.weight_norm(ref)
    assert list(mine.state_dict()) == list(ref.state_dict()) == ["bias", "weight_g", "weight_v"]
    assert tuple(mine.weight_g.shape) == (3, 1)
    _load(mine, ref)
    _fwd_bwd(mine, ref, x)
    _grads_close(mine, ref)
    with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks"), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        nn.utils.weight_norm(mine)
    nn.utils.remove_weight_norm(mine)
    torch.nn.utils.remove_weight_norm(ref)
    assert isinstance(mine.weight, nn.Parameter) and list(mine.state_dict()) == list(ref.state_dict())
    _close(mine.weight, ref.weight)
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found"):
        nn.utils.remove_weight_norm(mine)
    # dim=None: one norm of the whole tensor (a 0-d g); a conv's dim=1
    for dim in (None, 1):
        mine, ref = _pair(torch, "Conv2d", 2, 3, 3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            nn.utils.weight_norm(mine, dim=dim)
            torch.nn.utils.weight_norm(ref, dim=dim)
        assert tuple(mine.weight_g.shape) == tuple(ref.weight_g.shape)
        _load(mine, ref)
        _fwd_bwd(mine, ref, torch.randn(1, 2, 5, 5))
        _grads_close(mine, ref)


def _spectral_pair(torch, cls_name, *args, **kw):
    mine, ref = _pair(torch, cls_name, *args)
    nn.utils.spectral_norm(mine, **kw)
    torch.nn.utils.spectral_norm(ref, **kw)
    assert list(mine.state_dict()) == list(ref.state_dict())
    _load(mine, ref)  # (torch's u and v too)
    return mine, ref


def test_spectral_norm_hooks_train_and_eval(torch):
    mine, ref = _spectral_pair(torch, "Linear", 5, 4, n_power_iterations=2)
    assert set(mine.state_dict()) == {"bias", "weight_orig", "weight_u", "weight_v"}
    u_before = _np(mine.weight_u)
    for _ in range(2):
        _fwd_bwd(mine, ref, torch.randn(3, 5))
        _close(mine.weight_u, ref.weight_u)
        _close(mine.weight_v, ref.weight_v)
    assert not np.allclose(u_before, _np(mine.weight_u), rtol=0, atol=1e-14)  # (the vectors moved)
    _grads_close(mine, ref)
    mine.eval()
    ref.eval()
    u, v = _np(mine.weight_u), _np(mine.weight_v)
    _fwd_bwd(mine, ref, torch.randn(3, 5))
    np.testing.assert_array_equal(_np(mine.weight_u), u)  # (no power iteration in eval mode)
    np.testing.assert_array_equal(_np(mine.weight_v), v)
    nn.utils.remove_spectral_norm(mine)
    torch.nn.utils.remove_spectral_norm(ref)
    assert isinstance(mine.weight, nn.Parameter) and list(mine.state_dict()) == list(ref.state_dict())
    _close(mine.weight, ref.weight)
    # a transposed convolution: dim 1 by default
    mine, ref = _spectral_pair(torch, "ConvTranspose2d", 2, 3, 3)
    assert tuple(mine.weight_u.shape) == (3,)
    _fwd_bwd(mine, ref, torch.randn(1, 2, 4, 4))
    _close(mine.weight_u, ref.weight_u)
    _close(mine.weight_v, ref.weight_v)


def test_parametrize_register_remove_and_optimize(torch):
    class Symmetric(torch.nn.Module):
        def forward(self, x):
            return x.triu() + x.triu(1).transpose(-1, -2)

    class SymmetricTw(nn.Module):
        def forward(self, x):
            return x.triu() + x.triu(1).transpose(-1, -2)

    mine, ref = _pair(torch, "Linear", 3, 3)
    torch.nn.utils.parametrize.register_parametrization(ref, "weight", Symmetric())
    parametrize.register_parametrization(mine, "weight", SymmetricTw())
    assert type(mine).__name__ == "ParametrizedLinear" and isinstance(mine, nn.Linear)
    assert parametrize.type_before_parametrizations(mine) is nn.Linear
    assert parametrize.is_parametrized(mine) and parametrize.is_parametrized(mine, "weight")
    assert not parametrize.is_parametrized(mine, "bias")
    assert list(mine.state_dict()) == list(ref.state_dict()) == ["bias", "parametrizations.weight.original"]
    orig = mine.parametrizations.weight.original
    assert isinstance(orig, nn.Parameter)
    _close(mine.weight, ref.weight)
    opt_m = tw.optim.SGD(mine.parameters(), lr=0.1)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(4, 3)
    _fwd_bwd(mine, ref, x)
    _grads_close(mine, ref)
    opt_m.step()
    opt_r.step()
    assert mine.parametrizations.weight.original is orig
    _close(orig, ref.parametrizations.weight.original)
    _close(mine.weight, ref.weight)
    with parametrize.cached():
        assert mine.weight is mine.weight
    assert mine.weight is not mine.weight
    parametrize.remove_parametrizations(mine, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(ref, "weight")
    assert type(mine) is nn.Linear and "parametrizations" not in mine._modules
    assert mine.weight is orig and isinstance(mine.weight, nn.Parameter)
    assert list(mine.state_dict()) == list(ref.state_dict()) == ["bias", "weight"]
    _close(mine.weight, ref.weight)
    assert parametrize.type_before_parametrizations(mine) is nn.Linear
    with pytest.raises(ValueError, match="does not have a parametrization"):
        parametrize.remove_parametrizations(mine, "weight")


def test_parametrizations_weight_norm(torch):
    mine, ref = _pair(torch, "Linear", 4, 3)
    torch.nn.utils.parametrizations.weight_norm(ref)
    nn.utils.parametrizations.weight_norm(mine)
    keys = ["bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert list(mine.state_dict()) == list(ref.state_dict()) == keys
    for k, v in ref.state_dict().items():
        _close(mine.state_dict()[k], v)
    sd = {k: v + 0.25 for k, v in ref.state_dict().items()}  # (loading torch's)
    ref.load_state_dict(sd)
    mine.load_state_dict({k: _tw(v) for k, v in sd.items()})
    _fwd_bwd(mine, ref, torch.randn(2, 4))
    _grads_close(mine, ref)
    parametrize.remove_parametrizations(mine, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(ref, "weight")
    assert isinstance(mine.weight, nn.Parameter) and list(mine.state_dict()) == ["bias", "weight"]
    _close(mine.weight, ref.weight)
    with pytest.raises(ValueError, match="Cannot leave unparametrized"):
        nn.utils.parametrizations.weight_norm(mine)
        parametrize.remove_parametrizations(mine, "weight", leave_parametrized=False)


def test_parametrizations_spectral_norm(torch):
    mine, ref = _pair(torch, "Linear", 5, 4)
    torch.nn.utils.parametrizations.spectral_norm(ref)
    nn.utils.parametrizations.spectral_norm(mine)
    keys = ["bias", "parametrizations.weight.original", "parametrizations.weight.0._u",
            "parametrizations.weight.0._v"]
    assert list(mine.state_dict()) == list(ref.state_dict()) == keys
    _load(mine, ref)
    pm, pr = mine.parametrizations.weight[0], ref.parametrizations.weight[0]
    for _ in range(2):  # training: a power iteration a read
        _fwd_bwd(mine, ref, torch.randn(3, 5))
        _close(pm._u, pr._u)
        _close(pm._v, pr._v)
    _grads_close(mine, ref)
    mine.eval()
    ref.eval()
    u = _np(pm._u)
    _close(mine.weight, ref.weight)
    np.testing.assert_array_equal(_np(pm._u), u)
    # a 1-D tensor: normalised
    m1, r1 = _pair(torch, "Linear", 3, 2)
    torch.nn.utils.parametrizations.spectral_norm(r1, "bias")
    nn.utils.parametrizations.spectral_norm(m1, "bias")
    _close(m1.bias, r1.bias)


def test_fusion_matches_torch(torch):
    conv_m, conv_r = _pair(torch, "Conv2d", 2, 3, 3)
    bn_m, bn_r = _pair(torch, "BatchNorm2d", 3)
    with torch.no_grad():
        bn_r.running_mean.copy_(torch.randn(3))
        bn_r.running_var.copy_(torch.rand(3) + 0.5)
        bn_r.weight.copy_(torch.randn(3))
        bn_r.bias.copy_(torch.randn(3))
    bn_m.load_state_dict({k: _tw(v) for k, v in bn_r.state_dict().items()})
    for m in (conv_m, conv_r, bn_m, bn_r):
        m.eval()
    x = torch.randn(2, 2, 6, 6)
    fm, fr = nn.utils.fuse_conv_bn_eval(conv_m, bn_m), torch.nn.utils.fuse_conv_bn_eval(conv_r, bn_r)
    _close(fm(_tw(x)), fr(x))
    _close(fm(_tw(x)), bn_m(conv_m(_tw(x))))
    assert fm is not conv_m and isinstance(fm.weight, nn.Parameter)
    w, b = nn.utils.fuse_conv_bn_weights(conv_m.weight, None, bn_m.running_mean, bn_m.running_var, bn_m.eps,
                                         None, None, transpose=False)
    wr, br = torch.nn.utils.fuse_conv_bn_weights(conv_r.weight, None, bn_r.running_mean, bn_r.running_var, bn_r.eps,
                                                 None, None, transpose=False)
    _close(w, wr)
    _close(b, br)
    lin_m, lin_r = _pair(torch, "Linear", 4, 3)
    bn1_m, bn1_r = _pair(torch, "BatchNorm1d", 3)
    with torch.no_grad():
        bn1_r.running_mean.copy_(torch.randn(3))
        bn1_r.running_var.copy_(torch.rand(3) + 0.5)
    bn1_m.load_state_dict({k: _tw(v) for k, v in bn1_r.state_dict().items()})
    for m in (lin_m, lin_r, bn1_m, bn1_r):
        m.eval()
    x = torch.randn(5, 4)
    fm, fr = nn.utils.fuse_linear_bn_eval(lin_m, bn1_m), torch.nn.utils.fuse_linear_bn_eval(lin_r, bn1_r)
    _close(fm(_tw(x)), fr(x))
    w, b = nn.utils.fuse_linear_bn_weights(lin_m.weight, None, bn1_m.running_mean, bn1_m.running_var, bn1_m.eps,
                                           bn1_m.weight, bn1_m.bias)
    wr, br = torch.nn.utils.fuse_linear_bn_weights(lin_r.weight, None, bn1_r.running_mean, bn1_r.running_var,
                                                   bn1_r.eps, bn1_r.weight, bn1_r.bias)
    _close(w, wr)
    _close(b, br)
    with pytest.raises(AssertionError, match="Fusion only for eval"):
        nn.utils.fuse_linear_bn_eval(lin_m.train(), bn1_m)


def test_skip_init_clip_grad_norm_and_fork_rng(torch):
    m = nn.utils.skip_init(nn.Linear, 4, 3)
    assert isinstance(m, nn.Linear) and tuple(m.weight.shape) == (3, 4)
    with pytest.raises(RuntimeError, match="Expected a Module"):
        nn.utils.skip_init(int)
    m.weight.grad = tw.ones(3, 4) * 3
    m.bias.grad = None
    with pytest.warns(FutureWarning, match="clip_grad_norm_"):
        total = nn.utils.clip_grad_norm(m.parameters(), 1.0)
    assert abs(total.item() - 3 * np.sqrt(12)) < 1e-4
    assert abs(m.weight.grad.norm().item() - 1.0) < 1e-4
    tw.manual_seed(3)
    state = tw.random.default_generator.get_state()
    with tw.random.fork_rng():
        a = tw.randn(4)
    with tw.random.fork_rng(devices=[]):
        b = tw.randn(4)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert tw.random.default_generator.get_state() == state
    with pytest.raises(KeyError):
        with tw.random.fork_rng(devices=iter([0])):
            tw.randn(2)
            raise KeyError("restored anyway")
    assert tw.random.default_generator.get_state() == state
    with tw.random.fork_rng(enabled=False):
        tw.randn(2)
    assert tw.random.default_generator.get_state() != state
