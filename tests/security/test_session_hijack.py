"""Issue 15, finding 1: a session is a secret the dispatcher issues, not a routing id anybody can claim.

The attack: learn the victim's session id (``stats`` listed every session to every client, and the id was the
ZeroMQ routing id), connect a DEALER claiming it as its routing id (the dispatcher set ROUTER_HANDOVER), and send a
batch fetching the victim's tensor, with no hello and no token; then ``close`` the victim's session.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw

from .conftest import CLIENT_TOKEN, check_typed, hello, raw_socket, recv, send

VALUES = np.arange(8, dtype=np.float32) * 7


@pytest.fixture(scope="module")
def victim(cluster):
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    x = s.const(VALUES, "cpu:0")
    np.testing.assert_array_equal(x.numpy(), VALUES)
    yield s, x
    s.close()


def _intact(victim) -> None:
    s, x = victim
    np.testing.assert_array_equal(x.numpy(), VALUES)
    np.testing.assert_array_equal((x * 2).numpy(), VALUES * 2)  # and the session still computes


def test_stats_lists_only_the_callers_session(cluster, victim):
    a = raw_socket(cluster.address)
    try:
        me = hello(a, CLIENT_TOKEN)
        send(a, {"t": "stats", "q": 1, "k": me["key"]})
        st = recv(a)
        assert st["sessions"] == [me["session"]]
        assert victim[0].session_id not in str(st)
    finally:
        a.close(0)


@pytest.mark.parametrize("with_hello", [False, True], ids=["no-hello", "own-session"])
def test_claiming_the_victims_id_reads_and_frees_nothing(cluster, victim, with_hello):
    s, x = victim
    sid = bytes.fromhex(s.session_id)
    a = raw_socket(cluster.address, routing_id=sid)  # the victim's id as the attacker's routing id
    try:
        key = hello(a, CLIENT_TOKEN)["key"] if with_hello else None
        forged = [None, sid + bytes(32), sid]  # no key, the public id with a guessed secret, the id alone
        if key is not None:
            forged.append(key)  # the attacker's own, valid key: its session does not hold the victim's handle
        for k in forged:
            send(
                a, {"t": "batch", "q": 1, "k": k, "ext": [], "outs": [], "fetch": [x._id], "release": [], "sync": False}
            )
            h = recv(a)
            err = h.get("error") or (h.get("fetch_errors") or [None])[0]
            check_typed(err)
            assert err["code"] in ("Unauthorized", "NotFound"), h
            assert not h.get("values"), h  # no bytes of the victim's tensor
            send(a, {"t": "close", "q": 2, "k": k})
            if key is not None and k == key:
                assert recv(a)["t"] == "closed"  # it closed its own session, nothing else
                key = hello(a, CLIENT_TOKEN)["key"]
            else:
                check_typed(recv(a)["error"])
    finally:
        a.close(0)
    _intact(victim)
