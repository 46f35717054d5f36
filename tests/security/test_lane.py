"""Issue 30: the same-host lane (``protocol/lane.py``). A session on the workers' host moves each direct channel onto
a Unix socket in a folder of the host's shared-memory folder that only the cluster's user can enter; every message on
it carries the capability and passes the same checks as on the channel's ZeroMQ socket: forged or foreign
capabilities are refused with typed errors, malformed messages get typed errors and change nothing, and a broken
frame table closes that connection alone."""

from __future__ import annotations

import os
import socket
import stat
import struct

import msgpack
import numpy as np
import pytest

import tensorwire as tw
from tensorwire.protocol.capability import CAP_BYTES
from tensorwire.protocol.lane import LaneSocket
from tensorwire.protocol.wire import recv_frames, send_parts

from .conftest import CLIENT_TOKEN, check_typed, hello, raw_socket, recv, send

VALUES = np.linspace(-2, 2, 7, dtype=np.float32)


@pytest.fixture(scope="module")
def victim(cluster):
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    x = s.const(VALUES, "cpu:0")
    y = (x * 3).tanh()
    np.testing.assert_allclose(y.numpy(), np.tanh(VALUES * 3), rtol=1e-6)
    yield s, x, y
    s.close()


@pytest.fixture(scope="module")
def lane(cluster):
    """A raw session of the attacker's, its grant for cpu:0, and a raw lane to cpu:0's worker (its path asked for
    in a hello on the channel, as a client does)."""
    d = raw_socket(cluster.address)
    w = hello(d, CLIENT_TOKEN)
    (g,) = [g for g in w["channels"] if g["device"] == "cpu:0"]
    c = raw_socket(g["address"])
    send(c, {"t": "hello", "q": 1, "cap": g["cap"], "lane": True})
    ok = recv(c)
    assert ok["t"] == "ok" and set(ok["lane"]) == {"path", "nonce"}, ok
    ln = LaneSocket(ok["lane"]["path"], 15000, "cpu:0")
    yield g, ok["lane"], ln
    ln.close()
    c.close(0)
    d.close(0)


def _send(ln, header: dict, *frames) -> None:
    send_parts(ln, [msgpack.packb(header, use_bin_type=True), *frames])


def _recv(ln) -> dict:
    return msgpack.unpackb(recv_frames(ln)[0].bytes, raw=False, strict_map_key=False)


def test_a_session_on_the_workers_host_runs_on_the_lane(victim):
    s, x, y = victim
    assert float((y * x).sum().item()) == pytest.approx(float(np.sum(np.tanh(VALUES * 3) * VALUES)), rel=1e-5)
    plane = s.cluster_status()["data_plane"]["cpu:0"]
    assert plane["path"] == "direct" and plane["lane"], plane
    path = s._plane.channels["cpu:0"].sock.sock.getpeername()
    folder = os.path.dirname(path)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and os.stat(folder).st_uid == os.getuid()


def test_the_lane_answers_as_the_worker_with_the_nonce(lane):
    g, info, ln = lane
    _send(ln, {"t": "hello", "q": 2, "cap": g["cap"]})
    assert _recv(ln) == {"t": "ok", "q": 2, "device": "cpu:0", "nonce": info["nonce"]}


@pytest.mark.parametrize("cap", ["missing", "random", "truncated", "another-session"])
def test_forged_capabilities_are_refused_on_the_lane(lane, victim, cap):
    g, _, ln = lane
    s, x, y = victim
    caps = {"missing": None, "random": os.urandom(CAP_BYTES), "truncated": g["cap"][:20],
            "another-session": bytes.fromhex(s.session_id) + g["cap"][8:]}
    _send(ln, {"t": "run", "q": 7, "cap": caps[cap], "fetch": [x._id, y._id], "ext": [], "outs": []})
    h = _recv(ln)
    assert h["t"] == "error" and h["q"] == 7, h
    check_typed(h["error"])
    assert h["error"]["code"] == "Unauthorized", h
    np.testing.assert_allclose(y.numpy(), np.tanh(VALUES * 3), rtol=1e-6)  # the victim's data is untouched


def test_a_capability_on_the_lane_acts_for_its_own_session_only(lane, victim):
    g, _, ln = lane
    s, x, y = victim
    _send(ln, {"t": "run", "q": 8, "cap": g["cap"], "fetch": [x._id], "release": [y._id], "ext": [], "outs": []})
    h = _recv(ln)
    assert h["t"] == "done" and not h["values"], h
    (fe,) = h["fetch_errors"]
    assert fe["code"] == "NotFound", fe
    np.testing.assert_allclose(y.numpy(), np.tanh(VALUES * 3), rtol=1e-6)


@pytest.mark.parametrize("name", ["not-msgpack", "unknown-type", "ext-not-ints", "unknown-op"])
def test_malformed_lane_messages_get_typed_errors_and_change_nothing(lane, victim, name):
    g, _, ln = lane
    s, x, y = victim
    if name == "not-msgpack":
        send_parts(ln, [b"\xc1\xc1 not msgpack"])
    else:
        bad = {"unknown-type": {"t": "steal", "q": 3}, "ext-not-ints": {"t": "run", "q": 3, "ext": ["a"], "outs": []},
               "unknown-op": {"t": "run", "q": 3, "ext": [], "outs": [70], "devs": ["cpu:0"],
                              "nodes": [["pwn", [], {}, 0]]}}[name]
        _send(ln, {**bad, "cap": g["cap"]})
    h = _recv(ln)
    assert h["t"] == "error", h
    check_typed(h["error"])
    _send(ln, {"t": "hello", "q": 12, "cap": g["cap"]})  # the worker goes on serving the lane
    assert _recv(ln)["t"] == "ok"
    np.testing.assert_allclose(y.numpy(), np.tanh(VALUES * 3), rtol=1e-6)


def test_a_broken_frame_table_closes_that_connection_and_nothing_else(lane, victim):
    _, info, _ = lane
    s, x, y = victim
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(15)
    raw.connect(info["path"])
    raw.sendall(struct.pack("<QI", 12, 2) + struct.pack("<Q", 1 << 40) + b"abcd")  # (sizes past the body)
    try:
        assert raw.recv(16) == b""
    except ConnectionResetError:
        pass
    raw.close()
    assert float((y + 1).sum().item()) == pytest.approx(float(np.sum(np.tanh(VALUES * 3) + 1)), rel=1e-5)
    assert s.cluster_status()["data_plane"]["cpu:0"]["lane"]
