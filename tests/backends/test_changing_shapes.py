"""A loop whose batches change shape (issue 37): every step is a new plan on the worker (the same structure at new
sizes). Such a structure is compiled once, not once a shape (backends/hot.py); a new shape expands only the nodes
whose inputs changed (executor._expand); the plans it leaves interpreted are cached at what they hold
(backends/plancache.py). Counted, not timed."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends import hot
from tensorwire.backends.cpu import CompiledBackend, NumpyBackend, compiled
from tensorwire.backends.plancache import INTERPRETED_STEP_BYTES, PLAN_STEP_BYTES, PlanCache, plan_bytes
from tensorwire.protocol import dtypes as D

from .test_hot_plans import ADAM, COMPILE_S, _adam_inputs, _run

needs_cc = pytest.mark.skipif(compiled.runtime() is None, reason=f"no C compiler: {compiled.why_not()}")

#: an Adam update of a [16, 8] weight (inputs 0-5, as ADAM's) beside a mean over a batch [n, 8] (input 6)
MIXED = ADAM + [["mean", [-7], {"dims": [0]}], ["mul", [3, 3], None]]


def _metas(arrays) -> list:
    return [(np.shape(a), D.float32) for a in arrays]


def _mixed_inputs(n: int) -> list:
    rng = np.random.default_rng(n)
    m, g, v, p = (rng.random((16, 8), dtype=np.float32) for _ in range(4))
    return [m, g, v, p, np.float32(0.01), np.float32(0.5), rng.random((n, 8), dtype=np.float32)]


@needs_cc
def test_a_structure_planned_at_many_shapes_compiles_once_not_once_a_shape():
    """A fragment large enough to compile is compiled after its first run; the same structure at other sizes waits
    to be hot in its own right (``hot_runs``), as a small fragment does: plans run once are never compiled."""
    dev = CompiledBackend(min_work=1 << 10, large_runs=1, hot_runs=50, trial_runs=0).open(0)
    plans = []
    for n in [4096 + 512 * i for i in range(6)]:
        ext = _adam_inputs(n)
        plan = X.compile_plan(dev, ADAM, _metas(ext))
        assert plan.tier is not None and not plan.hot
        _run(dev, plan, ext)
        plans.append(plan)
    first, rest = plans[0], plans[1:]
    assert first.tier.hot_runs == 1  # the first shape: compiled after its first run, as before
    assert first.tier.done.wait(COMPILE_S) and first.tier.take(first) and first.hot
    assert [p.tier.hot_runs for p in rest] == [50] * 5
    assert all(p.tier.runs == 1 and not p.tier.done.is_set() for p in rest)  # no compile started for them
    # once a structure has changed shape, a plan of it waits whatever its shape; a fragment planned again (a plan
    # the cache evicted, made again) waits too; one that differs in its attributes only is a fragment of its own
    assert X.compile_plan(dev, ADAM, _metas(_adam_inputs(4096))).tier.hot_runs == 50
    other = ADAM[:2]  # (another structure: other ops or wiring)
    assert [X.compile_plan(dev, other, _metas(_adam_inputs(4096))).tier.hot_runs for _ in range(3)] == [1, 50, 50]
    twin = [["adam_exp_avg", [-1, -2], {"beta1": 0.8, "weight_decay": 0}], ADAM[1]]
    assert X.compile_plan(dev, twin, _metas(_adam_inputs(4096))).tier.hot_runs == 1
    # where small fragments never compile (hot_runs 0), a structure that changes shape stays interpreted
    never = CompiledBackend(min_work=1 << 10, large_runs=1, hot_runs=0).open(0)
    assert X.compile_plan(never, ADAM, _metas(_adam_inputs(4096))).tier.hot_runs == 1
    assert X.compile_plan(never, ADAM, _metas(_adam_inputs(4608))).tier is None


@needs_cc
def test_a_first_shape_does_not_compile_once_its_structure_has_changed_shape():
    """A large fragment compiles after its first runs (``large_runs``) only while its structure has no other
    shapes: the first shape of a loop whose batches change shape is not compiled at its second run either (issue 37:
    a warm run compiled such plans, ~3-6 s of gcc each for a plan run once or twice); a fixed shape still is."""
    dev = CompiledBackend(min_work=1 << 10, large_runs=2, hot_runs=50).open(0)
    first_ext = _adam_inputs(4096)
    first = X.compile_plan(dev, ADAM, _metas(first_ext))
    assert first.tier.hot_runs == 2
    _run(dev, first, first_ext)
    second_ext = _adam_inputs(4608)
    second = X.compile_plan(dev, ADAM, _metas(second_ext))  # the structure at another shape
    assert second.tier.hot_runs == 50
    _run(dev, first, first_ext)  # its second run: it would compile now, but its structure changes shape
    assert first.tier.hot_runs == 50 and first.tier.runs == 2 and not first.tier.done.is_set()
    fixed = CompiledBackend(min_work=1 << 10, large_runs=2, hot_runs=50, trial_runs=0).open(0)  # (a device of its own)
    plan = X.compile_plan(fixed, ADAM, _metas(first_ext))  # the structure at one shape: compiled after two runs
    _run(fixed, plan, first_ext)
    assert not plan.tier.done.is_set()
    _run(fixed, plan, first_ext)
    assert plan.tier.done.wait(COMPILE_S) and plan.tier.take(plan) and plan.hot
    # nor does a fixed shape's plan if the device made more than CHURN other plans before its second run (a loop
    # whose fragments keep changing: each of them runs seldom)
    churned = X.compile_plan(fixed, ADAM[:2], _metas(first_ext))
    _run(fixed, churned, first_ext)
    x = [np.ones(4096, np.float32)]
    for k in range(hot.CHURN + 1):  # other structures (chains of squares), planned once each
        X.compile_plan(fixed, [["mul", [-1, -1], None]] + [["mul", [i, i], None] for i in range(k)], _metas(x))
    _run(fixed, churned, first_ext)
    assert churned.tier.hot_runs == 50 and not churned.tier.done.is_set()
    # where small fragments never compile (hot_runs 0), such a first shape never compiles either
    never = CompiledBackend(min_work=1 << 10, large_runs=2, hot_runs=0).open(0)
    twin = [["adam_exp_avg", [-1, -2], {"beta1": 0.7, "weight_decay": 0}], ADAM[1], ADAM[2]]
    a = X.compile_plan(never, twin, _metas(first_ext))
    _run(never, a, first_ext)
    X.compile_plan(never, twin, _metas(second_ext))
    for _ in range(3):
        _run(never, a, first_ext)
    assert a.tier.runs == 4 and not a.tier.done.is_set()


@needs_cc
def test_a_first_shape_does_not_compile_once_another_structure_has_changed_shape():
    """A large fragment's first shape, run again before its own structure changes shape, does not compile at its
    second run when the device planned another structure at a new shape meanwhile: a loop whose batches change
    shape (issue 37: the char-level transformer's forward is a structure per batch size, its backward one structure
    that changes shape every step; three forwards compiled ~1 s of gcc each, run two or three times). Counted."""
    dev = CompiledBackend(min_work=1 << 10, large_runs=2, hot_runs=50, trial_runs=0).open(0)
    ext = _adam_inputs(4096)
    first = X.compile_plan(dev, ADAM, _metas(ext))
    assert first.tier.hot_runs == 2
    _run(dev, first, ext)
    x = [np.ones(4096, np.float32)]
    square = [["mul", [-1, -1], None]]
    X.compile_plan(dev, square, _metas(x))  # another structure, planned at one shape: nothing changed shape yet
    _run(dev, first, ext)
    assert first.tier.done.wait(COMPILE_S) and first.tier.take(first) and first.hot  # a fixed loop's: compiled
    second = X.compile_plan(dev, ADAM[:2], _metas(ext))  # (another structure)
    assert second.tier.hot_runs == 2
    _run(dev, second, ext)
    X.compile_plan(dev, square, _metas([np.ones(4608, np.float32)]))  # the other structure at a new shape
    _run(dev, second, ext)
    assert second.tier.hot_runs == 50 and second.tier.runs == 2 and not second.tier.done.is_set()


def _plan_sig(plan) -> list:
    return [(s.op, s.ins, s.shape, s.dtype, s.out, s.origin, s.dynamic, s.frees, s.in_meta) for s in
            plan.program.steps]


@pytest.mark.parametrize("backend", [NumpyBackend, pytest.param(CompiledBackend, marks=needs_cc)])
def test_a_new_batch_size_expands_only_the_nodes_whose_inputs_changed(monkeypatch, backend):
    """Planning the fragment at a second batch size expands the batch's nodes anew and takes the weight's update
    from the expansions remembered; the plan is the one a fresh expansion makes, and computes the same values."""
    monkeypatch.setattr(X, "_EXPANSIONS", OrderedDict())
    dev = backend().open(0)
    X.compile_plan(dev, MIXED, _metas(_mixed_inputs(10)))
    first = len(X._EXPANSIONS)
    assert first >= len(MIXED) - 1  # (mul(x, x) and a mul of two inputs differ: which inputs are one value)
    ext = _mixed_inputs(11)
    plan = X.compile_plan(dev, MIXED, _metas(ext))
    assert len(X._EXPANSIONS) - first == 1  # the mean of the new batch; its [8] square and Adam's updates reused
    monkeypatch.setattr(X, "_EXPANSIONS", OrderedDict())
    fresh = X.compile_plan(dev, MIXED, _metas(ext))
    assert _plan_sig(plan) == _plan_sig(fresh)
    outs = list(range(100, 100 + len(MIXED)))
    got = X.run_plan(dev, plan, list(ext), outs, {}, [], set(plan.node_slot))
    mean = ext[6].mean(0)
    np.testing.assert_allclose(got[outs[-1]], mean * mean, rtol=1e-6)
    want = X.run_plan(dev, fresh, list(ext), outs, {}, [], set(fresh.node_slot))
    for i in outs[:3]:  # Adam's updates, as the fresh plan computes them
        np.testing.assert_array_equal(got[i], want[i])


def test_the_same_value_twice_is_not_two_values():
    """``x * x`` and ``x * y`` (same metas) are remembered apart: the expansion's wiring follows its inputs."""
    dev = NumpyBackend().open(0)
    x, y = np.arange(4, dtype=np.float32), np.full(4, 3, np.float32)
    sq = X.compile_plan(dev, [["mul", [-1, -1], None]], _metas([x]))
    prod = X.compile_plan(dev, [["mul", [-1, -2], None]], _metas([x, y]))
    assert X.run_plan(dev, sq, [x], [9], {}, [], set(sq.node_slot))[9].tolist() == (x * x).tolist()
    assert X.run_plan(dev, prod, [x, y], [9], {}, [], set(prod.node_slot))[9].tolist() == (x * y).tolist()


@needs_cc
def test_an_interpreted_plan_is_cached_at_what_it_holds():
    """An interpreted plan is estimated at ``INTERPRETED_STEP_BYTES`` a step and node, a compiled one at
    ``PLAN_STEP_BYTES``: a session's share of the cache keeps that many more of a changing-shape loop's plans."""
    dev = CompiledBackend(min_work=1 << 20, hot_runs=2, trial_runs=0).open(0)
    ext = _adam_inputs()
    plan = X.compile_plan(dev, ADAM, _metas(ext))
    units = len(plan.program.steps) + len(plan.node_slot) + 1
    assert plan.interpreted and plan_bytes(plan) == units * INTERPRETED_STEP_BYTES
    cache = PlanCache(max_bytes=1 << 30, session_bytes=20 * units * INTERPRETED_STEP_BYTES)
    for no in range(40):
        cache.put(b"s", no, X.compile_plan(dev, ADAM, _metas(ext)))
    assert cache.session_plans(b"s") == 20 and cache.evictions == 20
    for _ in range(2):
        _run(dev, plan, ext)
    assert plan.tier.done.wait(COMPILE_S) and plan.tier.take(plan)  # compiled: its own kernels now
    assert not plan.interpreted
    assert plan_bytes(plan) == (len(plan.program.steps) + len(plan.node_slot) + 1) * PLAN_STEP_BYTES
    assert X.compile_plan(NumpyBackend().open(0), ADAM, _metas(ext)).interpreted  # numpy: always


def test_a_sessions_least_recently_used_plan_goes_first():
    dev = NumpyBackend().open(0)
    plan = X.compile_plan(dev, ADAM, _metas(_adam_inputs()))
    cache = PlanCache(max_bytes=1 << 30, session_bytes=3 * plan_bytes(plan))
    for no in (1, 2, 3):
        cache.put(b"s", no, plan)
    cache.put(b"t", 1, plan)  # another session's plans are not this one's to evict
    assert cache.get(b"s", 1) is plan
    cache.put(b"s", 4, plan)
    assert [no for no in (1, 2, 3, 4) if cache.get(b"s", no) is not None] == [1, 3, 4]
    assert cache.get(b"t", 1) is plan
