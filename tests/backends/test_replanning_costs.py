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
from tensorwire.protocol.errors import ProtocolError

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


def test_a_remembered_expansion_is_specialized_once_for_every_plan_it_is_in(monkeypatch):
    monkeypatch.setattr(X, "_EXPANSIONS", OrderedDict())
    dev = _CountingDevice()
    ext = _mixed_inputs(10)
    first = X.compile_plan(dev, MIXED, _metas(ext))  # expanded afresh: remembered
    want = _run(dev, first, ext)
    assert dev.specialized == len(first.program.steps)
    second = X.compile_plan(dev, MIXED, _metas(ext))  # from the remembered expansions: specialized once more
    assert len(second.step_memos) == len(second.program.steps)
    _run(dev, second, ext)
    before = dev.specialized
    assert before == 2 * len(first.program.steps)
    for n in (10, 11):  # the same again, then a new batch size: only the batch's nodes are new
        ext = _mixed_inputs(n)
        plan = X.compile_plan(dev, MIXED, _metas(ext))
        got = _run(dev, plan, ext)
        new_steps = len(plan.program.steps) - len(plan.step_memos)
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
