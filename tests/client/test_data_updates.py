"""The update old tutorials write through ``.data`` (``p.data -= lr * p.grad.data; p.grad.data.zero_()``, the polynomial
fit of ``tests/programs/test_polyfit.py``) records what torch runs: the scaled gradient and the subtraction, and the
zero fill; no alias of the parameter when Python assigns ``p.data`` back (``p.data -= x`` is ``tmp = p.data;
tmp -= x; p.data = tmp``), and no node at all for a gradient zeroed (a 0-d one takes the session's cached scalar 0; a
small one a lazy ``full`` the client holds, recorded when the next backward reads it).
Counted, not timed; the values are checked against torch, and the next backward accumulates into the zeroed
gradients."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

LR = 1e-2
TORCH_WHY = "PyTorch is the reference here (pip install torch==2.13.0)"


def _recorded(session, fn):
    """``(fn's result, the ops of the nodes it recorded)`` (none shipped meanwhile: ``fn`` reads no value)."""
    session.flush()
    out = fn()
    return out, [e[1] for e in session._pending]


def _update(params):
    for p in params:
        p.data -= LR * p.grad.data
        p.grad.data.zero_()


def _model(lib, shapes):
    rng = np.random.default_rng(0)
    params = [lib.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in shapes]
    x = lib.tensor(rng.standard_normal(5).astype(np.float32))

    def loss():
        return sum(((p * x.reshape((5,) + (1,) * p.ndim)) ** 2).sum() for p in params)

    return params, loss


@pytest.mark.parametrize("shapes, per_param", [([(), ()], ["mul", "sub"]),
                                               ([(2, 3), (4,)], ["mul", "sub"])],
                         ids=["0-d", "n-d"])
def test_a_data_update_records_the_ops_torch_runs(session, shapes, per_param):
    params, loss = _model(tw, shapes)
    try:  # (the counts are checked without PyTorch too; the values need it)
        import torch
    except ImportError:
        torch = None
    tparams, tloss = _model(torch, shapes) if torch is not None else (None, None)
    for step in range(3):
        loss().backward()
        if step == 0:  # (the first update records the cached scalars lr and 0 once)
            _update(params)
        else:
            _, ops = _recorded(session, lambda: _update(params))
            assert ops == per_param * len(params), ops
        if torch is not None:
            tloss().backward()
            _update(tparams)
            for p, t in zip(params, tparams):
                np.testing.assert_allclose(p.detach().numpy(), t.detach().numpy(), rtol=1e-6)
            np.testing.assert_array_equal(p.grad.numpy(), np.zeros(t.shape, np.float32))
            assert p.requires_grad and p.is_leaf and p.grad_fn is None


def test_data_assigned_its_own_view_records_nothing_and_keeps_sharing(session):
    p = tw.tensor([1.0, 2.0, 3.0], requires_grad=True)
    d = p.data
    v = d.view(3, 1).view(3)  # (a view of the same value too)
    _, ops = _recorded(session, lambda: (setattr(p, "data", d), setattr(p, "data", v)))
    assert ops == []
    d.mul_(2)  # the view still shares p's value both ways
    assert p.tolist() == [2.0, 4.0, 6.0] and v.tolist() == [2.0, 4.0, 6.0]
    p.data.add_(1)
    assert d.tolist() == [3.0, 5.0, 7.0]
    assert p.requires_grad and p.is_leaf and not d.requires_grad


def test_data_assigned_another_tensor_records_no_alias(session):
    p = tw.tensor([1.0, 2.0], requires_grad=True)
    q = tw.tensor([[5.0, 6.0, 7.0]])
    _, ops = _recorded(session, lambda: setattr(p, "data", q))
    assert ops == []
    assert p.shape == (1, 3) and p.requires_grad and p.is_leaf
    y, ops = _recorded(session, lambda: p * q)
    assert ops == ["const", "mul"]  # (it reads q's value, uploaded now: no reshape recorded for the alias)
    y.sum().backward()
    assert p.grad.tolist() == [[5.0, 6.0, 7.0]]
    assert p.tolist() == [[5.0, 6.0, 7.0]] and q.tolist() == [[5.0, 6.0, 7.0]]
    p.data.add_(1)  # p has q's value, not q itself
    assert p.tolist() == [[6.0, 7.0, 8.0]] and q.tolist() == [[5.0, 6.0, 7.0]]
    with pytest.raises(TypeError, match="data must be a Tensor"):
        p.data = [1.0]


def test_a_0d_fill_takes_the_cached_scalar_without_changing_it(session):
    a = tw.tensor(3.0)
    b = tw.tensor(4.0)
    _, ops = _recorded(session, lambda: (a.zero_(), b.fill_(2.5), tw.zero_(b)))
    assert "full" not in ops[1:]  # (at most the cached scalar's own node, made once)
    a.add_(7)  # a's new value is a node of its own: the cached 0 stays 0
    assert (a.item(), b.item()) == (7.0, 0.0)
    assert (tw.tensor(1.0) + 0).item() == 1.0 and tw.zeros(()).fill_(0).item() == 0.0
    i = tw.tensor(9)
    i.fill_(True)
    assert i.dtype == tw.int64 and i.item() == 1
    f = tw.tensor(1.0, dtype=tw.float64).fill_(1 / 3)
    assert f.dtype == tw.float64 and f.item() == 1 / 3


def test_a_0d_zero_of_a_non_leaf_gives_torch_s_gradient(session):
    torch = pytest.importorskip("torch", reason=TORCH_WHY)
    for lib in (tw, torch):
        x = lib.tensor(2.0, requires_grad=True)
        y = x * 3
        y.zero_()
        (y + x * 5).backward()
        assert y.item() == 0.0 and x.grad.item() == 5.0, lib
    p = tw.tensor(2.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        p.zero_()
    with tw.no_grad():
        p.zero_()
    assert p.item() == 0.0 and p.requires_grad and p.is_leaf


def test_a_data_view_written_then_read_follows_its_base(session):
    """A write through ``p.data`` leaves that view behind ``p``'s version (no new alias made for it, most such views
    die unread): a later write or read through it brings it up to date first."""
    p = tw.tensor([1.0, 2.0], requires_grad=True)
    d = p.data
    d.add_(1).mul_(2)  # (chained on one view: the second write reads the first's result)
    assert p.tolist() == [4.0, 6.0] and d.tolist() == [4.0, 6.0]
    p.data.sub_(1)
    assert d.tolist() == [3.0, 5.0] and (d + 0).tolist() == [3.0, 5.0]
    session.flush()
    lazy = len(session._lazy)
    e = p.data
    e.add_(1)
    assert len(session._lazy) == lazy + 1  # (``p.data``'s alias alone)
    assert e.tolist() == [4.0, 6.0] and p.tolist() == [4.0, 6.0] and not e.requires_grad
