"""What a plan made again costs the worker (issue 37): a loop whose batches change shape plans every batch, and a plan
hit replays one. A node expanded before is emitted from its remembered expansion, and the straight-line runner
specializes each such step once, for every plan it is in (``Plan.step_memos``); a replayed dynamic value is
inferred once a plan (``Plan.check_dynamic``), and a bad one is refused however many good ones came before.
Counted, not timed."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.cpu import NumpyBackend, NumpyDevice
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DependencyFailed, ProtocolError

from .test_changing_shapes import MIXED, _metas, _mixed_inputs


class _CountingDevice(NumpyDevice):
    """A CPU device that counts the steps it specializes (the straight-line runner's per-step preparation)."""

    def __init__(self):
        super().__init__(NumpyBackend(), 0)
        self.specialized = 0

    def specialize(self, step):
        self.specialized += 1
        return super().specialize(step)


def _run(dev, plan, ext) -> dict:
    outs = list(range(100, 100 + len(plan.node_slot)))
    return X.run_plan(dev, plan, list(ext), outs, {}, [], set(plan.node_slot))


def _fresh(plan) -> int:
    """The steps of ``plan`` no plan has specialized yet: those outside a remembered expansion, and those of one
    whose callable is not made yet."""
    memos = plan.step_memos
    return sum(1 for k in range(len(plan.program.steps)) if k not in memos or memos[k][0] is None)


def test_a_remembered_expansion_is_specialized_once_for_every_plan_it_is_in(monkeypatch):
    monkeypatch.setattr(X, "_EXPANSIONS", OrderedDict())
    dev = _CountingDevice()
    ext = _mixed_inputs(10)
    first = X.compile_plan(dev, MIXED, _metas(ext))  # expanded afresh: remembered
    assert _fresh(first) == len(first.program.steps)
    # a primitive node's step is its remembered expansion's from the first plan on; a composite's, from the next
    assert 0 < len(first.step_memos) < len(first.program.steps)
    want = _run(dev, first, ext)
    assert dev.specialized == len(first.program.steps)
    second = X.compile_plan(dev, MIXED, _metas(ext))  # from the remembered expansions: the composites' specialized
    assert len(second.step_memos) == len(second.program.steps)
    assert _fresh(second) == len(first.program.steps) - len(first.step_memos)
    _run(dev, second, ext)
    before = dev.specialized
    assert before == 2 * len(first.program.steps) - len(first.step_memos)
    for n in (10, 11):  # the same again, then a new batch size: only the batch's nodes are new
        ext = _mixed_inputs(n)
        plan = X.compile_plan(dev, MIXED, _metas(ext))
        new_steps = _fresh(plan)
        got = _run(dev, plan, ext)
        assert dev.specialized - before == new_steps
        before = dev.specialized
        if n == 10:
            assert new_steps == 0
            for i, v in want.items():
                np.testing.assert_array_equal(got[i], v)
        else:
            assert 0 < new_steps < len(plan.program.steps)
            mean = ext[6].mean(0)
            np.testing.assert_allclose(got[99 + len(MIXED)], mean * mean, rtol=1e-6)


def _slice_plan():
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    nodes = [["slice", [-1], {"starts": [0, 0], "stops": [1, 4], "steps": [1, 1]}], ["mul", [0, 0], None]]
    return x, X.compile_plan(NumpyBackend().open(0), nodes, [(x.shape, D.float32)])


def test_a_replayed_dynamic_value_is_inferred_once_and_a_bad_one_is_still_refused():
    x, plan = _slice_plan()
    for start in (2, 3, 2, 3):  # a loop over rows: each row checked once
        plan.check_dynamic({0: {"starts": [start, 0], "stops": [start + 1, 4]}})
    assert len(plan._dyn_ok) == 2
    with pytest.raises(ProtocolError, match="slice bounds"):
        plan.check_dynamic({0: {"starts": [7, 0], "stops": [8, 4]}})
    with pytest.raises(ProtocolError, match="the plan holds"):  # a row of another length
        plan.check_dynamic({0: {"starts": [2, 0], "stops": [4, 4]}})
    plan.check_dynamic({0: {"starts": [1, 0], "stops": [2, 4]}})
    assert len(plan._dyn_ok) == 3
    with pytest.raises(ProtocolError, match="list of ints"):  # True equals 1 but is no int: checked, refused
        plan.check_dynamic({0: {"starts": [True, 0], "stops": [2, 4]}})
    got = X.run_plan(NumpyBackend().open(0), plan, [x], [7, 8], {0: {"starts": [4, 0], "stops": [5, 4]}}, [],
                     set(plan.node_slot))
    np.testing.assert_array_equal(got[8], x[4:5] * x[4:5])


def _prims() -> tuple[list, list, list]:
    """A fragment of primitive nodes (a constant, inputs used twice in one node, a view) and one that fails its
    inference (a matmul of a (3,) vector by a (4,) one), with a dependent."""
    x = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    c = np.array([True, False, True])
    nodes = [["full", [], {"shape": [3], "dtype": "float32", "value": 2.0}], ["mul", [-1, -1], None],
             ["where", [-2, 1, 1], None], ["add", [2, 0], None], ["reshape", [3], {"shape": [3, 1]}],
             ["matmul", [-1, 0], None], ["matmul", [-1, -3], None], ["neg", [6], None]]
    return nodes, [x, c, np.ones(4, dtype=np.float32)], [(x.shape, D.float32), (c.shape, D.bool_), ((4,), D.float32)]


def test_a_primitive_node_met_first_is_planned_as_the_op_table_builds_it(monkeypatch):
    """A primitive node expanded for the first time is planned straight from the op table's inference (no builder
    layers), and remembered: its step, and the plan that meets it again, are the builder's."""
    from tensorwire.protocol.graph import ExpandingBuilder, Value

    monkeypatch.setattr(X, "_EXPANSIONS", OrderedDict())
    nodes, ext, metas = _prims()
    dev = NumpyDevice(NumpyBackend(), 0)
    first = X.compile_plan(dev, nodes, metas)
    g = ExpandingBuilder()
    vals: list = []
    for op, refs, attrs in nodes[:6]:
        vals.append(g.op(op, *[Value(*metas[-r - 1], -r - 1) if r < 0 else vals[r] for r in refs], **(attrs or {})))
    steps = first.program.steps
    assert [(s.op, s.attrs, s.shape, s.dtype) for s in steps] == [(n[0], n[2], n[3], n[4]) for n in g.nodes]
    assert [s.in_meta for s in steps] == [tuple((vals[r].shape, vals[r].dtype) if r >= 0 else metas[-r - 1]
                                                for r in n[1]) for n in nodes[:6]]
    assert [s.ins for s in steps] == [(), (0, 0), (1, 4, 4), (5, 3), (6,), (0, 3)]
    assert first.failed_nodes == [6, 7] and first.nslots == len(ext) + len(steps)
    assert sorted(first.step_memos) == list(range(len(steps)))  # (each remembered as it was planned)
    again = X.compile_plan(dev, nodes, metas)  # every node from its remembered expansion
    assert [(s.op, s.ins, s.attrs, s.shape, s.dtype, s.out, s.in_meta) for s in again.program.steps] == [
        (s.op, s.ins, s.attrs, s.shape, s.dtype, s.out, s.in_meta) for s in steps]
    assert all(again.step_memos[k] is first.step_memos[k] for k in range(len(steps)))
    outs = list(range(100, 100 + len(nodes)))
    for plan in (first, again):
        got = X.run_plan(dev, plan, list(ext), outs, {}, [], set(plan.node_slot) - {None})
        np.testing.assert_array_equal(got[103], np.where(ext[1], ext[0] * ext[0], ext[0] * ext[0]) + 2)
        assert isinstance(got[106], X.Fail) and got[106].err["code"] != DependencyFailed.code
        assert got[107].err["code"] == DependencyFailed.code


def test_a_replays_whole_dynamic_values_pass_once_checked_and_only_with_the_same_types():
    x, plan = _slice_plan()
    for _ in range(3):  # a step's replay sends its plan the same values: checked once, remembered whole
        plan.check_dynamic({0: {"starts": [2, 0], "stops": [3, 4]}})
    assert len(plan._dyn_seen) == 1
    with pytest.raises(ProtocolError, match="list of ints"):  # equal to 2, but a float: not the values checked
        plan.check_dynamic({0: {"starts": [2.0, 0], "stops": [3, 4]}})
    with pytest.raises(ProtocolError, match="list of ints"):
        plan.check_dynamic({0: {"starts": [True, 0], "stops": [2, 4]}})
    assert len(plan._dyn_seen) == 1
    for k in range(2 * X.MAX_DYN_SEEN):  # bounded
        plan.check_dynamic({0: {"starts": [k % 6, 0], "stops": [k % 6 + 1, 4]}, 1: {"tag": k}})
    assert len(plan._dyn_seen) == X.MAX_DYN_SEEN
