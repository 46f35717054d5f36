"""``loss.backward()`` ships a large pending forward pass before it records the backward pass
(``Session.ship_forward``): the devices run the forward while the client records the rest of the step. The split
changes when work travels, not what it computes: the losses, gradients and updates are those of one batch a step,
answers come in order, and an error of the shipped forward still names the user's line."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn
from tensorwire import session as session_mod

from ._calls import counted
from ._ref import line_of

HERE = __file__


def _rnn_steps(session, steps: int, lengths=(3, 5, 4)) -> tuple[list, list]:
    """A char-RNN-like loop (a Python loop of cells, NLL loss, ``p.data.add_`` updates, ``loss.item()`` every step):
    its losses, and per step whether the forward pass left the pending batch at ``backward()`` (the steps after the
    first of each length: a first backward asks the autograd service for its graph, which ships the forward too)."""
    tw.manual_seed(0)
    rng = np.random.default_rng(1)
    examples = [rng.standard_normal((n, 1, 6)) for n in lengths]  # (step k reads example k % 3)
    i2h, i2o = nn.Linear(6 + 8, 8).double(), nn.Linear(6 + 8, 3).double()
    params = list(i2h.parameters()) + list(i2o.parameters())
    crit = nn.NLLLoss()
    losses, shipped = [], []
    for k in range(steps):
        n = lengths[k % len(lengths)]
        xs = tw.tensor(examples[k % len(lengths)])
        target = tw.tensor([k % len(lengths)])
        hidden = tw.zeros(1, 8, dtype=tw.float64)
        for p in params:
            p.grad = None
        for i in range(n):
            combined = tw.cat((xs[i], hidden), 1)
            hidden = i2h(combined)
            output = nn.functional.log_softmax(i2o(combined), dim=1)
        loss = crit(output, target)
        forward = {e[0] for e in session._pending}
        loss.backward()
        if k >= len(lengths):
            shipped.append(not forward & {e[0] for e in session._pending})
        for p in params:
            p.data.add_(p.grad.data, alpha=-0.1)
        losses.append(loss.item())
    return losses, shipped


def test_backward_ships_a_large_forward_first_and_computes_the_same(session, monkeypatch):
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 0)  # off: one batch a step
    one, shipped = _rnn_steps(session, 9)
    assert not any(shipped)
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 16)
    sent = session._n_async
    split, shipped = _rnn_steps(session, 9)
    assert all(shipped)  # every step's forward (20 nodes and more) went out at backward()
    assert session._n_async - sent >= 9  # ... and each step's rest, after it, as a message answered by no one
    assert split == one  # the same values, answered in the same order
    assert split[-1] < split[2]  # (the same example, learnt: the updates went in between, in order)


def test_the_loss_read_after_the_update_comes_with_the_forwards_answer(session, monkeypatch):
    """The shipped forward asks back for its live 0-d results: ``loss.item()`` after the update reads the loss from
    that answer (waiting for it if it has not come), and the backward pass and the update go out after it as a
    message answered by no one, instead of one whose answer the read waits behind."""
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 0)
    ref, _ = _rnn_steps(session, 6)
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 16)
    waited, seen = [], []
    wait, backward = session._wait, tw.Tensor.backward

    def counting_wait(q, *a, **k):
        waited.append(q)
        return wait(q, *a, **k)

    def watching_backward(self, *a, **k):  # (right after it: which answer brings the loss)
        backward(self, *a, **k)
        seen.append(session._ahead.get(self._id))

    monkeypatch.setattr(session, "_wait", counting_wait)
    monkeypatch.setattr(tw.Tensor, "backward", watching_backward)
    got, _ = _rnn_steps(session, 6)
    assert got == ref  # the same values, in the same order
    ahead = seen[3:]  # (the first step of each length asks the autograd service for its graph: no ahead there)
    assert all(q is not None for q in ahead), seen
    assert set(ahead) <= set(waited)  # each read waited for that answer (nothing else read it first here)...
    assert not session._ahead and not session._ahead_q  # ... and took it


def test_values_ahead_through_the_dispatcher_too(session, cluster, monkeypatch):
    """With no direct channel the forward and its answer go through the dispatcher (a ``result``, not a worker's
    ``done``): the read still takes its value from that answer, once, and the values are those of one batch."""
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 16)
    ref, _ = _rnn_steps(session, 6)
    relayed = tw.Session(cluster.address)
    relayed._plane.enabled = False
    try:
        with tw.use_session(relayed):
            got, shipped = _rnn_steps(relayed, 6)
        assert all(shipped) and got == ref
        assert not relayed._ahead and not relayed._ahead_q
    finally:
        relayed.close()


@pytest.mark.parametrize("unread_nodes,messages", [(1000, 0), (4, 1)])  # (no step ends in a sync here)
def test_answers_ahead_that_nobody_reads_stay_few(session, monkeypatch, unread_nodes, messages):
    """A loop that never reads its loss leaves no pile of unread answers at the worker (whose answer bounds would
    then drop answers someone waits for): past ``MAX_AHEAD`` the forward asks for nothing, and stays with the rest of
    its step unless it has ``SHIP_UNREAD_NODES``; the loop does not wait for the devices."""
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 8)
    monkeypatch.setattr(session_mod, "SHIP_UNREAD_NODES", unread_nodes)
    monkeypatch.setattr(session_mod, "MAX_AHEAD", 2)
    lin = nn.Linear(6, 6).double()
    x = tw.tensor(np.random.default_rng(0).standard_normal((4, 6)))
    losses = []
    sent = []
    with contextlib.ExitStack() as counting:
        for step in range(12):
            sent.append(session._n_async)
            h = x
            for _ in range(4):
                h = lin(h).tanh()
            loss = h.square().sum()
            loss.backward()
            for p in lin.parameters():
                p.data.add_(p.grad.data, alpha=-0.01)
                p.grad = None
            losses.append(loss)
            assert len(session._ahead_q) <= 2
            if step == 0:  # (the first backward asked the autograd service for its plan: counted from here)
                waits, _ = counting.enter_context(counted(session, "_wait"))
        assert waits[0] == 0  # (the loop never waited for the devices)
    assert {b - a for a, b in zip(sent[4:], sent[5:])} == {messages}  # (messages a step, past the unread answers)
    assert len(session._ahead_q) == 2
    assert losses[-1].item() < losses[0].item()  # (both read: the newest fetched, the oldest from its answer)


def test_a_small_forward_waits_for_the_rest_of_its_step(session, monkeypatch):
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 1000)
    _, shipped = _rnn_steps(session, 3)
    assert not any(shipped)


def test_the_split_is_the_same_every_time_the_same_step_runs(session, monkeypatch):
    """A split that moved from step to step would make new plans on the worker each time: the same three
    step shapes replayed reuse the plans their first steps made."""
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 16)
    _rnn_steps(session, 6)
    plans = len(session._plans)
    _rnn_steps(session, 6)
    assert len(session._plans) == plans


def test_an_error_in_the_shipped_forward_names_the_users_line(session, monkeypatch):
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 4)
    w = nn.Parameter(tw.tensor(np.arange(5.0)))

    def step(index):
        h = w
        for _ in range(6):
            h = (h * 1.5).tanh()
        loss = h[tw.tensor(index)].sum()  # MARK-bad-gather
        forward = {e[0] for e in session._pending}
        loss.backward()  # (the first time its graph comes from the autograd service: the forward goes out then too)
        assert not forward & {e[0] for e in session._pending}  # the forward went out
        w.data.add_(w.grad.data, alpha=-0.1)
        w.grad = None
        return loss.item()

    assert step([0, 4]) == pytest.approx(np.tanh(np.tanh(np.tanh(np.tanh(np.tanh(np.tanh(
        np.array([0.0, 4.0]) * 1.5) * 1.5) * 1.5) * 1.5) * 1.5) * 1.5).sum())
    with pytest.raises(IndexError) as info:
        step([0, 9])
    assert f"{HERE}:{line_of(HERE, 'MARK-bad-gather')}" in str(info.value)
    assert (tw.ones(3) * 2).tolist() == [2.0, 2.0, 2.0]  # and the session carries on


def test_no_forward_is_shipped_while_compile_records(session, monkeypatch):
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 1)
    lin = nn.Linear(4, 2).double()
    x = tw.tensor(np.ones((3, 4)))

    @tw.compile
    def step(x):
        loss = lin(x).square().sum()
        loss.backward()
        return loss

    for _ in range(3):
        got = step(x).item()
    lin.zero_grad()
    ref = lin(x).square().sum()
    assert got == ref.item()


def test_a_cancel_stops_a_shipped_forward_and_the_session_goes_on(session, monkeypatch):
    monkeypatch.setattr(session_mod, "SHIP_FORWARD_NODES", 16)
    rng = np.random.default_rng(0)
    w = nn.Parameter(tw.tensor(rng.standard_normal((256, 256)).astype(np.float32) / 16))
    x0 = tw.tensor(rng.standard_normal((256, 256)).astype(np.float32))

    def forward():
        x = x0
        for _ in range(200):  # (a chain the devices run step by step: a cancel stops it between two)
            x = x @ w
        return x.square().mean()

    first = forward()
    first.backward()  # (its graph from the autograd service, then cached)
    assert np.isfinite(first.item())
    w.grad = None
    session.synchronize()  # (nothing in flight now: a cancel finds only what ships after this)
    loss = forward()
    loss.backward()  # the forward goes out here, and runs while the backward is recorded
    tw.cancel(session)
    with pytest.raises(tw.Cancelled):
        loss.item()
    assert (tw.arange(3) + 1).tolist() == [1, 2, 3]
    session.synchronize()  # the cancel was reported once; the session is clean
