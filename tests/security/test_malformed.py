"""Issue 15, finding 5: every malformed message gets a typed protocol error, checked before any state changes, and
no Python exception text (``TypeError: ...``) crosses the wire."""

from __future__ import annotations

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.protocol import PROTOCOL_VERSION

from .conftest import CLIENT_TOKEN, check_typed, hello, log_text, raw_socket, recv, send

VALUES = np.linspace(-1, 1, 5, dtype=np.float32)
FULL = ["full", [], {"shape": [2], "dtype": "float32", "value": 1.5}, 0]

MALFORMED = {
    "outs-not-a-list": {"t": "batch", "q": 1, "outs": 5, "fetch": 7, "sync": True},
    "unhashable-drop-plans": {"t": "batch", "q": 1, "drop_plans": [[1]], "sync": True},
    "unhashable-plan": {"t": "batch", "q": 1, "plan": [1], "ext": [], "outs": [], "fetch": [], "sync": True},
    "unhashable-q": {"t": "devices", "q": [1]},
    "collective-ranks-of-mixed-types": {
        "t": "batch",
        "q": 1,
        "devs": ["cpu:0", "cpu:1"],
        "outs": [900, 901, 902, 903],
        "sync": True,
        "nodes": [
            FULL,
            ["full", [], {"shape": [2], "dtype": "float32", "value": 1.5}, 1],
            ["collective", [0], {"key": 1, "kind": "all_reduce", "op": "sum", "n": 2, "rank": None}, 0],
            ["collective", [1], {"key": 1, "kind": "all_reduce", "op": "sum", "n": 2, "rank": 0}, 1],
        ],
    },
    "collective-key-a-list": {
        "t": "batch",
        "q": 1,
        "devs": ["cpu:0"],
        "outs": [904, 905],
        "sync": True,
        "nodes": [FULL, ["collective", [0], {"key": [1], "kind": "all_reduce", "op": "sum", "n": 1, "rank": 0}, 0]],
    },
}


@pytest.fixture(scope="module")
def victim(cluster):
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    x = s.const(VALUES, "cpu:1")
    x.numpy()
    yield s, x
    s.close()


@pytest.fixture(scope="module")
def raw(cluster):
    a = raw_socket(cluster.address)
    key = hello(a, CLIENT_TOKEN).get("key")
    yield a, key
    a.close(0)


def _first_error(h: dict) -> dict:
    return h.get("error") or (h.get("fetch_errors") or h.get("errors") or [None])[0]


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_client_messages_get_typed_errors(cluster, victim, raw, name):
    a, key = raw
    send(a, {**MALFORMED[name], "k": key})
    err = _first_error(recv(a))
    check_typed(err)
    assert err["code"] == "ProtocolError", err
    send(a, {"t": "ping", "q": 2})  # the connection and the dispatcher go on
    assert recv(a)["t"] == "pong"
    np.testing.assert_array_equal(victim[1].numpy(), VALUES)


def test_a_failing_batch_commits_nothing(cluster, raw):
    a, key = raw
    # a new plan whose ids do not fit it: refused as a whole, so the plan must not have been kept either
    send(
        a,
        {
            "t": "batch",
            "q": 3,
            "k": key,
            "plan": 5,
            "nodes": [FULL],
            "devs": ["cpu:0"],
            "ext": [],
            "outs": [50, 51],
            "fetch": [50],
        },
    )
    check_typed(_first_error(recv(a)))
    send(a, {"t": "batch", "q": 4, "k": key, "plan": 5, "ext": [], "outs": [52], "fetch": [52], "dyn": []})
    h = recv(a)
    assert not h.get("values"), h
    err = _first_error(h)
    check_typed(err)
    assert err["code"] == "NotFound" and "plan 5" in err["message"], err


def test_malformed_service_messages_are_refused_typed(cluster):
    s = raw_socket(cluster.service_address)
    try:
        bad = [{"info": 5}, {"device": ["cpu", 0]}, {"instance": 7}, {"pid": "1"}, {"v": "x"}]
        base = {
            "t": "register",
            "v": PROTOCOL_VERSION,
            "pid": 1,
            "service": "worker",
            "device": "cpu:9",
            "token": getattr(cluster, "service_token", None),
            "instance": "x" * 32,
            "info": {},
        }
        for change in bad:
            send(s, {**base, **change})
            h = recv(s)
            assert h["t"] == "refused", h
            check_typed(h["error"])
    finally:
        s.close(0)


def test_nothing_reached_the_dispatchers_catch_all(cluster):
    # every message above was answered by a check, not by the last-resort handler that logs a traceback
    assert "Traceback" not in log_text(cluster, "dispatcher")
