"""Pipelined submission: a step's work ships when the next op is recorded, and a fetched value is answered ahead of
the work recorded after it (that work still runs, and its errors surface at the next sync point)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn, optim

from ._ref import line_of

HERE = __file__


def _line_of(marker: str) -> int:
    return line_of(HERE, marker)


def test_optimizer_step_ships_when_the_next_op_is_recorded(session):
    p = nn.Parameter(tw.tensor(np.arange(4.0)))
    opt = optim.SGD([p], lr=0.5)
    p.grad = tw.ones(4, dtype=tw.float64)
    opt.step()
    step_nodes = {node[0] for node in session._pending}
    assert step_nodes  # step() itself only records
    y = p * 2  # the next op ships the step's work first, without waiting for it
    assert y._id in {node[0] for node in session._pending}
    assert not step_nodes & {node[0] for node in session._pending}
    np.testing.assert_array_equal(y.detach().numpy(), (np.arange(4.0) - 0.5) * 2)


def test_a_fetch_goes_out_ahead_of_later_work(session):
    x = tw.tensor(np.arange(6.0))
    a = x.sum()
    b = (x * 3).cumsum(0)  # recorded after a: shipped right behind a's fetch, not waited for
    assert a.item() == 15.0
    assert session._pending == []
    np.testing.assert_array_equal(b.numpy(), np.cumsum(np.arange(6.0) * 3))


def test_error_in_work_after_the_fetched_value_surfaces_at_the_next_sync(session):
    x = tw.arange(4)
    a = x.sum()
    bad = x[tw.tensor([0, 9])]  # MARK-late-bad
    assert a.item() == 6  # a does not depend on the bad gather
    with pytest.raises(IndexError) as info:
        bad.numpy()
    assert f"{HERE}:{_line_of('MARK-late-bad')}" in str(info.value)
    assert (x + 1).tolist() == [1, 2, 3, 4]  # and the session carries on


def test_temporaries_released_after_a_split_fetch_are_freed(session):
    gc.collect()  # tensors an earlier test's traceback kept (a cycle) go now, not in the middle of the count
    x = tw.tensor(np.ones(1000))
    session.synchronize()
    counts = []
    for _ in range(6):
        a = x.sum()
        t = x * 2  # recorded after a, dropped before the fetch: its release travels with the part that makes it
        del t
        assert a.item() == 1000.0
        counts.append(session.memory_stats()["devices"]["cpu:0"]["buffers"])
    assert len(set(counts)) == 1, counts


def test_training_loop_reading_the_loss_every_step_replays_its_plans(session):
    rng = np.random.default_rng(0)
    x = tw.tensor(rng.standard_normal((16, 5)))
    y = tw.tensor(rng.integers(0, 3, 16))
    tw.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3)).double()
    opt = optim.Adam(model.parameters(), lr=0.05)
    losses, plans = [], []
    for _ in range(8):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())  # the forward and its fetch go first; backward and Adam right behind
        plans.append(len(session._plans))
    assert plans[-1] == plans[2]  # the same two batches every step: both replayed from cached plans
    assert losses[-1] < losses[0]
    # the same loop read once at the end computes the same losses
    tw.manual_seed(0)
    model2 = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3)).double()
    opt2 = optim.Adam(model2.parameters(), lr=0.05)
    kept = []
    for _ in range(8):
        loss = nn.functional.cross_entropy(model2(x), y)
        opt2.zero_grad()
        loss.backward()
        opt2.step()
        kept.append(loss)
    assert [t.item() for t in kept] == losses


def test_recording_after_a_step_on_a_closed_session_says_it_is_closed(cluster):
    s = tw.Session(cluster.address)  # a second session, not the default one
    p = nn.Parameter(tw.tensor(np.ones(3), session=s))
    opt = optim.SGD([p], lr=0.1)
    p.grad = tw.tensor(np.ones(3), session=s)
    opt.step()
    s.close()
    with pytest.raises(tw.TensorwireError, match="closed"):
        (p * 2).detach().numpy()


def test_a_fetch_cut_across_devices(session):
    x = tw.tensor(np.arange(4.0), device="cpu:0")
    y = tw.tensor(np.ones(4), device="cpu:1")
    a = (x.to("cpu:1") + y).sum()  # fetched: its part crosses from cpu:0 to cpu:1
    b = (y * 5).to("cpu:0") + x  # recorded after it, back across
    c = a.to("cpu:0") * x
    assert a.item() == 10.0
    np.testing.assert_array_equal(b.numpy(), np.arange(4.0) + 5)
    np.testing.assert_array_equal(c.numpy(), np.arange(4.0) * 10)


def _spins_seen(monkeypatch) -> list:
    """The spin bound of each wait for an answer, on the relay (``spin_wait``) or a direct channel (``wait_alone``)."""
    from tensorwire import channels
    from tensorwire import session as session_mod

    spins = []
    relay, direct = session_mod.spin_wait, channels.wait_alone
    monkeypatch.setattr(session_mod, "spin_wait", lambda poll, s: (spins.append(s), relay(poll, s))[1])
    monkeypatch.setattr(channels, "wait_alone", lambda sock, s, others: (spins.append(s), direct(sock, s, others))[1])
    return spins


def test_the_client_spins_for_an_answer_only_when_little_work_is_queued_ahead(session, monkeypatch):
    """A fetch right behind one or two batches spins briefly (its answer comes soon); behind ten unanswered steps it
    blocks at once, leaving the cores to the services that run them."""
    from tensorwire import session as session_mod

    spins = _spins_seen(monkeypatch)
    monkeypatch.setattr(session_mod, "spare_core", lambda now: True)  # (a quiet host; a busy one: the next test)
    x = tw.tensor(np.arange(4.0))
    assert (x + 1).sum().item() == 10.0
    assert spins and spins[-1] == session_mod.CLIENT_SPIN_S
    y = x
    for _ in range(10):
        y = y + 1
        session.flush()  # a batch with no answer to wait for
    spins.clear()
    assert y.sum().item() == 46.0
    assert spins and spins[0] == 0.0
    spins.clear()
    assert (y * 2).sum().item() == 92.0  # the queue ran: spin again
    assert spins and spins[0] == session_mod.CLIENT_SPIN_S


def test_the_client_never_spins_on_a_host_whose_cores_are_busy(session, monkeypatch):
    """On an oversubscribed host (a load average over the cores plus one, ``/proc/loadavg``), a spinning client would
    take the core its answer's worker needs: it blocks at once."""
    from tensorwire import session as session_mod
    from tensorwire.protocol.service import core_is_spare

    assert core_is_spare(b"0.52 0.61 0.58 2/312 4123", 2) and core_is_spare(b"2.90 2.10 1.80 4/312 4123", 2)
    assert not core_is_spare(b"5.21 5.78 6.38 3/144 9965", 2) and not core_is_spare(b"3.10 1.0 1.0 1/144 9965", 2)
    assert core_is_spare(b"garbage", 2)  # (unreadable: as before, spin)
    spins = _spins_seen(monkeypatch)
    monkeypatch.setattr(session_mod, "spare_core", lambda now: False)
    x = tw.tensor(np.arange(4.0))
    assert (x + 1).sum().item() == 10.0
    assert spins and set(spins) == {0.0}


def _train(session, rows_of_step, steps: int):
    """A small model trained ``steps`` steps (its gradients clipped, AdamW), the batch's row count
    ``rows_of_step(k)``; over the last half of the steps, the session's messages and the nodes of the plans it made
    (a plan's nodes travel with its first batch), and the parameters after."""
    tw.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = optim.AdamW(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    channels, plan_nodes = session._plane.channels, session._plane.plan_nodes
    for k in range(steps):
        if k == steps // 2:
            sent, first_plan = sum(ch.sent for ch in channels.values()), max(plan_nodes, default=0) + 1
        x = tw.tensor(rng.standard_normal((rows_of_step(k), 8)), dtype=tw.float32)
        loss = (model(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    params = [p.detach().numpy() for p in model.parameters()]
    planned = sum(len(nodes) for plan, (nodes, _, _) in plan_nodes.items() if plan >= first_plan)
    return sum(ch.sent for ch in channels.values()) - sent, planned, params


def test_a_backward_pass_that_changes_shape_ships_alone(session):
    """A loop whose batches change shape every step makes a plan for every step's batch; once its backward pass has
    been in three new plans, it goes alone, and the clipping and update after it (the same shapes every step) are a
    batch whose plan is replayed: the plans made hold the forward and backward passes only. The values are the same
    either way."""
    import tensorwire.session as S

    half = 12
    msgs, planned, got = _train(session, lambda k: 3 + k, 2 * half)
    session._backward_plans.clear()
    split_after = S.SPLIT_AFTER_PLANS
    S.SPLIT_AFTER_PLANS = 10 ** 9  # (never split: the reference run)
    try:
        whole_msgs, whole_planned, want = _train(session, lambda k: 40 + k, 2 * half)
        _, _, want = _train(session, lambda k: 3 + k, 2 * half)
    finally:
        S.SPLIT_AFTER_PLANS = split_after
    assert msgs >= whole_msgs + half, (msgs, whole_msgs)  # (a message more a step: the update's)
    assert planned < 0.75 * whole_planned, (planned, whole_planned)  # (the update's nodes: not planned again)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_loop_of_fixed_shapes_keeps_one_message_a_step(session):
    """The same loop at a fixed batch shape: no plan after its first steps, and one message a step besides the
    forward pass shipped ahead (the backward pass and the update together)."""
    half = 10
    session._backward_plans.clear()  # (the test before may have split this model's backward pass)
    msgs, planned, _ = _train(session, lambda k: 6, 2 * half)
    assert planned == 0 and msgs <= 2 * half + 1, (planned, msgs)
    assert not any(n >= 3 for n in session._backward_plans.values())  # (nothing to split: one or two plans)
