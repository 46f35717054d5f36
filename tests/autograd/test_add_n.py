"""A value used more than twice gets its gradient as ONE ``add_n`` of the pieces (a recurrent cell's weight, once a
time step: ~880 ``add`` s an LBFGS step of the sine-wave program before), summed left to right as the chain of ``add``
s it replaces, to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.autograd.backward_graph import build_backward
from tensorwire.backends.cpu.kernels import KERNELS
from tensorwire.protocol import dtypes as D


def _uses(n: int) -> dict:
    """The forward graph of ``sum(x * c_1) + ... + sum(x * c_n)`` (x the target)."""
    ext = [[[3, 4], "float64", 0]] + [[[3, 4], "float64", 0]] * n
    nodes, total = [], None
    for k in range(n):
        nodes.append(["mul", [-1, -(k + 2)], None, 0])
        nodes.append(["sum", [len(nodes) - 1], None, 0])
        if total is not None:
            nodes.append(["add", [total, len(nodes) - 1], None, 0])
        total = len(nodes) - 1
    return {"devs": ["cpu:0"], "ext": ext, "nodes": nodes, "roots": [total], "targets": [-1]}


@pytest.mark.parametrize("n,adds,add_ns", [(2, 1, 0), (3, 0, 1), (7, 0, 1)])
def test_a_gradient_of_more_than_two_pieces_is_one_add_n(n, adds, add_ns):
    ops = [node[0] for node in build_backward(_uses(n))["nodes"]]
    assert ops.count("add") == adds
    assert ops.count("add_n") == add_ns


@pytest.mark.parametrize("dt", [D.float16, D.float32, D.float64])
def test_add_n_kernel_is_the_chain_of_adds_to_the_bit(dt):
    rng = np.random.default_rng(0)
    xs = [(rng.standard_normal((5, 7)) * 10.0 ** rng.integers(-3, 4)).astype(dt.np) for _ in range(6)]
    want = xs[0]
    for x in xs[1:]:
        want = KERNELS["add"]([want, x], None, (5, 7), dt)
    got = KERNELS["add_n"](xs, None, (5, 7), dt)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    zero_d = [np.asarray(v, dt.np) for v in (0.1, 0.2, 0.3)]
    assert KERNELS["add_n"](zero_d, None, (), dt).shape == ()


def test_more_pieces_than_a_node_takes_chain_add_ns_of_at_most_max_inputs():
    """A value used more often than one node may have inputs (``protocol.graph.MAX_INPUTS``; a weight read by 5,000
    steps of a Python loop) gets a chain of ``add_n`` s, each of at most that many, still left to right; the worker
    would refuse one node of them all."""
    from tensorwire.protocol.graph import MAX_INPUTS

    n = MAX_INPUTS + 10
    nodes = build_backward(_uses(n))["nodes"]
    add_ns = [node for node in nodes if node[0] == "add_n"]
    assert len(add_ns) == 2 and all(len(node[1]) <= MAX_INPUTS for node in nodes)
    assert len(add_ns[0][1]) == MAX_INPUTS and add_ns[1][1][0] == nodes.index(add_ns[0])  # (the first sum first)
    assert len(add_ns[1][1]) == n - MAX_INPUTS + 1
