"""A module's registries (``_parameters``, ``_buffers``, ``_modules``) stay the one record of its entries while the
instance dict mirrors them (``client/nn/module.py``'s ``_Registry``): every way of writing them shows in attribute
reads as torch's ``__getattr__`` would give, submodules are read without the ``__getattr__`` fallback, and
``parameters()`` (whose list a root keeps between registry writes) follows every change."""

from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire.nn import functional as F


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


def test_submodule_read_without_getattr_fallback(session):
    calls = []

    class Counting(Pair):
        def __getattr__(self, name):
            calls.append(name)
            return super().__getattr__(name)

    m = Counting()
    assert m.fc is m._modules["fc"] and m.fc.weight is m.fc._parameters["weight"]
    m(tw.ones(1, 3))
    assert calls == []
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        _ = m.missing
    assert calls == ["missing"]


def test_direct_registry_writes_show_in_attributes(session):
    m = Pair()
    tanh = nn.Tanh()
    m._modules["act"] = tanh
    assert m.act is tanh
    del m._modules["act"]
    assert not hasattr(m, "act")
    m._modules.update({"act": tanh, "extra": nn.ReLU()})
    assert m.act is tanh and isinstance(m.extra, nn.ReLU)
    assert m._modules.pop("extra") is not None and not hasattr(m, "extra")
    m._modules.setdefault("late", nn.Identity())
    assert isinstance(m.late, nn.Identity)
    m._modules.clear()
    assert not hasattr(m, "fc") and not hasattr(m, "late")
    w = nn.Parameter(tw.zeros(2))
    m._parameters["w"] = w
    m._buffers["w"] = tw.ones(2)  # (a parameter comes first in torch's lookup)
    assert m.w is w
    del m._parameters["w"]
    assert np.array_equal(m.w.numpy(), [1, 1])


def test_set_and_delete_through_attributes(session):
    m = Pair()
    m.act = None
    assert m.act is None and m._modules["act"] is None
    del m.act
    assert not hasattr(m, "act") and "act" not in m._modules
    m.fc = nn.Parameter(tw.zeros(2))  # a parameter under a submodule's name replaces it
    assert isinstance(m.fc, nn.Parameter) and "fc" not in m._modules
    m.register_buffer("b", tw.zeros(1))
    m.register_buffer("b", tw.ones(1))  # registering an existing buffer again is allowed, as torch
    assert np.array_equal(m.b.numpy(), [1])
    with pytest.raises(KeyError):
        m.register_buffer("fc", tw.zeros(1))


def test_own_and_class_attributes_come_first(session):
    class WithClassAttr(nn.Module):
        shadow = "class"

    m = WithClassAttr()
    m._modules["shadow"] = nn.ReLU()
    assert m.shadow == "class"  # torch finds the class attribute before __getattr__ is asked
    m.note = "own"
    m._modules["note"] = nn.ReLU()
    assert m.note == "own"
    d = nn.ModuleDict({"a": nn.Tanh()})
    d._modules["keys"] = nn.ReLU()  # (add_module refuses the name, as torch's; a direct write does not)
    assert list(d.keys()) == ["a", "keys"] and isinstance(d["keys"], nn.ReLU)


def test_replaced_registry_is_read_through_getattr(session):
    m = Pair()
    relu = nn.ReLU()
    m._modules = OrderedDict(other=relu)
    assert m.other is relu and not hasattr(m, "fc")
    m._modules["later"] = relu  # a plain dict's writes are not mirrored: found by __getattr__
    assert m.later is relu
    assert [p.shape for p in m.parameters()] == []


def test_deepcopy_has_its_own_registries(session):
    m = Pair()
    c = copy.deepcopy(m)
    assert c.fc is c._modules["fc"] and c.fc is not m.fc
    c._modules["act"] = nn.Tanh()
    assert isinstance(c.act, nn.Tanh) and isinstance(m.act, nn.ReLU)
    assert type(copy.copy(m._modules)) is OrderedDict


def test_parameters_follow_every_registry_write(session):
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    first = list(m.parameters())
    assert len(first) == 4 and list(m.parameters()) == first
    m[0] = nn.Linear(2, 3)
    now = list(m.parameters())
    assert len(now) == 4 and now[0] is not first[0] and now[2] is first[2]
    m[2].bias = None
    assert len(list(m.parameters())) == 3
    extra = nn.Parameter(tw.zeros(1))
    m[1]._parameters["extra"] = extra  # a child's registry, written directly
    assert list(m.parameters())[-2] is extra
    m.append(nn.Linear(1, 1))
    assert len(list(m.parameters())) == 6
    m[1]._modules = OrderedDict(inner=nn.Linear(1, 1))  # replaced: read by a walk each time from now on
    assert len(list(m.parameters())) == 8
    m[1]._modules["more"] = nn.Linear(1, 1)
    assert len(list(m.parameters())) == 10


def test_softmax_modules_follow_a_replaced_functional(session, monkeypatch):
    x = tw.tensor([[1.0, 2.0, 3.0]])
    expect = F.log_softmax(x, 1).numpy()
    assert np.allclose(nn.LogSoftmax(dim=1)(x).numpy(), expect)
    assert np.allclose(nn.Softmax(dim=1)(x).numpy(), np.exp(expect))
    seen = []
    monkeypatch.setattr(F, "log_softmax", lambda t, dim=None: seen.append(dim) or t)
    assert nn.LogSoftmax(dim=1)(x) is x and seen == [1]


def test_nll_loss_reductions_against_torch(session):
    torch = pytest.importorskip("torch")
    rng = np.random.RandomState(0)
    logp = np.log(rng.dirichlet(np.ones(5), size=7)).astype(np.float32)
    target = rng.randint(5, size=7)
    for reduction in ("mean", "sum", "none"):
        x = tw.tensor(logp, requires_grad=True)
        y = F.nll_loss(x, tw.tensor(target), reduction=reduction)
        xt = torch.tensor(logp, requires_grad=True)
        yt = torch.nn.functional.nll_loss(xt, torch.tensor(target), reduction=reduction)
        assert np.allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-6, atol=1e-7)
        y.sum().backward()
        yt.sum().backward()
        assert np.array_equal(x.grad.numpy(), xt.grad.numpy())
