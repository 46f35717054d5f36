"""Helpers for the attacks: raw ZeroMQ peers that speak the wire protocol by hand, as an attacker's would."""

from __future__ import annotations

import re

import msgpack
import pytest
import zmq

from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol.errors import _BY_CODE
from tests.conftest import own_cluster

#: Python exception names or tracebacks in an error message mean internals leaked onto the wire
LEAK = re.compile(
    r"Traceback|\b[A-Z][A-Za-z]*(Error|Exception)\b: |\b(TypeError|KeyError|AttributeError|"
    r"NameError|UnboundLocalError|AssertionError)\b"
)
CODES = set(_BY_CODE)


def raw_socket(address: str, routing_id: bytes | None = None, timeout_ms: int = 15000) -> zmq.Socket:
    """A DEALER to ``address`` (optionally claiming ``routing_id``), answers within ``timeout_ms`` or raise."""
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, timeout_ms)
    if routing_id is not None:
        s.setsockopt(zmq.ROUTING_ID, routing_id)
    s.connect(address)
    return s


class RawLane:
    """A raw same-host lane to a worker (``protocol/lane.py``), spoken as the raw DEALERs here are
    (``send_multipart``, ``recv_multipart``): its path asked for in a hello on the worker's channel ``dealer`` under
    capability ``cap``, as a client does."""

    def __init__(self, dealer: zmq.Socket, cap: bytes, timeout_ms: int = 15000):
        from tensorwire.protocol.lane import LaneSocket

        send(dealer, {"t": "hello", "q": 0, "cap": cap, "lane": True})
        ok = recv(dealer)
        assert ok["t"] == "ok" and set(ok["lane"]) == {"path", "nonce"}, ok
        self.info = ok["lane"]
        self.sock = LaneSocket(self.info["path"], timeout_ms)

    def send_multipart(self, parts) -> None:
        from tensorwire.protocol.wire import send_parts

        send_parts(self.sock, parts)

    def recv_multipart(self) -> list[bytes]:
        from tensorwire.protocol.wire import recv_frames

        return [f.bytes if hasattr(f, "bytes") else bytes(f) for f in recv_frames(self.sock)]

    def close(self, linger=None) -> None:
        self.sock.close()


def send(s: zmq.Socket, header: dict, *frames: bytes) -> None:
    s.send_multipart([msgpack.packb(header, use_bin_type=True), *frames])


def recv(s: zmq.Socket) -> dict:
    return msgpack.unpackb(s.recv_multipart()[0], raw=False, strict_map_key=False)


def hello(s: zmq.Socket, token: str | None = None) -> dict:
    """Open a session on a raw socket; returns the welcome (its ``key`` proves the session)."""
    from tensorwire.protocol.shm_paths import host_id

    # (the host id: a worker listening on loopback or a unix socket is offered to clients of its own host only)
    send(s, {"t": "hello", "v": PROTOCOL_VERSION, "token": token, "client": "raw", "host": host_id()})
    h = recv(s)
    assert h["t"] == "welcome", h
    return h


def check_typed(err: dict) -> None:
    """An error that crossed the wire: a known code, a message, no Python internals."""
    assert isinstance(err, dict) and err.get("code") in CODES, err
    assert isinstance(err.get("message"), str) and err["message"], err
    assert not LEAK.search(err["message"]), err


def log_text(cluster, name: str) -> str:
    return (cluster.log_dir / f"{name}.log").read_text(errors="replace")


def _attacked_cluster():
    import tensorwire as tw

    return tw.LocalCluster(devices=["cpu:0", "cpu:1"], token=CLIENT_TOKEN, autograd=False, collectives=False)


@pytest.fixture(scope="module")
def cluster(request, shared_clusters):
    """The cluster an attacker shares with a victim: cpu:0 and cpu:1, a client token every user holds. The attack
    modules share one (each must leave it working: one it finds broken is replaced, see ``SharedClusters``); a
    module marked ``own_cluster`` gets its own."""
    if own_cluster(request.node):
        with _attacked_cluster() as c:
            yield c
    else:
        yield shared_clusters.get("security", _attacked_cluster)


CLIENT_TOKEN = "the-client-token-every-user-holds"
