"""Every recorded op carries the user's line (``Session.record``'s ``where``, which deferred errors name), found by a
walk up the stack that skips the client's own frames; the hot paths skip the frames they know to be the client's
without looking at them (``up`` in ``autograd_hooks.record``: ``Tensor._rec``, ``Tensor._binary``, the view steps).
Each case below records through one such path and checks every node it recorded names this file and its line."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.nn.functional as F
from tensorwire.session import user_line

from ._calls import device_value
from ._ref import line_of

HERE = __file__


def _cases(x, y, w, lin, d):
    """(marker, fn): each fn records on its marked line. ``x`` and ``d``: values on the device (``y`` is a value the
    client holds, whose writes, joins and exact ops it works out itself: known_values.HELD_OPS)."""
    def binary():
        return x + y  # MARK-binary

    def reverse():
        return 2 - x  # MARK-reverse

    # (a view outside autograd is recorded when something reads it, on that line: here the same one)
    def single_view():
        return x[1] + 0  # MARK-single-view

    def view_of_view():
        return x.t()[0].reshape(1, 3) + 0  # MARK-view-of-view

    def write_through_view():
        v = d[0]
        v[1:] = y[0, 1:]  # MARK-write-through-view

    def grad_op():
        return (w * 3).sum()  # MARK-grad-op

    def module():
        return lin(y)  # MARK-module

    def functional():
        return F.relu(x)  # MARK-functional

    def inplace():
        x.add_(1)  # MARK-inplace

    def cat():
        return tw.cat((d[0:1], y), 0)  # MARK-cat

    def log_softmax():
        return x.log_softmax(1)  # MARK-log-softmax

    def grad_view():
        return w.unsqueeze(0)  # MARK-grad-view

    # (a run of element writes records nothing; the op that ends it records the run's nodes, on its own line)
    def element_writes():
        y[1][0] = 5.0
        return y + 0  # MARK-element-writes

    def known_element_writes():  # (x's value is the client's: the run keeps its values and positions too)
        x[2][1] = 5.0
        return x * 2  # MARK-known-element-writes

    def factory():
        return tw.zeros(100, 100)  # MARK-factory (a small one the client holds: recorded when read, on that line)

    fns = [binary, reverse, single_view, view_of_view, write_through_view, grad_op, module, functional, inplace,
           cat, log_softmax, grad_view, element_writes, known_element_writes, factory]
    return [("MARK-" + fn.__name__.replace("_", "-"), fn) for fn in fns]


@pytest.mark.parametrize("case", range(15))
def test_each_recorded_node_names_the_users_line(session, case):
    x = device_value(tw.tensor(np.arange(9, dtype=np.float32).reshape(3, 3)))
    y = tw.ones(3, 3)
    w = tw.ones(3, requires_grad=True)
    lin = tw.nn.Linear(3, 2)
    d = device_value(x)
    marker, fn = _cases(x, y, w, lin, d)[case]
    session.flush()
    keep = fn()  # noqa: F841 - kept alive so its nodes ship
    entries = list(session._pending)
    assert entries, "the case recorded nothing"
    want = (HERE, line_of(HERE, marker))
    # (a write through a view records its view's own slice on the line before, where ``v`` is made)
    lines = [user_line(e[5]) for e in entries]
    got = [w for w in lines if not (fn.__name__ == "write_through_view" and w == (HERE, want[1] - 1))]
    assert got and all(g == want for g in got), f"{marker}: {[(e[1], w) for e, w in zip(entries, lines)]}"


def test_a_recorded_where_gives_the_line_f_lineno_gives():
    """``user_line`` works out from a recorded ``(code, instruction offset)`` the line the frame's ``f_lineno`` gave
    (every frame of this test's stack, pytest's included)."""
    f = sys._getframe()
    seen = 0
    while f is not None:
        assert user_line((f.f_code, f.f_lasti)) == (f.f_code.co_filename, f.f_lineno)
        f, seen = f.f_back, seen + 1
    assert seen > 3
