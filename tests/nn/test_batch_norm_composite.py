"""Batch norm as composite ops (issue 37): ``F.batch_norm`` / ``nn.BatchNorm*d`` record one ``batch_norm`` op (plus
``batch_norm_stats`` and a ``batch_norm_update`` per running buffer in training) and differentiate through two
backward ops; checked against torch (forward, the input/weight/bias gradients and the running statistics) and
against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.nn import functional as F

from ._util import needs_torch, torch

SHAPES = [(6, 3), (4, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 2)]
DTYPES = [("float32", 2e-5), ("float64", 1e-10)]


def _rel_err(mine, ref) -> float:
    a, r = mine.detach().numpy(), ref.detach().numpy()
    return float(np.max(np.abs(a - r) / (1 + np.abs(r)))) if r.size else 0.0


@needs_torch
@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{len(s)}d")
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batch_norm_matches_torch(session, dtype, tol, shape, affine, training):
    rng = np.random.default_rng(len(shape) * 4 + 2 * affine + training)
    c = shape[1]
    x = rng.standard_normal(shape) * 3 + 1.5
    w, b, g = rng.standard_normal(c), rng.standard_normal(c), rng.standard_normal(shape)
    rm, rv = rng.standard_normal(c), rng.uniform(0.5, 2.0, c)
    tdt = getattr(torch, dtype)
    tx = torch.tensor(x, dtype=tdt, requires_grad=True)
    mx = tw.tensor(x, dtype=getattr(tw, dtype), requires_grad=True)
    tp = [torch.tensor(v, dtype=tdt, requires_grad=True) for v in (w, b)] if affine else [None, None]
    mp = [tw.tensor(v, dtype=getattr(tw, dtype), requires_grad=True) for v in (w, b)] if affine else [None, None]
    trm, trv = torch.tensor(rm, dtype=tdt), torch.tensor(rv, dtype=tdt)
    mrm, mrv = tw.tensor(rm, dtype=getattr(tw, dtype)), tw.tensor(rv, dtype=getattr(tw, dtype))
    ty = torch.nn.functional.batch_norm(tx, trm, trv, *tp, training, 0.2, 1e-4)
    my = F.batch_norm(mx, mrm, mrv, *mp, training, 0.2, 1e-4)
    ty.backward(torch.tensor(g, dtype=tdt))
    my.backward(tw.tensor(g, dtype=getattr(tw, dtype)))
    assert my.dtype is getattr(tw, dtype)
    pairs = {"output": (my, ty), "grad_input": (mx.grad, tx.grad), "running_mean": (mrm, trm),
             "running_var": (mrv, trv)}
    if affine:
        pairs |= {"grad_weight": (mp[0].grad, tp[0].grad), "grad_bias": (mp[1].grad, tp[1].grad)}
    errs = {k: _rel_err(*v) for k, v in pairs.items()}
    assert max(errs.values()) < tol, errs


@needs_torch
@pytest.mark.parametrize("momentum", [None, 0.3])
def test_batchnorm_module_running_statistics_match_torch(session, momentum):
    """Cumulative averaging (momentum=None: 1 / num_batches_tracked) and the exponential one, over several steps,
    then eval mode on the running statistics."""
    rng = np.random.default_rng(7)
    mine, ref = tw.nn.BatchNorm2d(3, momentum=momentum), torch.nn.BatchNorm2d(3, momentum=momentum)
    for _ in range(4):
        x = (rng.standard_normal((4, 3, 3, 2)) * 2 + 1).astype(np.float32)
        assert _rel_err(mine(tw.tensor(x)), ref(torch.tensor(x))) < 2e-5
    assert int(mine.num_batches_tracked.item()) == int(ref.num_batches_tracked.item()) == 4
    assert _rel_err(mine.running_mean, ref.running_mean) < 1e-6
    assert _rel_err(mine.running_var, ref.running_var) < 1e-6
    mine.eval()
    ref.eval()
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    assert _rel_err(mine(tw.tensor(x)), ref(torch.tensor(x))) < 2e-5


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batch_norm_gradcheck(session, training):
    """The full Jacobian of x, weight and bias against central differences (float64)."""
    rng = np.random.default_rng(3)
    x = tw.tensor(rng.standard_normal((3, 2, 2)), requires_grad=True)
    w = tw.tensor(rng.standard_normal(2), requires_grad=True)
    b = tw.tensor(rng.standard_normal(2), requires_grad=True)
    rm, rv = tw.tensor(rng.standard_normal(2)), tw.tensor(rng.uniform(0.5, 2.0, 2))

    def fn(x, w, b):
        return F.batch_norm(x, None if training else rm, None if training else rv, w, b, training)
    assert tw.autograd.gradcheck(fn, (x, w, b))


def test_batch_norm_records_composite_ops(session):
    """A BatchNorm2d training step records batch_norm (no mean/rsqrt/... chain) with the statistics it reads, and its
    backward the two batch-norm backward ops, which read those statistics too (no third pass over x)."""
    m = tw.nn.BatchNorm2d(4)
    x = tw.randn(3, 4, 2, 2, requires_grad=True)
    session.synchronize()
    y = m(x)
    fwd = [p[1] for p in session._pending]
    assert fwd.count("batch_norm") == 1 and fwd.count("batch_norm_stats") == 1
    assert fwd.count("batch_norm_update") == 2
    assert not {"mean", "rsqrt", "sub"} & set(fwd), fwd
    session.synchronize()
    (y * y).sum().backward()
    bwd = [p[1] for p in session._pending]
    assert bwd.count("batch_norm_grad") == 1 and bwd.count("batch_norm_grad_stats") == 1, bwd
    assert not {"mean", "rsqrt", "batch_norm_stats"} & set(bwd), bwd  # (the forward's statistics, read again)
    assert x.grad is not None and m.weight.grad is not None and m.bias.grad is not None
    session.synchronize()


def test_batch_norm_refuses_integer_input(session):
    with pytest.raises(tw.DTypeError):
        F.batch_norm(tw.ones(2, 3, dtype=tw.int64), None, None, training=True)


@needs_torch
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batch_norm_double_backward_matches_torch(session, training):
    """A gradient penalty through batch norm: the backward ops' decompositions carry every path (the batch
    statistics' dependence on x included)."""
    rng = np.random.default_rng(11)
    x, v = rng.standard_normal((4, 3, 2)), rng.standard_normal((4, 3, 2))
    w, b = rng.standard_normal(3), rng.standard_normal(3)
    rm, rv = rng.standard_normal(3), rng.uniform(0.5, 2.0, 3)
    res = []
    for lib, fn in ((torch, torch.nn.functional.batch_norm), (tw, F.batch_norm)):
        xs, ws, bs = (lib.tensor(a, requires_grad=True) for a in (x, w, b))
        y = fn(xs, lib.tensor(rm), lib.tensor(rv), ws, bs, training)
        (gx,) = lib.autograd.grad((y * y * y).sum(), [xs], create_graph=True)
        gx2, gw2 = lib.autograd.grad((gx * lib.tensor(v)).sum(), [xs, ws])
        res.append((gx2.detach().numpy(), gw2.detach().numpy()))
    for mine, ref in zip(res[1], res[0]):
        np.testing.assert_allclose(mine, ref, rtol=1e-9, atol=1e-9)


def test_sync_batch_norm_in_one_process_is_torchs(session):
    """``nn.SyncBatchNorm`` and ``convert_sync_batchnorm`` (SimCLR/BYOL repos convert their models; missing until
    session 59): in one process torch's computes batch normalisation, and so does ours, from the same weights, in
    training (with the running statistics) and in eval; the converted model keeps the same parameter objects and
    state dict keys; torch's input checks."""
    torch = pytest.importorskip("torch")

    def build(lib):
        lib.manual_seed(0)
        return lib.nn.Sequential(lib.nn.Conv2d(3, 4, 3), lib.nn.BatchNorm2d(4), lib.nn.ReLU(),
                                 lib.nn.Sequential(lib.nn.BatchNorm2d(4, affine=False, momentum=None)))

    ours, ref = build(tw), build(torch)
    ours.load_state_dict({k: tw.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    weight = ours[1].weight
    ours, ref = tw.nn.SyncBatchNorm.convert_sync_batchnorm(ours), torch.nn.SyncBatchNorm.convert_sync_batchnorm(ref)
    assert repr(ours) == repr(ref) and list(ours.state_dict()) == list(ref.state_dict())
    assert ours[1].weight is weight and isinstance(ours[3][0], tw.nn.SyncBatchNorm)
    x = np.random.default_rng(0).standard_normal((5, 3, 6, 6)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(ours(tw.tensor(x)).detach().numpy(), ref(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    for k, v in ref.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-7, err_msg=k)
    ours.eval()
    ref.eval()
    np.testing.assert_allclose(ours(tw.tensor(x)).detach().numpy(), ref(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="at least 2D"):
        tw.nn.SyncBatchNorm(4)(tw.ones(4))

