"""Issue 15, finding 2 (any client could become a worker, and a worker's ``coll_ready`` could name any file) and
issue 16, finding 7 (two workers for one device replaced each other in a loop).

Services register with a service credential that clients never hold; a device is served by one live worker, and
a second registration is refused with a typed error while a worker that comes back after the old one was declared
dead is accepted; a shared-memory path in a service message must be one of the registered worker's own files.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import zmq

import tensorwire as tw
from tensorwire.cluster import mpiexec
from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol.named_service import start_heartbeats
from tensorwire.protocol.service import SHM_DIR

from .conftest import CLIENT_TOKEN, check_typed, raw_socket, recv, send

VALUES = np.arange(6, dtype=np.float32) + 0.5

pytestmark = pytest.mark.skipif(mpiexec() is None, reason="the coll_ready attack needs MPI (pip install '.[mpi]')")


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(devices=["cpu:0", "cpu:1"], token=CLIENT_TOKEN, autograd=False, collectives=True) as c:
        yield c


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
    assert float((x * 2).sum().item()) == float((VALUES * 2).sum())  # the real worker computes it, not a forger
    assert s.devices() == ["cpu:0", "cpu:1"]


# (before the fix, services presented the client token: that is what an attacker would hold and try)
def _register(cluster, device: str, token, instance: str = "impostor-instance-0123456789"):
    sock = raw_socket(cluster.service_address)
    send(
        sock,
        {
            "t": "register",
            "v": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "service": "worker",
            "device": device,
            "token": token,
            "instance": instance,
            "info": {"name": "impostor"},
        },
    )
    return sock, recv(sock)


@pytest.mark.parametrize("token", [None, "", CLIENT_TOKEN], ids=["none", "empty", "client-token"])
def test_a_client_cannot_register_as_a_worker(cluster, victim, token):
    sock, h = _register(cluster, "cpu:0", token)
    sock.close(0)
    assert h["t"] == "refused"
    check_typed(h["error"])
    assert h["error"]["code"] == "Unauthorized" and not h["retry"]
    _intact(victim)


def test_a_second_worker_for_a_served_device_is_refused(cluster, victim):
    # a raw registration with the real service credential (a misconfigured second host): refused, typed
    sock, h = _register(cluster, "cpu:0", getattr(cluster, "service_token", CLIENT_TOKEN))
    sock.close(0)
    assert h["t"] == "refused" and h["retry"]
    check_typed(h["error"])
    assert h["error"]["code"] == "DeviceError" and "already served" in h["error"]["message"]
    # the real command: it gives up at once here (TENSORWIRE_REGISTER_WAIT=0) with the error, instead of looping
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tensorwire.cli",
            "worker",
            "--device",
            "cpu:0",
            "--dispatcher",
            cluster.service_address,
        ],
        env={**cluster.env, "TENSORWIRE_REGISTER_WAIT": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "DeviceError" in r.stderr and "already served" in r.stderr, r.stderr
    _intact(victim)  # the first worker still serves cpu:0: no swap, no WorkerLost


def _wait_for_collective(sock, instance: str) -> tuple[bytes, int]:
    """As the impostor worker: answer nothing, until the dispatcher sends a fragment with a collective."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        send(sock, {"t": "hb", "of": "cpu:1", "i": instance})  # stay alive in the dispatcher's eyes
        h = recv(sock)
        if h["t"] == "run" and h.get("coll"):
            return h["s"], next(iter(h["coll"].values()))
    raise AssertionError("no collective reached the impostor worker")


def test_coll_ready_naming_a_foreign_file_writes_nothing(cluster, victim, tmp_path):
    s, _ = victim
    target = tmp_path / "victim.bin"
    original = bytes(range(64))
    target.write_bytes(original)
    other_worker = os.path.join(
        cluster.env.get("TENSORWIRE_SHM_DIR", SHM_DIR), f"tensorwire-{cluster.services['cpu:0'].proc.pid}-cpu-0-0"
    )
    # the real cpu:1 worker dies; once the dispatcher has declared it dead, a newcomer may serve cpu:1
    # (a value made on cpu:1, through the dispatcher: its loss is the dispatcher's to declare; an upload the client
    # holds would travel again with the batch that reads it, and a lane would report the loss before the dispatcher)
    s._plane.enabled = False
    try:
        lost = s.const(np.ones(3, np.float32), "cpu:1") * 2
        lost.numpy()
        cluster.services["cpu:1"].kill()
        with pytest.raises(tw.WorkerLost):
            (lost + 1).numpy()
    finally:
        s._plane.enabled = True
    instance = "impostor-instance-abcdef0123456789"
    sock, h = _register(
        cluster, "cpu:1", getattr(cluster, "service_token", CLIENT_TOKEN), instance
    )  # (a compromised service host)
    # it stays alive as a real service does, heartbeating from a thread of its own (on a loaded machine a refused
    # collective can take longer than the liveness window, and a dead impostor would get no second collective)
    alive = threading.Event()
    start_heartbeats(zmq.Context.instance(), cluster.service_address, "cpu:1", alive, instance)
    try:
        assert h["t"] == "registered"  # a worker coming after the old one was declared dead is accepted
        for path in (str(target), other_worker):  # outside the cluster's directory; another worker's file
            xs = [s.const(np.full(4, 3.0, np.float32), "cpu:0"), s.const(np.full(4, 4.0, np.float32), "cpu:1")]
            tw.distributed.all_reduce(xs)
            s.flush()
            sid, gk = _wait_for_collective(sock, instance)
            send(
                sock,
                {
                    "t": "coll_ready",
                    "s": sid,
                    "key": gk,
                    "device": "cpu:1",
                    "path": path,
                    "dtype": "float32",
                    "shape": [4],
                    "out_shape": [4],
                    "kind": "all_reduce",
                    "op": "sum",
                    "src": 0,
                    "n": 2,
                    "rank": 1,
                },
            )
            with pytest.raises(tw.ServiceUnavailable, match="not its own shared memory"):
                xs[0].numpy()
        assert target.read_bytes() == original  # no rank mapped it, nothing was written
    finally:
        alive.set()
        send(sock, {"t": "bye"})
        sock.close(0)
    # the real worker comes back (accepted once the impostor is gone) ...
    cluster.start_workers(["cpu:1"])
    with pytest.raises(tw.WorkerLost, match="cpu:1"):  # (what the session had on the impostor is gone with it)
        s.synchronize()
    _intact(victim)
    # ... and the collectives service was not left waiting on the refused collectives
    ys = [s.const(np.full(4, 1.0, np.float32), d) for d in ("cpu:0", "cpu:1")]
    tw.distributed.all_reduce(ys)
    np.testing.assert_array_equal(ys[1].numpy(), np.full(4, 2.0))
