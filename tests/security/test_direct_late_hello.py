"""Issues 30 and 37: a worker that answers a session's ``hello`` late (its main thread busy with work queued before
it) keeps the session's channel: the session's work goes through the relay until the answer comes, then direct,
behind the usual fence. A channel whose worker never answers still falls back, and ``tensorwire status`` says why.
The worker itself runs queued batches in slices, looking at its sockets between them, so a hello (or a cancel) is
not kept waiting behind another session's long queue.
"""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.session as session_mod
from tensorwire.channels import SWITCH_BACK

from .conftest import CLIENT_TOKEN, hello, raw_socket, recv, send

#: relayed batches a busy neighbour queues on cpu:0 (a small matmul and tanh each, run on the worker's main thread)
BUSY_BATCHES = 1500
STEPS = 40


def _queue_relayed_work(s: tw.Session, n: int = BUSY_BATCHES):
    """``n`` single-device batches sent through the dispatcher without waiting: they queue on cpu:0's worker."""
    s._plane.enabled = False  # (as TENSORWIRE_DIRECT=0 for this session: the relay takes everything)
    s._relay.max_batches = n + 1  # (the whole queue on the worker at once: the relay's window would hold it to 256)
    rng = np.random.default_rng(0)
    w = s.const((rng.standard_normal((96, 96)) / 96).astype(np.float32), "cpu:0")
    x = s.const(rng.standard_normal((96, 96)).astype(np.float32), "cpu:0")
    for _ in range(n):
        x = (x @ w).tanh()
        s.flush()
    return x


def test_a_busy_worker_answers_late_and_the_session_still_goes_direct(cluster, monkeypatch):
    busy = tw.Session(cluster.address, CLIENT_TOKEN)
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    try:
        x = _queue_relayed_work(busy)
        # no answer within the connect wait (none can come in 0 s): the session's first batches take the relay
        monkeypatch.setattr(session_mod, "DIRECT_CONNECT_S", 0.0)
        y = s.const(np.zeros(4, np.float32), "cpu:0")
        for i in range(STEPS):
            y = y + 1
            np.testing.assert_array_equal(y.numpy(), np.full(4, i + 1, np.float32))  # (order across the switch)
        plane = s.cluster_status()["data_plane"]["cpu:0"]
        relayed = plane["relayed_waiting"]
        assert plane["path"] == "direct" and plane["connected"] and "why" not in plane, plane
        assert 1 <= relayed < STEPS, plane  # the first batches went through the relay, the rest direct
        assert plane["messages"] >= STEPS - relayed, plane  # (the hello, then each direct batch)
        assert np.isfinite(x.numpy()).all()
    finally:
        s.close()
        busy.close()


def _unused_address() -> str:
    with socket.socket() as u:
        u.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{u.getsockname()[1]}"


def test_a_channel_that_never_answers_falls_back_and_says_why(cluster, monkeypatch):
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    try:
        ch = s._plane.channels["cpu:1"]
        ch.address = _unused_address()  # (a granted address this client cannot reach: nothing listens there)
        monkeypatch.setattr(session_mod, "DIRECT_CONNECT_S", 0.05)
        a = s.const(np.arange(4, dtype=np.float32), "cpu:1")
        b = a * 2
        np.testing.assert_array_equal(b.numpy(), np.arange(4) * 2)
        plane = s.cluster_status()["data_plane"]["cpu:1"]
        assert plane["path"] == "relay" and not plane["connected"], plane
        assert "waiting for its worker to answer" in plane["why"] and ch.address in plane["why"], plane
        waited = plane["relayed_waiting"]
        assert waited >= 1, plane
        monkeypatch.setattr(session_mod, "HELLO_WAIT_S", 0.0)  # past the wait for an answer: given up
        c = b + 1
        np.testing.assert_array_equal(c.numpy(), np.arange(4) * 2 + 1)
        plane = s.cluster_status()["data_plane"]["cpu:1"]
        assert plane == {"path": "relay", "why": f"no answer from its worker's direct address {ch.address} within "
                         f"0s"}, plane
        assert "cpu:1" not in s._plane.channels and s._plane.dead_time("cpu:1", time.monotonic())
        d = (c * 3).sum()  # still through the relay, not tried again before RETRY_AFTER_S
        assert d.item() == pytest.approx(float(((np.arange(4) * 2 + 1) * 3).sum()))
        assert "cpu:1" not in s._plane.channels
    finally:
        s.close()


def test_the_worker_answers_a_hello_while_another_sessions_queue_runs(cluster):
    """The hello's answer comes while the neighbour's queue still runs: a cancel sent after it still finds the
    neighbour's last batch queued (its value fails with ``Cancelled``). On a busy host the worker may drain the queue
    as fast as the client sends it (the parallel suite did once in session 56): a queue that ran out before the cancel
    came tells nothing, and is tried again twice as long, at most three lengths; a worker that answered the hello
    only once the queue had run out fails at every length."""
    for n in (4 * BUSY_BATCHES, 8 * BUSY_BATCHES, 16 * BUSY_BATCHES):
        busy = tw.Session(cluster.address, CLIENT_TOKEN)
        d = raw_socket(cluster.address)
        try:
            x = _queue_relayed_work(busy, n)
            (g,) = [g for g in hello(d, CLIENT_TOKEN)["channels"] if g["device"] == "cpu:0"]
            c = raw_socket(g["address"])
            try:
                send(c, {"t": "hello", "q": 1, "cap": g["cap"]})
                assert recv(c) == {"t": "ok", "q": 1, "device": "cpu:0"}
            finally:
                c.close(0)
            busy.cancel()
            try:
                x.numpy()
            except tw.Cancelled:
                return
        finally:
            d.close(0)
            busy.close()
    pytest.fail("the neighbour's queue had run out before the cancel came at every length tried")


def test_a_plan_sent_on_the_relay_is_not_sent_or_built_again_when_its_batches_go_direct(cluster):
    """The worker keeps one plan cache per session, whichever path the plan came by: a plan whose nodes reached
    the worker whole through the relay (the device cooling down after a move) replays on the channel by its number."""
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    try:
        a = s.const(np.zeros(4, np.float32), "cpu:0")
        a = a * 2 + 1
        np.testing.assert_array_equal(a.numpy(), np.ones(4))
        np.testing.assert_array_equal(a.to("cpu:1").numpy(), np.ones(4))  # relayed: cpu:0 takes the relay a while
        assert s._plane.cooldown["cpu:0"] == SWITCH_BACK
        before = s.cluster_status()["load"]["cpu:0"]
        expect = np.ones(4)
        for _ in range(SWITCH_BACK + 4):  # one plan: sent on the relay, replayed there, then on the channel
            a = a * 2 + 1
            expect = expect * 2 + 1
            np.testing.assert_array_equal(a.numpy(), expect)
        after = s.cluster_status()["load"]["cpu:0"]
        direct = {k: after["direct"][k] - before["direct"][k] for k in ("batches", "plan_hits", "plan_misses")}
        assert direct == {"batches": 4, "plan_hits": 4, "plan_misses": 0}, direct
        assert after["compiles"] - before["compiles"] == 1, (before, after)  # built once, from the relay's nodes
    finally:
        s.close()
