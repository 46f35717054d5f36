"""What a replayed batch costs the worker besides its kernels (issue 37): the straight-line runner becomes generated
statements after a few runs and must run exactly as its loop did (values, frees, the early answer, errors); a plan
remembers which slots a batch keeps by the outputs it released; a session's ledger counts each allocation once,
a batch's buffers at a time as one by one."""

from __future__ import annotations

import numpy as np
import pytest

from tensorwire.backends import executor as X
from tensorwire.backends.cpu import NumpyBackend
from tensorwire.backends.quota import Ledger
from tensorwire.protocol import dtypes as D

NODES = [["mul", [-1, -2], None], ["exp", [0], None], ["add", [1, -1], None], ["sum", [2], {"dims": [0]}],
         ["neg", [3], None]]
OUTS = [10, 11, 12, 13, 14]


def _plan(dev, ext):
    return X.compile_plan(dev, NODES, [(a.shape, D.float32) for a in ext])


def _inputs(k: int = 0):
    return [np.linspace(0, 1 + k, 64, dtype=np.float32), np.full(64, 0.5 + k, np.float32)]


def _runs(dev, plan, times: int, keep: frozenset):
    """``times`` runs of the plan, each on new inputs: (its result, the env the early answer saw)."""
    out = []
    fetched = plan.node_slot[0]
    for k in range(times):
        ext = _inputs(k)
        seen: list = []

        def answer(env, seen=seen):
            seen.append((np.array(env[fetched]), env[plan.node_slot[3]] is None))

        result = X.run_plan(dev, plan, ext, OUTS, {}, [], keep, None, ([fetched], answer))
        out.append((ext, result, seen))
    return out


def test_the_generated_runner_gives_what_the_loop_gave_and_answers_at_the_same_step():
    dev = NumpyBackend().open(0)
    plan = _plan(dev, _inputs())
    keep = frozenset({plan.node_slot[0], plan.node_slot[4]})
    runs = _runs(dev, plan, X.GENERATE_AFTER + 3, keep)
    run = plan.runners[keep]
    for ext, result, seen in runs:
        x, y = ext
        a = x * y
        assert sorted(result) == [10, 14]
        np.testing.assert_allclose(result[10], a, rtol=1e-6)
        np.testing.assert_allclose(result[14], -(np.exp(a) + x).sum(), rtol=1e-5)
        assert len(seen) == 1 and seen[0][1] is True  # answered before the sum was made
        np.testing.assert_allclose(seen[0][0], a, rtol=1e-6)
    # the runs after GENERATE_AFTER went through the generated statements: they leave the env as the loop does
    envs = []
    for r in (X._looped(run.prog), run):
        env = [None] * plan.nslots
        env[:2] = _inputs()
        r(env, {}, [])
        envs.append(env)
    assert [v is None for v in envs[0]] == [v is None for v in envs[1]]
    assert {i for i, v in enumerate(envs[1]) if v is not None} == set(keep)
    for a, b in zip(*envs):
        if a is not None:
            np.testing.assert_array_equal(a, b)


def test_a_failing_step_in_the_generated_runner_falls_back_to_the_step_by_step_run():
    dev = NumpyBackend().open(0)
    plan = _plan(dev, _inputs())
    keep = frozenset({plan.node_slot[4]})
    _runs(dev, plan, X.GENERATE_AFTER + 1, keep)
    ext = [np.linspace(0, 1, 64, dtype=np.float32), np.ones(3, np.float32)]  # (a shape the kernels cannot take)
    got = X.run_plan(dev, plan, ext, OUTS, {}, [], keep, None)
    assert isinstance(got[14], X.Fail)  # named at its node by the interpreter
    assert got[14].err.get("origin") is not None or got[14].err.get("node") is not None


def test_plans_of_one_structure_share_their_generated_code():
    dev = NumpyBackend().open(0)
    small, large = _inputs(), [np.ones(256, np.float32), np.ones(256, np.float32)]
    p1, p2 = _plan(dev, small), _plan(dev, large)
    keep1 = frozenset({p1.node_slot[4]})
    keep2 = frozenset({p2.node_slot[4]})
    before = len(X._GENERATED)
    r1 = X._generated(X._runner(dev, p1, keep1).prog)
    r2 = X._generated(X._runner(dev, p2, keep2).prog)
    assert r1.__code__ is r2.__code__
    assert len(X._GENERATED) <= before + 1


@pytest.mark.parametrize("kept", [None, [0, 3, 4]])
def test_kept_slots_leave_out_what_the_batch_released_and_are_remembered(kept):
    dev = NumpyBackend().open(0)
    plan = _plan(dev, _inputs())
    slots = plan.node_slot
    nodes = range(len(OUTS)) if kept is None else kept
    assert plan.kept_slots(OUTS, kept, None) == frozenset(slots[j] for j in nodes)
    released = [11, 13, 99]  # (99: an id of an earlier batch)
    want = frozenset(slots[j] for j in nodes if OUTS[j] not in released)
    assert plan.kept_slots(OUTS, kept, released) == want
    # the next replay has new ids, the same ones released: the same answer, from the cache
    outs2 = [o + 100 for o in OUTS]
    assert plan.kept_slots(outs2, kept, [111, 113]) is plan.kept_slots(OUTS, kept, released)
    assert plan.kept_slots(outs2, kept, [110]) == frozenset(slots[j] for j in nodes if j != 0)
    for k in range(2 * X.MAX_KEEPS_PER_PLAN):  # bounded
        plan.kept_slots(OUTS, kept, [OUTS[k % len(OUTS)], 1000 + k])
    assert len(plan._keeps) <= X.MAX_KEEPS_PER_PLAN


def test_replays_keeping_the_same_slots_share_one_kept_with_its_pairs_slots_and_peak():
    dev = NumpyBackend().open(0)
    plan = _plan(dev, _inputs())
    slots = plan.node_slot
    first = plan.kept(OUTS, None, {11, 99})
    # the next replay: new ids, the same output released (a list or a set)
    again = plan.kept([o + 100 for o in OUTS], None, [111, 5])
    assert again is first
    assert first.keep == frozenset(slots[j] for j in range(len(OUTS)) if j != 1) - {None}
    want = tuple((j, s) for j, s in enumerate(slots) if s is not None and s in first.keep)
    assert first.pairs == want and first.slot_of == dict(want)
    assert plan.kept_pairs(first.keep) is first.pairs
    assert first.peak(plan) == plan.peak(first.keep) == X.peak_bytes(plan.program.steps, first.keep)
    # another release that keeps the same slots (if any) shares the object; another set gets its own
    other = plan.kept(OUTS, None, None)
    assert (other is first) == (other.keep == first.keep)
    result = X.run_plan(dev, plan, _inputs(), OUTS, {}, [], first.keep)
    assert set(result) == {OUTS[j] for j, _ in first.pairs}


def test_a_plans_run_warns_of_nothing_and_leaves_numpys_error_state_as_it_was():
    dev = NumpyBackend().open(0)
    nodes = [["div", [-1, -2], None], ["exp", [0], None]]
    plan = X.compile_plan(dev, nodes, [((4,), D.float32), ((4,), D.float32)])
    before = np.geterr()
    with np.errstate(all="raise"):
        for _ in range(X.GENERATE_AFTER + 2):  # (the looped runner, then the generated one)
            got = X.run_plan(dev, plan, [np.array([1, -1, 0, 100], np.float32), np.zeros(4, np.float32)], [0, 1],
                             {}, [], frozenset(plan.node_slot))
            assert np.isinf(got[1][0]) and np.isnan(got[0][2])
            assert np.geterr()["divide"] == "raise"
    assert np.geterr() == before


def test_the_ledger_counts_an_allocation_once_whether_added_one_by_one_or_a_batch_at_a_time():
    dev = NumpyBackend().open(0)
    a = np.ones(100, np.float32)
    view = a.reshape(10, 10)
    b = np.ones(25, np.float64)
    one, batch = Ledger(dev), Ledger(dev)
    for buf in (a, view, b, a):
        one.add(buf)
    batch.add_all([a, view, b, a])
    assert one.used == batch.used == 400 + 200
    assert one.owners == batch.owners
    one.remove(a)
    one.remove(view)
    batch.remove_all([a, view])
    assert one.used == batch.used == 600  # (a third handle on a's allocation is left)
    one.remove(a)
    batch.remove_all([a, a[:50]])  # (a view never added takes off its allocation's handle, as remove does)
    one.remove(a[:50])
    assert one.used == batch.used == 200
    one.remove(b)
    batch.remove_all([b, b])  # (taken off already: nothing more changes)
    assert one.used == batch.used == 0 and not one.owners and not batch.owners


def test_the_ledger_agrees_with_a_handle_count_per_allocation_over_random_batches():
    """Batches of fresh arrays, views of each other and of held arrays, repeats, and removals of handles never added
    or already gone: the ledger holds what counting handles per allocation one at a time holds."""
    dev = NumpyBackend().open(0)
    rng = np.random.default_rng(7)
    ledger = Ledger(dev)
    ref: dict = {}  # allocation key -> [handles, bytes]
    live: list = []  # buffers with a handle on them (a buffer may be listed more than once)

    def key(buf):
        return dev.storage(buf)

    for _ in range(400):
        batch = []
        for _ in range(int(rng.integers(0, 12))):
            pick = rng.random()
            if pick < 0.5 or not live:
                batch.append(np.zeros(int(rng.integers(1, 64)), np.float32))
            elif pick < 0.8:
                src = live[int(rng.integers(len(live)))]
                batch.append(src.reshape(-1)[: max(1, src.size // 2)])
            else:
                batch.append(batch[-1] if batch else live[int(rng.integers(len(live)))])
        if rng.random() < 0.5:
            ledger.add_all(batch)
            for b in batch:
                k, n = key(b)
                ref.setdefault(k, [0, n])[0] += 1
            live.extend(batch)
        else:
            gone = [live.pop(int(rng.integers(len(live)))) for _ in range(min(len(live), int(rng.integers(0, 8))))]
            gone += batch[:2]  # (never added: their allocation loses a handle if it is counted, as remove does)
            ledger.remove_all(gone)
            for b in gone:
                k, _ = key(b)
                if k in ref:
                    ref[k][0] -= 1
                    if ref[k][0] <= 0:
                        del ref[k]
        assert ledger.used == sum(n for _, n in ref.values())
        assert ledger.owners == ref


def test_the_ledger_counts_handles_held_and_dropped_by_id_as_one_by_one():
    """``hold`` (a batch's results by handle id) and ``drop`` (released ids) keep the counts that ``add``/``remove``
    one buffer at a time keep: fresh arrays, views of each other and of held ones, one array under several handles,
    ids dropped twice, ids never held, and a handle named twice in one release."""
    dev = NumpyBackend().open(0)
    rng = np.random.default_rng(11)
    ledger, one = Ledger(dev), Ledger(dev)
    held: dict = {}  # handle id -> buffer
    next_id = 0
    for _ in range(500):
        if rng.random() < 0.55 or not held:
            batch = {}
            for _ in range(int(rng.integers(0, 10))):
                pick = rng.random()
                if pick < 0.5 or not held:
                    buf = np.zeros(int(rng.integers(1, 64)), np.float32)
                elif pick < 0.8:
                    src = list(held.values())[int(rng.integers(len(held)))]
                    buf = src.reshape(-1)[: max(1, src.size // 2)]
                else:  # (one array under another handle)
                    buf = list({**held, **batch}.values())[int(rng.integers(len(held) + len(batch)))]
                batch[next_id] = buf
                next_id += 1
            ledger.hold(batch)
            for b in batch.values():
                one.add(b)
            held.update(batch)
        else:
            ids = list(held)
            gone = [ids[int(rng.integers(len(ids)))] for _ in range(int(rng.integers(0, 8)))]
            gone += [next_id + 1000, gone[0]] if gone else [next_id + 1000]  # (never held; named twice)
            ledger.drop(gone)
            for i in dict.fromkeys(gone):
                if i in held:
                    one.remove(held.pop(i))
        assert ledger.used == one.used
        assert ledger.owners == one.owners
    ledger.drop(list(held))
    assert ledger.used == 0 and not ledger.owners
