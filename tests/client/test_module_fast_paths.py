"""The fast paths a training step takes through ``nn.Module`` (issue 37): ``parameters()`` by a plain walk of the
module tree and ``nn.Linear`` reading its parameters without ``__getattr__``'s failed lookup first give what the
general paths give, and step aside where a module changes how it is walked or read."""

from __future__ import annotations

import numpy as np

import tensorwire as tw
from tensorwire import nn


class _Tree(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Sequential(nn.Linear(4, 4), self.a)  # a module reached twice
        self.c = nn.Linear(4, 2, bias=False)
        self.c.weight = self.b[0].weight  # a parameter shared by two modules
        self.scale = nn.Parameter(tw.ones(1))


def test_parameters_walk_the_tree_as_named_parameters_does(session):
    m = _Tree()
    got = list(m.parameters())
    want = [p for _, p in m.named_parameters()]
    assert [id(p) for p in got] == [id(p) for p in want]
    assert len(got) == 5  # a.weight, a.bias, b.0.weight, b.0.bias, scale: each once
    assert [id(p) for p in m.parameters(recurse=False)] == [id(m.scale)]


def test_parameters_follow_a_module_that_walks_its_tree_its_own_way(session):
    class Hidden(nn.Module):  # hides its children from the walk
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(2, 2)

        def named_modules(self, memo=None, prefix="", remove_duplicate=True):
            yield prefix, self

    outer = nn.Sequential(nn.Linear(2, 2), Hidden())
    got = [id(p) for p in outer.parameters()]
    assert got == [id(p) for _, p in outer.named_parameters()]
    assert len(got) == 2  # the Hidden module's Linear is not walked


def test_linear_reads_a_weight_that_is_a_plain_attribute(session):
    lin = nn.Linear(3, 2)
    x = tw.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    w = lin.weight.detach() * 2
    del lin.weight
    lin.weight = w  # (a plain tensor attribute, as weight norm sets one)
    want = x.numpy() @ w.numpy().T + lin.bias.detach().numpy()
    np.testing.assert_allclose(lin(x).detach().numpy(), want, rtol=1e-6)
    lin.register_parameter("bias", None)
    np.testing.assert_allclose(lin(x).detach().numpy(), x.numpy() @ w.numpy().T, rtol=1e-6)
