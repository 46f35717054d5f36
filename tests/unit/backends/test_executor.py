"""A fetch answered before the rest of its batch runs: the executor calls the worker back once the fetched values are
made (``run_plan``'s ``answer``, ``execute``'s ``answer_after``), by every kind of runner, and not when the run has
gone wrong before that point. The end-to-end behaviour (a read loss comes back while the backward pass runs, errors
after it surface at the next read) is in tests/client/test_pipelining.py and test_compile.py."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.cpu import CompiledBackend, NumpyBackend, compiled
from tensorwire.protocol import dtypes as D

# node 0 is fetched; nodes 1-3 are the rest of the batch
NODES = [["mul", [-1, -2], None], ["exp", [0], None], ["add", [1, -1], None], ["sum", [2], {"dims": [0]}]]
OUTS = [10, 11, 12, 13]


def _inputs():
    return [np.linspace(0, 1, 256, dtype=np.float32), np.full(256, 0.5, np.float32)]


def _expected(x, y):
    a = x * y
    return {10: a, 13: (np.exp(a) + x).sum()}


def _run(dev, plan, ext, answered: list):
    """Run the plan answering node 0; record what the run had made when the answer was called."""
    slot = {j: plan.node_slot[j] for j in range(len(NODES))}

    def answer(env):
        answered.append({"fetched": np.array(env[slot[0]]), "sum made": env[slot[3]] is not None})

    keep = {plan.node_slot[0], plan.node_slot[3]}
    return X.run_plan(dev, plan, list(ext), OUTS, {}, [], keep, None, ([slot[0]], answer))


def _check(dev, hot: bool = False):
    ext = _inputs()
    plan = X.compile_plan(dev, NODES, [(a.shape, D.float32) for a in ext], hot=hot)
    answered: list = []
    result = _run(dev, plan, ext, answered)
    want = _expected(*ext)
    assert len(answered) == 1
    assert answered[0]["sum made"] is False  # called before the rest ran
    np.testing.assert_allclose(answered[0]["fetched"], want[10], rtol=1e-6)
    np.testing.assert_allclose(result[10], want[10], rtol=1e-6)
    np.testing.assert_allclose(result[13], want[13], rtol=1e-5)
    return plan


def test_the_straight_line_runner_answers_once_the_fetched_value_is_made():
    _check(NumpyBackend().open(0))


@pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")
def test_the_compiled_runner_answers_after_the_kernel_that_makes_the_fetched_value():
    plan = _check(CompiledBackend(min_work=0, large_runs=0).open(0))
    run = next(iter(plan.runners.values()))
    assert getattr(run, "prog", None) is None  # the fused C kernels ran, not numpy's
    assert set(run.producers) >= {plan.node_slot[0], plan.node_slot[3]}


def test_a_value_made_before_the_batch_is_answered_before_it_runs():
    dev = NumpyBackend().open(0)
    ext = _inputs()
    plan = X.compile_plan(dev, NODES, [(a.shape, D.float32) for a in ext])
    seen = []
    X.run_plan(dev, plan, list(ext), OUTS, {}, [], {plan.node_slot[3]}, None,
               ([0], lambda env: seen.append(env[plan.node_slot[0]])))  # slot 0: the first input
    assert seen == [None]  # nothing had run yet


def test_a_run_that_fails_before_the_answer_point_answers_nothing_early():
    """The prepared runner raises on the bad index (before the fetched node): the interpreter runs the plan again,
    and the caller answers at the end, with the error. (The same for a node that failed when the plan was made.)"""
    dev = NumpyBackend().open(0)
    nodes = [["gather", [-1, -2], {"dim": 0}], ["exp", [0], None]]
    ext = [np.arange(4.0, dtype=np.float32), np.array([9], dtype=np.int64)]
    plan = X.compile_plan(dev, nodes, [(a.shape, D.float32 if a.dtype == np.float32 else D.int64) for a in ext])
    seen = []
    result = X.run_plan(dev, plan, ext, [5, 6], {}, [], set(plan.node_slot) - {None}, None,
                        ([plan.node_slot[1]], seen.append))
    assert seen == []
    assert isinstance(result[6], X.Fail) and isinstance(result[5], X.Fail)
    bad = X.compile_plan(dev, [["no_such_op", [-1], None], ["exp", [-1], None]], [((4,), D.float32)])
    assert bad.failed_nodes == [0]
    result = X.run_plan(dev, bad, ext[:1], [5, 6], {}, [], {bad.node_slot[1]}, None,
                        ([bad.node_slot[1]], seen.append))
    assert seen == [] and isinstance(result[5], X.Fail)
    np.testing.assert_allclose(result[6], np.exp(ext[0]))


def test_the_interpreter_yields_the_answer_after_the_step_that_makes_the_fetched_value():
    dev = NumpyBackend().open(0)
    ext = _inputs()
    plan = X.compile_plan(dev, NODES, [(a.shape, D.float32) for a in ext])
    made = plan.slot_steps()
    keep = {plan.node_slot[0], plan.node_slot[3]}
    gen = X.execute(dev, plan, list(ext), OUTS, {}, [], keep, None, made[plan.node_slot[0]])
    ev = next(gen)
    assert ev[0] == "answer"
    env = ev[1]
    np.testing.assert_allclose(env[plan.node_slot[0]], _expected(*ext)[10], rtol=1e-6)
    assert env[plan.node_slot[3]] is None  # the rest runs after the answer
    with pytest.raises(StopIteration) as stop:
        next(gen)
    np.testing.assert_allclose(stop.value.value[13], _expected(*ext)[13], rtol=1e-5)


def test_the_interpreter_answers_at_the_end_when_a_step_failed_before_the_answer_point():
    dev = NumpyBackend().open(0)
    nodes = [["gather", [-1, -2], {"dim": 0}], ["exp", [-1], None], ["sum", [1], {"dims": [0]}]]
    ext = [np.arange(4.0, dtype=np.float32), np.array([9], dtype=np.int64)]
    plan = X.compile_plan(dev, nodes, [((4,), D.float32), ((1,), D.int64)])
    gen = X.execute(dev, plan, ext, [5, 6, 7], {}, [], set(plan.node_slot) - {None}, None,
                    plan.slot_steps()[plan.node_slot[1]])
    with pytest.raises(StopIteration) as stop:  # no "answer" event: the failed gather comes first
        next(gen)
    result = stop.value.value
    assert isinstance(result[5], X.Fail)
    np.testing.assert_allclose(result[7], np.exp(np.arange(4.0)).sum(), rtol=1e-6)
