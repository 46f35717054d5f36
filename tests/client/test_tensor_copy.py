"""``copy.copy`` and ``copy.deepcopy`` of tensors, as torch's: a shallow copy shares the value and its in-place
updates but has a handle of its own (once it shared the original's handle, and the first to die released the
other's data); a deep copy of a leaf is independent (``copy.deepcopy(model.state_dict())``)."""

from __future__ import annotations

import copy
import gc

import pytest

import tensorwire as tw


def test_a_shallow_copy_shares_updates_and_outlives_the_original(session):
    a = tw.ones(3)
    b = copy.copy(a)
    assert b._id != a._id
    b.add_(1)
    assert a.tolist() == [2.0, 2.0, 2.0]
    del a
    gc.collect()
    assert b.tolist() == [2.0, 2.0, 2.0]  # (the original's release left the copy's value alone)


def test_a_shallow_copy_of_a_leaf_requiring_grad_is_a_leaf_requiring_grad(session):
    w = tw.ones(2, requires_grad=True)
    c = copy.copy(w)
    assert c.requires_grad and c.is_leaf


def test_a_deep_copy_of_a_state_dict_is_independent(session):
    m = tw.nn.Linear(3, 2)
    before = m.weight.tolist()
    sd = copy.deepcopy(m.state_dict())
    sd["weight"].add_(1)
    assert m.weight.tolist() == before
    assert (sd["weight"] - m.weight).abs().max().item() == pytest.approx(1.0)


def test_a_deep_copy_keeps_requires_grad_and_copies_the_grad(session):
    w = tw.ones(2, requires_grad=True)
    w.grad = tw.full((2,), 3.0)
    d = copy.deepcopy(w)
    assert d.requires_grad and d.is_leaf and d.grad.tolist() == [3.0, 3.0]
    d.grad.add_(1)
    assert w.grad.tolist() == [3.0, 3.0]
    shared = {"a": w, "b": w}
    got = copy.deepcopy(shared)
    assert got["a"] is got["b"]  # (the memo: one copy of one tensor)


def test_a_deep_copy_of_a_non_leaf_is_refused_as_torch_does(session):
    w = tw.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(w * 2)
