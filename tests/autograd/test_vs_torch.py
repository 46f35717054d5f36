"""The same programs in torch and tensorwire give the same gradients (float64, 1e-5 relative).

Skipped cleanly when torch is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)


def _mlp(m, x, w1, b1, w2, b2, y):
    h = (x @ w1 + b1).relu()
    logits = h @ w2 + b2
    lp = logits.log_softmax(-1)
    return -lp.gather(1, y).mean()


PROGRAMS = {
    "poly": (lambda m, a, b, x: (a + b * x + a * x ** 2 - b * x ** 3).pow(2).sum(), [(), (), (7,)], None),
    "mlp_ce": (_mlp, [(5, 4), (4, 6), (6,), (6, 3), (3,)], "y"),
    "softmax_attention": (lambda m, q, k, v: ((q @ k.transpose(-1, -2)) / 2.0).softmax(-1).matmul(v).tanh().sum(),
                          [(2, 3, 4), (2, 5, 4), (2, 5, 3)], None),
    "norms": (lambda m, x: x.norm() + x.norm(dim=1).sum() + x.abs().sum(dim=0).max(), [(3, 4)], None),
    "var_std": (lambda m, x: x.var(dim=1).sum() + x.std() + x.var(dim=0, keepdim=True, unbiased=False).mean(),
                [(3, 4)], None),
    "logsumexp_sigmoid": (lambda m, x: x.logsumexp(1).sum() + x.sigmoid().prod(), [(2, 5)], None),
    "views": (lambda m, x: (x.permute(2, 0, 1).reshape(4, -1)[1:3, ::2].flip(0) * 3).exp().sum()
              + x.transpose(0, 2).unsqueeze(0).expand(2, 4, 3, 2).sum(),
              [(2, 3, 4)], None),
    "cat_stack": (lambda m, a, b: (m.cat([a, b * 2], 1).sin() + m.stack([a, a], 0).sum(0).repeat(1, 2)).sum(),
                  [(3, 2), (3, 2)], None),
    "indexing": (lambda m, x: x[[0, 2, 2]].sum() + (x[:, 1] ** 2).sum() + x[1, [0, 3]].prod(), [(3, 4)], None),
    "where_clamp": (lambda m, x, y: m.where(x > 0, x * y, y.exp()).sum() + x.clamp(-0.3, 0.4).sum()
                    + m.maximum(x, y).sum() + m.minimum(x, y * 0.5).sum(), [(3, 4), (3, 4)], None),
    "cumulative": (lambda m, x: x.cumsum(0).sin().sum() + (x.abs() + 0.5).cumprod(1).sum(), [(3, 4)], None),
    "reductions": (lambda m, x: x.amax(1).sum() + x.amin(0).sum() + x.mean((0, 1))
                   + x.sum(1, keepdim=True).pow(2).sum(), [(3, 4)], None),
    "broadcast_div": (lambda m, a, b: (a / (b.abs() + 1) - a.atan2(b + 2) + a.lerp(b, 0.3)).sum(),
                      [(3, 1), (4,)], None),
    "batched_matmul": (lambda m, a, b, v: ((a @ b) @ v).sum() + (v @ v), [(2, 1, 3, 4), (5, 4, 2), (2,)], None),
    "unary_zoo": (lambda m, x: (x.exp().log1p() + x.tanh() + x.sqrt() + x.rsqrt() + x.reciprocal() + x.erf()
                                + x.log2() + x.asin() + x.sinh().cosh() + x.expm1()).sum(), [(5,)], "pos"),
    "tri_pad": (lambda m, x: (x.tril(1) * 2 + x.triu(-1)).sum() + m.nn.functional.pad(x, (1, 2)).pow(2).sum(),
                [(3, 4)], None),
    "scatter_gather": (lambda m, x, s: x.scatter_add(0, m.tensor([[0, 1, 2], [2, 0, 1]]), s).pow(2).sum()
                       + x.gather(1, m.tensor([[1], [0], [2]])).sum(), [(3, 3), (2, 3)], None),
}


def _torch_tensor(a, requires_grad):
    return torch.tensor(a, dtype=torch.float64, requires_grad=requires_grad)


def _tw_tensor(a, requires_grad):
    return tw.tensor(a, dtype=tw.float64, requires_grad=requires_grad)


def _tw_ns():
    class NS:
        cat = staticmethod(tw.cat)
        stack = staticmethod(tw.stack)
        where = staticmethod(tw.where)
        maximum = staticmethod(tw.maximum)
        minimum = staticmethod(tw.minimum)
        tensor = staticmethod(lambda d: tw.tensor(d))

        class nn:  # noqa: N801
            class functional:  # noqa: N801
                @staticmethod
                def pad(x, p):
                    w = x.shape[-1]
                    z1 = tw.zeros(*x.shape[:-1], p[0], dtype=x.dtype)
                    z2 = tw.zeros(*x.shape[:-1], p[1], dtype=x.dtype)
                    assert w
                    return tw.cat([z1, x, z2], -1)
    return NS


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_same_gradients_as_torch(session, name):
    fn, shapes, kind = PROGRAMS[name]
    arrays = [RNG.uniform(0.2, 0.9, s) if kind == "pos" else RNG.standard_normal(s) for s in shapes]
    extra_np = [RNG.integers(0, 3, size=(5, 1))] if kind == "y" else []
    tt = [_torch_tensor(a, True) for a in arrays]
    wt = [_tw_tensor(a, True) for a in arrays]
    extra_t = [torch.tensor(e) for e in extra_np]
    extra_w = [tw.tensor(e) for e in extra_np]
    lt = fn(torch, *tt, *extra_t)
    lw = fn(_tw_ns(), *wt, *extra_w)
    gt = torch.autograd.grad(lt, tt)
    gw = tw.autograd.grad(lw, wt)
    np.testing.assert_allclose(lw.item(), lt.item(), rtol=1e-6)  # (Python float scalars ride as float32)
    for a, b in zip(gw, gt):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-12)


def test_second_order_matches_torch(session):
    a = RNG.standard_normal((3,))

    def f(m, x):
        return (x.sin() * x ** 2).sum()

    xt = _torch_tensor(a, True)
    (gt,) = torch.autograd.grad(f(torch, xt), xt, create_graph=True)
    (ht,) = torch.autograd.grad((gt * gt).sum(), xt)
    xw = _tw_tensor(a, True)
    (gw,) = tw.autograd.grad(f(None, xw), xw, create_graph=True)
    (hw,) = tw.autograd.grad((gw * gw).sum(), xw)
    np.testing.assert_allclose(gw.detach().numpy(), gt.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(hw.numpy(), ht.numpy(), rtol=1e-8)


@pytest.mark.parametrize("act", ["relu", "relu6", "leaky_relu", "hardtanh"])
def test_gradient_penalty_through_masked_activations_as_torch(act):
    """A gradient penalty (WGAN-GP, R1) or a PINN's second derivative through a ReLU-like network: torch's
    ``threshold_backward`` and its kin keep the first gradient connected to the input with a zero derivative, so
    ``u_xx`` is zeros (not an error) and the first layer's bias gets a zero gradient (not none: a lazy-R1 step's
    Adam would skip it). Until session 60 the rules' masks cut that link."""
    rng = np.random.default_rng(11)
    init = [rng.standard_normal(s) for s in ((3, 5), (5,), (5, 1), (1,))]
    x0 = rng.standard_normal((6, 3)) * 2
    grads = {}
    for m in (torch, tw):
        f = getattr(m.nn.functional, act)
        w1, b1, w2, b2 = (m.tensor(a, requires_grad=True) for a in init)
        x = m.tensor(x0, requires_grad=True)
        u = f(x @ w1 + b1) @ w2 + b2
        (gx,) = m.autograd.grad(u.sum(), x, create_graph=True)
        (gxx,) = m.autograd.grad(gx.sum(), x, retain_graph=True)
        gx.pow(2).sum().backward()
        grads[m.__name__] = [gxx.detach().numpy()] + [None if p.grad is None else p.grad.numpy()
                                                      for p in (w1, b1, w2, b2)]
    for got, want in zip(grads["tensorwire"], grads["torch"]):
        assert (got is None) == (want is None)
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_gradient_penalty_through_max_pooling_as_torch():
    """A critic with a conv, a max pool and a linear head: the penalty's second derivative reaches the conv's bias
    only through the pool's routing, whose derivative torch keeps as zeros (the bias gets a zero gradient)."""
    rng = np.random.default_rng(12)
    init = [rng.standard_normal(s) for s in ((3, 1, 3, 3), (3,), (27, 1), (1,))]
    x0 = rng.standard_normal((2, 1, 8, 8))
    grads = {}
    for m in (torch, tw):
        F = m.nn.functional
        w, b, v, c = (m.tensor(a, requires_grad=True) for a in init)
        x = m.tensor(x0, requires_grad=True)
        u = F.max_pool2d(F.conv2d(x, w, b), 2).reshape(2, -1) @ v + c
        (gx,) = m.autograd.grad(u.sum(), x, create_graph=True)
        gx.pow(2).sum().backward()
        grads[m.__name__] = [None if p.grad is None else p.grad.numpy() for p in (w, b, v, c)]
    for got, want in zip(grads["tensorwire"], grads["torch"]):
        assert (got is None) == (want is None)
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
