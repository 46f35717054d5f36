"""Issue 30: the same-host lane (``protocol/lane.py``). A session on the workers' host moves each direct channel onto
a Unix socket in a folder of the host's shared-memory folder that only the cluster's user can enter; its hello there
answers with the nonce the channel gave, and a broken frame table closes that connection alone. Every message on it
carries the capability and passes the same checks as on the channel's ZeroMQ socket: the attacks of
``test_direct_channels.py`` (forged and foreign capabilities, malformed messages, forged replays) run on both."""

from __future__ import annotations

import os
import socket
import stat
import struct

import numpy as np
import pytest

import tensorwire as tw

from .conftest import CLIENT_TOKEN, RawLane, hello, raw_socket, recv, send

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
    """A raw session of the attacker's, its grant for cpu:0, and a raw lane to cpu:0's worker."""
    d = raw_socket(cluster.address)
    w = hello(d, CLIENT_TOKEN)
    (g,) = [g for g in w["channels"] if g["device"] == "cpu:0"]
    c = raw_socket(g["address"])
    ln = RawLane(c, g["cap"])
    yield g, ln.info, ln
    ln.close()
    c.close(0)
    d.close(0)


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
    send(ln, {"t": "hello", "q": 2, "cap": g["cap"]})
    assert recv(ln) == {"t": "ok", "q": 2, "device": "cpu:0", "nonce": info["nonce"]}


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
