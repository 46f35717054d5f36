"""A replay's straight-line runner leaves out the steps whose values the run does not keep and no kept value needs
(issue 37: a char-RNN's forward makes an output a letter and its loss reads only the last one): the kept values are
those of a run of every step, the frees of the steps left out still happen, and what a client could not see before
(the error of a step nothing kept) it cannot see now either; ops that read more than their inputs always run."""

from __future__ import annotations

import numpy as np

from tensorwire.backends import executor as X
from tensorwire.backends.cpu import NumpyBackend
from tensorwire.protocol import dtypes as D

# x -> exp -> [log_softmax -> sum: not kept] ; exp * x -> neg (kept)
NODES = [["exp", [-1], None], ["log_softmax", [0], {"dim": 1}], ["mul", [0, -1], None], ["sum", [1], {"dims": None}],
         ["neg", [2], None]]
OUTS = [10, 11, 12, 13, 14]


def _x(k: int = 0):
    return np.linspace(-1, 1 + k, 12, dtype=np.float32).reshape(3, 4)


def test_steps_nothing_kept_needs_are_left_out_and_the_kept_values_are_a_full_runs():
    dev = NumpyBackend().open(0)
    plan = X.compile_plan(dev, NODES, [((3, 4), D.float32)])
    slots = plan.node_slot
    keep = frozenset({slots[2], slots[4]})
    everything = frozenset(s for s in slots if s is not None)
    for k in range(X.GENERATE_AFTER + 2):  # (the looped runner, then the generated statements)
        got = X.run_plan(dev, plan, [_x(k)], OUTS, {}, [], keep)
        full = X.run_plan(dev, plan, [_x(k)], OUTS, {}, [], everything)
        assert sorted(got) == [12, 14]
        for i in got:
            np.testing.assert_array_equal(got[i], full[i])
    ran = [s.op for s in plan.runners[keep].steps]
    assert "log_softmax" not in ran and "sum" not in ran and ran.count("neg") == 1
    assert len(plan.runners[keep].prog) == len(ran) < len(plan.program.steps)
    assert len(plan.runners[everything].prog) == len(plan.program.steps)
    # the slots the run let go of are let go of as before: only the kept ones hold a value at the end
    env = [None] * plan.nslots
    env[0] = _x()
    plan.runners[keep](env, {}, [])
    assert {i for i, v in enumerate(env) if v is not None} == set(keep)


def test_a_step_nothing_keeps_fails_unseen_as_before_and_the_kept_values_come_back():
    dev = NumpyBackend().open(0)
    nodes = [["exp", [-1], None], ["gather", [0, -2], {"dim": 1}], ["neg", [0], None]]
    plan = X.compile_plan(dev, nodes, [((2, 4), D.float32), ((2, 1), D.int64)])
    keep = frozenset({plan.node_slot[2]})
    bad = [np.ones((2, 4), np.float32), np.array([[9], [0]], np.int64)]  # (an index out of range)
    got = X.run_plan(dev, plan, bad, [10, 11, 12], {}, [], keep)
    assert list(got) == [12]
    np.testing.assert_array_equal(got[12], -np.exp(np.ones((2, 4), np.float32)))
    assert "gather" not in [s.op for s in plan.runners[keep].steps]
    # kept, the gather runs and its error comes back, named at its node
    every = frozenset(plan.node_slot)
    failed = X.run_plan(dev, plan, bad, [10, 11, 12], {}, [], every)
    assert isinstance(failed[11], X.Fail) and not isinstance(failed[12], X.Fail)


def test_steps_that_read_more_than_their_inputs_run_though_nothing_keeps_them():
    dev = NumpyBackend().open(0)
    nodes = [["rand", [], {"shape": [4], "dtype": "float32", "seed": 1, "offset": 0}], ["neg", [-1], None]]
    plan = X.compile_plan(dev, nodes, [((4,), D.float32)])
    keep = frozenset({plan.node_slot[1]})
    X.run_plan(dev, plan, [np.ones(4, np.float32)], [10, 11], {}, [], keep)
    assert [s.op for s in plan.runners[keep].steps][0] == plan.program.steps[0].op
    assert len(plan.runners[keep].prog) == len(plan.program.steps)
