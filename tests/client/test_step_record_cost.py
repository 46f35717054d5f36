"""What a hand-written training step records (the char-RNN tutorial's): ``nll_loss`` on targets the client knows,
and updates through ``p.data``, record fewer nodes than the general paths, with the same values and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire.autograd_hooks import requires_grad_of
from tensorwire.nn import functional as F
from tensorwire.nn import loss_functions

from ._ref import torch


def _nodes(session) -> int:
    return len(session._pending) + len(session._lazy)


def _loss_and_grad(session, logits: np.ndarray, target, reduction: str, ignore_index: int = -100):
    x = tw.tensor(logits, requires_grad=True)
    lp = x.log_softmax(1)
    session.flush()
    before = _nodes(session)
    loss = F.nll_loss(lp, tw.tensor(target), reduction=reduction, ignore_index=ignore_index)
    made = _nodes(session) - before
    loss.sum().backward()
    return loss.detach().numpy(), x.grad.numpy(), made


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(4, 5), (3, 4, 2)])
def test_nll_loss_on_known_targets_takes_fewer_nodes_with_the_same_values(session, monkeypatch, reduction, shape):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(shape).astype(np.float32)
    target = rng.integers(0, shape[1], (shape[0], *shape[2:]))
    fast = _loss_and_grad(session, logits, target, reduction)
    monkeypatch.setattr(loss_functions, "_none_ignored", lambda target, ignore_index: False)  # the general path
    general = _loss_and_grad(session, logits, target, reduction)
    np.testing.assert_array_equal(fast[0], general[0])  # the same arithmetic: bit for bit
    np.testing.assert_array_equal(fast[1], general[1])
    assert fast[2] < general[2]
    if torch is not None:
        tl = torch.tensor(logits, requires_grad=True)
        tloss = torch.nn.functional.nll_loss(tl.log_softmax(1), torch.tensor(target), reduction=reduction)
        tloss.sum().backward()
        np.testing.assert_allclose(fast[0], tloss.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(fast[1], tl.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_nll_loss_unbatched_and_ignored_targets(session):
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((4, 3))
    lp = np.log(np.exp(logits) / np.exp(logits).sum(1, keepdims=True))
    target = np.array([2, 0, 1, 0])
    # an ignored target (the client sees it in the values it holds): the general path, which masks it
    got, _, _ = _loss_and_grad(session, logits, target, "mean", ignore_index=0)
    assert got == pytest.approx(-(lp[0, 2] + lp[2, 1]) / 2)
    # one unbatched sample: a 0-d loss
    x = tw.tensor(logits[1])
    out = F.nll_loss(x.log_softmax(0), tw.tensor(1), reduction="none")
    assert out.shape == () and out.item() == pytest.approx(-lp[1, 1])


def test_a_view_of_a_held_target_takes_the_fewer_nodes(session):
    """The char-RNN tutorials' ``criterion(output, target_line_tensor[i])``, a step a letter: a view of the targets
    the client holds (after their ``unsqueeze_(-1)``), known without a round trip."""
    targets = tw.LongTensor([2, 0, 1])
    targets.unsqueeze_(-1)
    assert session.holds(targets)
    assert loss_functions._none_ignored(targets[1], -100) and not loss_functions._none_ignored(targets[1], 0)
    lp = tw.tensor(np.log(np.full((1, 3), 1 / 3)))
    assert F.nll_loss(lp, targets[2]).item() == pytest.approx(np.log(3))


def test_a_target_the_client_does_not_hold_takes_the_general_path(session):
    target = tw.tensor([1, 0, 2])
    session._known.forget([target._id])  # (as a target computed on the devices: its values are not the client's)
    assert not loss_functions._none_ignored(target, -100)
    lp = tw.tensor(np.log(np.full((3, 3), 1 / 3)))
    assert F.nll_loss(lp, target).item() == pytest.approx(np.log(3))


def test_ops_on_a_data_view_of_a_parameter_are_outside_autograd(session):
    p = nn.Parameter(tw.tensor(np.arange(3.0)))
    assert requires_grad_of(p) and requires_grad_of(p[1:])
    d = p.data
    assert not requires_grad_of(d) and not requires_grad_of(d[1:])
    session.flush()
    before = _nodes(session)
    y = d * 2  # a plain record: no view of p brought up to date with p's graph first
    assert _nodes(session) - before <= 2 and not y.requires_grad and y.grad_fn is None
    p.grad = tw.ones(3, dtype=tw.float64)
    p.data.add_(p.grad.data, alpha=-0.5)  # the tutorial's update: p changes, outside autograd
    assert p.requires_grad and p.grad_fn is None
    np.testing.assert_array_equal(p.detach().numpy(), np.arange(3.0) - 0.5)
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), 1 + 2 * (np.arange(3.0) - 0.5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_and_sub_with_alpha_record_one_node_with_the_two_ops_values(session, dtype):
    """``p.add_(g, alpha=)`` and ``sub`` record one ``add_scaled`` node (a hand-written update's op a parameter),
    bit-equal to the mul and the add they replace, gradients included."""
    rng = np.random.default_rng(2)
    xv, yv = rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal(4).astype(dtype)
    for alpha in (-0.05, 3, 0.0):
        x, y = tw.tensor(xv, requires_grad=True), tw.tensor(yv, requires_grad=True)
        session.flush()
        before = _nodes(session)
        added, subbed = x.add(y, alpha=alpha), x.sub(y, alpha=alpha)
        assert _nodes(session) - before <= 4  # (two nodes and at most one cached scalar each: was six)
        assert [e[1] for e in session._pending][-1] == "add_scaled"
        a = dtype(alpha)
        np.testing.assert_array_equal(added.detach().numpy(), xv + yv * a)
        np.testing.assert_array_equal(subbed.detach().numpy(), xv - yv * a)
        (added.sum() + 2 * subbed.sum()).backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full(xv.shape, 3, dtype))
        np.testing.assert_allclose(y.grad.numpy(), np.full(4, 3 * alpha - 6 * alpha, dtype), rtol=1e-6)
        p = tw.tensor(xv)
        p.add_(tw.tensor(yv), alpha=alpha)
        np.testing.assert_array_equal(p.numpy(), xv + yv * a)
    if torch is not None:
        tx, ty = torch.tensor(xv), torch.tensor(yv)
        np.testing.assert_allclose(tw.tensor(xv).sub(tw.tensor(yv), alpha=0.3).numpy(),
                                   torch.sub(tx, ty, alpha=0.3).numpy(), rtol=1e-6)


def test_add_with_alpha_keeps_torch_rules_off_the_one_node_path(session):
    """Integers, mixed dtypes and Python operands keep the two-op path and torch's results."""
    i = tw.tensor([1, 2])
    assert i.add(tw.tensor([1, 1]), alpha=3).tolist() == [4, 5] and i.add(tw.tensor([1, 1]), alpha=3).dtype == tw.int64
    m = tw.tensor(np.ones(2, np.float64)).add(tw.tensor(np.ones(2, np.float32)), alpha=0.5)
    assert m.dtype == tw.float64 and m.tolist() == [1.5, 1.5]
    assert tw.tensor([1.0, 2.0]).sub(1, alpha=2).tolist() == [-1.0, 0.0]
