"""kill -9 of the dispatcher under a live workload: its clients get ``ConnectionFailed`` within a bounded time; a
dispatcher restarted on the same addresses is found by the workers, which drop the buffers of the old sessions
(nobody can name them any more), and a new session that receives an old session's id is never credited with them."""

from __future__ import annotations

import time

import msgpack
import numpy as np
import pytest
import zmq

import tensorwire as tw
from tensorwire.protocol import PROTOCOL_VERSION

from .conftest import buffers, wait_until

ERROR_BOUND_S = 40  # measured ~12 s: the client pings after 2 s of silence and gives up 10 s later
FIXED_ID = b"\x00tw-fault-test"


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(devices=["cpu:0", "cpu:1"], autograd=False, collectives=False) as c:
        yield c


def _raw_session(address: str) -> zmq.Socket:
    """A session opened from a socket with a chosen id, as a restarted dispatcher could hand out again."""
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 20000)
    s.setsockopt(zmq.ROUTING_ID, FIXED_ID)
    s.connect(address)
    s.send(msgpack.packb({"t": "hello", "v": PROTOCOL_VERSION, "token": None, "client": "raw"}))
    assert msgpack.unpackb(s.recv())["t"] == "welcome"
    return s


def test_dispatcher_killed_then_restarted_orphans_dropped(cluster):
    raw = _raw_session(cluster.address)
    for dev in (0, 1):  # the fixed-id session holds a buffer on each worker
        raw.send(
            msgpack.packb(
                {
                    "t": "batch",
                    "q": 1,
                    "nodes": [["full", [], {"shape": [1000], "dtype": "float32", "value": 1.0}, 0]],
                    "devs": [f"cpu:{dev}"],
                    "outs": [10 + dev],
                    "sync": True,
                }
            )
        )
        assert msgpack.unpackb(raw.recv())["errors"] == []
    raw.close(0)
    s = tw.Session(cluster.address)
    x = tw.ones(1000, device="cpu:1", session=s)
    assert float((x * 2).sum().item()) == 2000.0
    st = s.cluster_status()
    assert buffers(st, FIXED_ID.hex()) == 2 and buffers(st) >= 3

    killed = time.monotonic()
    cluster.services["dispatcher"].kill()
    with pytest.raises(tw.ConnectionFailed, match="dispatcher"):
        for _ in range(1 << 20):  # a live workload: the kill lands while it runs
            (x * 2).sum().item()
    assert time.monotonic() - killed < ERROR_BOUND_S
    print(f"ConnectionFailed {time.monotonic() - killed:.1f} s after the dispatcher was killed")
    s.close()  # does not wait for a dispatcher it knows is gone

    cluster.restart("dispatcher")
    fresh = tw.Session(cluster.address)
    # the workers notice the silence (5 s) and register with the new dispatcher
    wait_until(lambda: len(fresh.devices()) == 2, 60, "workers registered again")
    print(f"service restored {time.monotonic() - killed:.1f} s after the kill (restart included)")
    raw = _raw_session(cluster.address)  # receives the old session's id
    st = fresh.cluster_status()
    assert buffers(st, FIXED_ID.hex()) == 0, st["devices"]
    assert buffers(st) == 0, st["devices"]  # the old sessions' buffers were dropped, not kept as orphans
    y = tw.arange(4.0, device="cpu:1", session=fresh)
    np.testing.assert_array_equal((y + 1).numpy(), [1, 2, 3, 4])
    raw.close(0)
    fresh.close()
