"""Issue 15, finding 4 (the dispatcher's part): ZMTP ran with the NULL mechanism, so tokens and tensor bytes
crossed the network in clear and anyone could connect.

With a keys directory (``tensorwire keys``) both sockets run CURVE: traffic is encrypted, clients and services pin
the dispatcher's public key, and client keys and service keys are authorised separately. A dispatcher bound
beyond loopback refuses to start without keys unless told ``--insecure``.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import zmq
import zmq.utils.monitor

import tensorwire as tw
from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol.curve import apply_peer
from tests._processes import mixed_keys

from .conftest import CLIENT_TOKEN, send

PATTERN = np.frombuffer(b"TENSORWIRE-SECRET-TENSOR-BYTES!!" * 512, dtype=np.float32)  # 16 KiB, easy to spot


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "tensorwire.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    r = _cli("keys", "--dir", str(d))
    assert r.returncode == 0, r.stderr
    assert os.stat(d / "dispatcher.key_secret").st_mode & 0o077 == 0
    return d


@pytest.fixture(scope="module")
def cluster(keys):
    # (the worker's direct channel on TCP, as across hosts, so a wiretap can sit on it: see the direct channel's test)
    os.environ["TENSORWIRE_DIRECT_ADDRESS"] = "tcp://127.0.0.1:*"
    try:
        c = tw.LocalCluster(devices=["cpu:0"], token=CLIENT_TOKEN, keys=keys, autograd=False, collectives=False)
    finally:
        del os.environ["TENSORWIRE_DIRECT_ADDRESS"]
    with c:
        yield c


class Relay:
    """A TCP relay on loopback that records every byte between a client and the dispatcher (a wiretap)."""

    def __init__(self, upstream: str):
        host, port = upstream[len("tcp://") :].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.seen = bytearray()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.listener.settimeout(30)
        a, _ = self.listener.accept()
        b = socket.create_connection(self.upstream)
        peer = {a: b, b: a}
        deadline = time.monotonic() + 120
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for s in ready:
                    data = s.recv(1 << 16)
                    if not data:
                        return
                    self.seen += data
                    peer[s].sendall(data)
        finally:
            a.close()
            b.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.listener.close()


def test_traffic_is_encrypted_and_works(cluster, keys):
    relay = Relay(cluster.address)
    try:
        s = tw.Session(relay.address, CLIENT_TOKEN, keys=keys)
        s._plane.enabled = False  # (the dispatcher's path: the direct channel has its own test below)
        x = s.const(PATTERN, "cpu:0")
        np.testing.assert_array_equal((x * 1).numpy(), PATTERN)  # (an op the device runs: the value comes back)
        s.close()
    finally:
        relay.close()
    assert len(relay.seen) > 2 * PATTERN.nbytes  # the tensor went through the wiretap, both ways...
    assert CLIENT_TOKEN.encode() not in relay.seen  # ...but neither the token
    assert b"TENSORWIRE-SECRET" not in relay.seen  # nor the tensor's bytes could be read there


def test_direct_channels_are_encrypted_too(cluster, keys, monkeypatch):
    """With keys, a worker's direct channel runs CURVE with the service key pair, and the client pins the key the
    dispatcher's grant named: a wiretap between client and worker sees the tensor go by, and cannot read it. (The
    same-host lane, a Unix socket only this user can open, is kept out here: it never crosses a network, see
    tests/security/test_direct_channels.py.)"""
    monkeypatch.setattr("tensorwire.channels.LANE_ENABLED", False)
    s = tw.Session(cluster.address, CLIENT_TOKEN, keys=keys)
    ch = s._plane.channels["cpu:0"]
    assert ch.key, "a cluster with keys grants encrypted channels"
    wiretap = Relay(ch.address)
    ch.address = wiretap.address  # (the client reaches the worker through the wiretap; 16 KiB go as frames)
    try:
        x = s.const(PATTERN, "cpu:0")
        np.testing.assert_array_equal((x * 1).numpy(), PATTERN)  # (an op the device runs: the value comes back)
        assert s.cluster_status()["data_plane"]["cpu:0"]["path"] == "direct"
        s.close()
    finally:
        wiretap.close()
    assert len(wiretap.seen) > 2 * PATTERN.nbytes  # the tensor went through the wiretap, both ways...
    assert b"TENSORWIRE-SECRET" not in wiretap.seen  # ...and could not be read there


@pytest.mark.parametrize("case", ["no-keys", "wrong-dispatcher-key", "unknown-client-key"])
def test_peers_without_the_right_keys_get_nothing(cluster, keys, tmp_path, case):
    if case == "no-keys":
        use = None
    else:
        use = mixed_keys(keys, tmp_path, case, lambda d: _cli("keys", "--dir", str(d)).check_returncode())
    env_keys = os.environ.pop("TENSORWIRE_KEYS", None)
    try:
        with pytest.raises(tw.ConnectionFailed):
            tw.Session(cluster.address, CLIENT_TOKEN, keys=use, timeout=3)
    finally:
        if env_keys is not None:
            os.environ["TENSORWIRE_KEYS"] = env_keys


def _handshake_event(sock: zmq.Socket, address: str, timeout_s: float = 30) -> int:
    """Connect ``sock`` to ``address`` and return the first handshake outcome its monitor reports (succeeded or one
    of the failures). The monitor is attached before the connect: attached after it, a fast handshake's one event
    could come before the monitor existed, and a refused client key is not retried, so nothing would come after."""
    mon = sock.get_monitor_socket()
    sock.connect(address)
    wanted = {
        zmq.EVENT_HANDSHAKE_SUCCEEDED,
        zmq.EVENT_HANDSHAKE_FAILED_AUTH,
        zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
        zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
    }
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if mon.poll(int(1000 * max(0.0, deadline - time.monotonic()))):
                ev = zmq.utils.monitor.recv_monitor_message(mon)["event"]
                if ev in wanted:
                    return ev
        raise AssertionError("no handshake outcome")
    finally:
        sock.disable_monitor()
        mon.close(0)


@pytest.mark.parametrize("role", ["client", "service"])
def test_service_socket_authorises_service_keys_only(cluster, keys, role):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        apply_peer(sock, keys, role)
        # a client's key fails the handshake on the service socket; a service key completes it
        ok = _handshake_event(sock, cluster.service_address) == zmq.EVENT_HANDSHAKE_SUCCEEDED
        assert ok == (role == "service")
        if role == "service":  # and the service credential is still required on top of the key
            send(
                sock,
                {
                    "t": "register",
                    "v": PROTOCOL_VERSION,
                    "pid": 1,
                    "service": "worker",
                    "device": "cpu:5",
                    "token": CLIENT_TOKEN,
                    "instance": "y" * 32,
                },
            )
            assert sock.poll(30000)
            assert b"Unauthorized" in sock.recv()
    finally:
        sock.close(0)


def test_a_dispatcher_beyond_loopback_needs_keys(tmp_path):
    env = {**os.environ, "TENSORWIRE_SERVICE_TOKEN": "s" * 40}
    env.pop("TENSORWIRE_KEYS", None)
    # (refused before it binds anything: no port is opened)
    r = _cli("dispatcher", "--address", "tcp://0.0.0.0:0", "--service-address", "tcp://127.0.0.1:0", env=env)
    assert r.returncode == 1
    assert "Unauthorized" in r.stderr and "without CURVE keys" in r.stderr and "--insecure" in r.stderr
    env.pop("TENSORWIRE_SERVICE_TOKEN")
    r = _cli("dispatcher", "--address", "tcp://127.0.0.1:0", "--service-address", "tcp://127.0.0.1:0", env=env)
    assert r.returncode == 1 and "service credential" in r.stderr
