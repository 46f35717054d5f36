"""Clients that die, exit abruptly or flood the dispatcher: a dead client's session is released by its lease within
seconds, ``close()`` is delivered even when the process ends right after it, and big legal client messages never get
healthy workers declared dead. (Measured figures are in docs/reliability.md.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import msgpack
import numpy as np
import pytest
import zmq

import tensorwire as tw
from tensorwire.protocol import PROTOCOL_VERSION
from tests._liveness import FAST_HEARTBEAT

from .conftest import buffers, wait_until

LEASE_S = 4.0  # this module's dispatcher leases sessions for 4 s (the default is 10 s), to keep the tests short
#: the big-message flood against this module's cluster, which declares a silent service dead after 2.5 s (the fast
#: heartbeat of tests/_liveness.py): 8 messages of 8 MB (``outs`` of 2**23 ids, ~0.5 s of the dispatcher's time each
#: on 2 cores) and one fetch of 6 M unknown ids (~1 s). Each message and the whole flood stand to that bound as the
#: 16 MB messages and the 12 M fetch did to the default 5 s, in half the time
FLOOD_MESSAGES = 8
FLOOD_OUT_IDS = 2**23
FLOOD_FETCH_IDS = 6_000_000
LEASE_BOUND_S = LEASE_S + 20  # measured: released ~LEASE_S + 0.5 s after the kill (the heartbeat tick)


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(
        devices=["cpu:0", "cpu:1"],
        autograd=False,
        collectives=False,
        extra_env={"TENSORWIRE_SESSION_LEASE_S": str(LEASE_S), **FAST_HEARTBEAT},
    ) as c:
        yield c


def _client(address: str, body: str) -> subprocess.Popen:
    """A client process that opens a session, makes buffers on both workers, prints its session id, then runs
    ``body``."""
    code = textwrap.dedent(f"""
        import os, sys, time
        import tensorwire as tw
        s = tw.connect({address!r})
        a = tw.ones(1000, device="cpu:0") * 2
        b = tw.ones(1000, device="cpu:1") * 3
        a.numpy(), b.numpy()
        print(s.session_id, flush=True)
    """) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)


def _sessions(session) -> set[str]:
    return set(session.cluster_status()["sessions"])


def test_killed_clients_are_released_by_their_lease(cluster, session):
    procs = [_client(cluster.address, "sys.stdin.read()") for _ in range(2)]  # they wait until killed
    sids = [p.stdout.readline().strip() for p in procs]
    st = session.cluster_status()
    assert all(buffers(st, sid) >= 2 for sid in sids)
    procs[0].send_signal(signal.SIGKILL)
    procs[1].send_signal(signal.SIGTERM)  # the default action: no atexit runs either
    for p in procs:
        p.wait(30)
    killed = time.monotonic()
    wait_until(lambda: not (_sessions(session) & set(sids)), LEASE_BOUND_S, "dead clients' sessions released")
    took = time.monotonic() - killed
    st = session.cluster_status()
    assert all(buffers(st, sid) == 0 for sid in sids)
    assert took < LEASE_BOUND_S
    print(f"dead clients released {took:.1f} s after the kill")


def test_close_then_os_exit_is_delivered(cluster, session):
    """multiprocessing's children end with os._exit: the close must reach the dispatcher before that."""
    before = _sessions(session)
    procs = [_client(cluster.address, "s.close(); os._exit(0)") for _ in range(8)]
    procs += [_client(cluster.address, "sys.exit(0)") for _ in range(2)]  # never closed: closed at exit
    sids = [p.stdout.readline().strip() for p in procs]
    for p in procs:
        assert p.wait(60) == 0
    now = _sessions(session)  # at once: well before any lease could run out
    assert not (now & set(sids)), f"{len(now & set(sids))} of {len(sids)} sessions stayed"
    assert now <= before | {session.session_id}


def test_idle_client_keeps_its_session(cluster, session):
    """The lease is renewed in the background: a client that computes (or idles) longer than the lease keeps
    everything."""
    s = tw.Session(cluster.address)
    a = tw.arange(5.0, device="cpu:1", session=s) + 1
    a.numpy()
    time.sleep(LEASE_S * 2)  # the client idles on purpose (this is the behaviour under test)
    np.testing.assert_array_equal(a.numpy(), [1, 2, 3, 4, 5])
    s.close()


def test_a_client_busy_on_its_direct_channel_keeps_its_session(cluster, session):
    """Back-to-back round trips on a worker's direct channel say nothing to the dispatcher, and the lease thread
    skips a session whose lock is held: the sends renew the lease when it is due. (Found by the scripts benchmark:
    the dispatcher expired a session mid-run, and a later wait hung.) The lock is held here for the whole loop, as a
    program that never pauses between round trips nearly does."""
    s = tw.Session(cluster.address)
    a = tw.arange(5.0, device="cpu:1", session=s)
    a.numpy()
    assert s._plane.channels, "this test needs the direct path"
    deadline = time.monotonic() + LEASE_S * 2  # two leases: unrenewed, the session expires within one and a tick
    with s._lock:  # (reentrant: the session's own calls go on; the lease thread cannot get it)
        while time.monotonic() < deadline:
            (a * 1.5).sum().item()  # a float result: a round trip each, on cpu:1's channel
    assert s.session_id in _sessions(session)
    np.testing.assert_array_equal((a + 1).numpy(), [1, 2, 3, 4, 5])
    s.close()


def test_an_expired_session_says_so_on_the_direct_path_too(cluster, session):
    """A session whose lease ran out gets the dispatcher's "this session expired" on its next direct round trip,
    not "the worker restarted" (the worker only knows the session is closed)."""
    s = tw.Session(cluster.address)
    a = tw.arange(5.0, device="cpu:1", session=s)
    a.numpy()
    s._renew_every = float("inf")  # this client stops renewing (as a stuck one would)
    wait_until(lambda: s.session_id not in _sessions(session), LEASE_BOUND_S, "the lease to run out")
    with pytest.raises(tw.Unauthorized, match="this session expired"):
        (a * 1.5).sum().item()
    # a client that waits on something else pings: the pong says the session is gone, so the wait ends
    from tensorwire.protocol.wire import pack_header, unpack_header

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(cluster.address)
    try:
        sock.send(pack_header({"t": "ping", "q": 7, "k": s._key}))
        assert sock.poll(10_000), "no pong"
        pong = unpack_header(sock.recv_multipart()[0])
        assert pong["t"] == "pong" and pong["error"]["code"] == "Unauthorized", pong
        assert "this session expired" in pong["error"]["message"]
    finally:
        sock.close()
    s.close()


def test_big_legal_client_messages_do_not_get_workers_declared_dead(cluster, session):
    keep = [tw.arange(4.0, device=d) + 1 for d in ("cpu:0", "cpu:1")]
    for k in keep:
        k.numpy()
    # the messages' bodies are made before the session opens: on a loaded machine making them took longer than the
    # module's 4 s lease, which expired the flooding session before its first message arrived
    out_ids, fetch_ids = [1] * FLOOD_OUT_IDS, list(range(FLOOD_FETCH_IDS))
    raw = zmq.Context.instance().socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.setsockopt(zmq.RCVTIMEO, 120_000)
    raw.connect(cluster.address)
    raw.send(msgpack.packb({"t": "hello", "v": PROTOCOL_VERSION, "token": None, "client": "flood"}))
    welcome = msgpack.unpackb(raw.recv())
    assert welcome["t"] == "welcome"
    key = welcome["key"]  # every message proves the session with its key
    outs = msgpack.packb({"t": "batch", "q": 1, "k": key, "outs": out_ids, "sync": True})  # 8 MB, ~0.5 s each
    fetch = msgpack.packb({"t": "batch", "q": 2, "k": key, "fetch": fetch_ids})  # 30 MB of unknown ids
    t0 = time.monotonic()
    for _ in range(FLOOD_MESSAGES):
        raw.send(outs, copy=False)
    raw.send(fetch, copy=False)
    replies = [msgpack.unpackb(raw.recv()) for _ in range(FLOOD_MESSAGES + 1)]
    busy = time.monotonic() - t0
    raw.close(0)
    for k in keep:  # the workers were never declared dead: nothing was lost
        np.testing.assert_array_equal(k.numpy(), [1, 2, 3, 4])
    for h in replies:
        assert h["t"] == "result" and (h["errors"] or h["fetch_errors"]), h
        assert len(h["fetch_errors"]) <= 64  # a reply lists a bounded number of fetch errors
    print(f"dispatcher busy {busy:.1f} s with the flood; workers kept")
