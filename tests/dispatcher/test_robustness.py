"""Hostile and malformed input, isolation between sessions, faults: the cluster keeps serving."""

from __future__ import annotations

import gc
import os
import threading
import time

import msgpack
import numpy as np
import pytest
import zmq

import tensorwire as tw
from tensorwire.protocol import PROTOCOL_VERSION


def _raw(address: str, hello: bool = True) -> zmq.Socket:
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 10000)
    s.connect(address)
    if hello:
        s.send(msgpack.packb({"t": "hello", "v": PROTOCOL_VERSION, "token": None, "client": "raw"}))
        welcome = msgpack.unpackb(s.recv())
        assert welcome["t"] == "welcome"
        _KEYS[s] = welcome["key"]
    return s


_KEYS: dict = {}  # raw socket -> its session key


def _keyed(s: zmq.Socket, frames: list) -> list:
    """``frames`` with the socket's session key added to a header that decodes to a map (others as they are)."""
    try:
        h = msgpack.unpackb(frames[0], raw=False)
    except Exception:
        return frames
    if not isinstance(h, dict):
        return frames
    return [msgpack.packb({**h, "k": _KEYS[s]}), *frames[1:]]


def _reply(s: zmq.Socket) -> dict:
    return msgpack.unpackb(s.recv_multipart()[0], raw=False)


@pytest.fixture(scope="module")
def victim(session):
    """A tensor of the normal session that every hostile message must leave untouched."""
    v = tw.arange(10, dtype=tw.float32) * 3
    v.numpy()
    return v


GARBAGE = [
    [b"\xff\xfe\xfd garbage"],
    [msgpack.packb({"t": "batch"})[:-3]],  # truncated msgpack
    [msgpack.packb([1, 2, 3])],  # not a map
    [msgpack.packb({"t": 5})],  # wrong type for t
    [msgpack.packb({"t": "batch", "q": 1, "nodes": "zzz", "outs": [], "sync": True})],
    [msgpack.packb({"t": "batch", "q": 1, "nodes": [["no_such_op", [], None, 0]], "devs": ["cpu:0"],
                    "outs": [900001], "sync": True})],
    [msgpack.packb({"t": "batch", "q": 1, "nodes": [["full", [], {"shape": [1 << 30, 1 << 30], "dtype": "float32",
                                                                    "value": 1}, 0]], "devs": ["cpu:0"],
                    "outs": [900002], "fetch": [900002]})],  # absurd declared size
    [msgpack.packb({"t": "batch", "q": 1, "nodes": [["add", [-1, -1], None, 0]], "devs": ["cpu:0"],
                    "ext": [1], "outs": [900003], "fetch": [900003]})],  # a handle of another session
    [msgpack.packb({"t": "batch", "q": 1, "nodes": [["const", [], {"shape": [4], "dtype": "float32",
                                                                     "frame": 0}, 0]], "devs": ["cpu:0"],
                    "outs": [900004], "fetch": [900004]}), b"abc"],  # frame of the wrong size
    [msgpack.packb({"t": "batch", "q": 1, "nodes": [["reshape", [5], {"shape": "x"}, 0]], "devs": ["cpu:0"],
                    "outs": [900005], "sync": True})],  # reference to a later node
    [msgpack.packb({"t": "batch", "q": 1, "nodes": [["full", [], {"shape": [2], "dtype": "nope", "value": 1}, 0]],
                    "devs": ["cpu:0"], "outs": [900006], "fetch": [900006]})],
    [msgpack.packb({"t": "batch", "q": 1, "plan": 77, "ext": [], "outs": [1], "fetch": [1]})],  # unknown plan
    [msgpack.packb({"t": "nonsense", "q": 1})],
]


@pytest.mark.parametrize("frames", GARBAGE, ids=range(len(GARBAGE)))
def test_malformed_messages_get_errors_and_nothing_breaks(cluster, session, victim, frames):
    s = _raw(cluster.address)
    try:
        s.send_multipart(_keyed(s, frames))
        h = _reply(s)
        assert h["t"] in ("error", "result")
        err = h.get("error") or (h.get("fetch_errors") or h.get("errors"))[0]
        assert err["code"] in ("ProtocolError", "NotFound", "ShapeError", "Unauthorized", "DependencyFailed",
                               "DTypeError"), err
        assert err["message"]
        # the same raw session still works afterwards
        s.send(msgpack.packb({"t": "ping", "q": 9}))
        assert _reply(s)["t"] == "pong"
    finally:
        _KEYS.pop(s, None)
        s.close(0)
    # and the normal session's data is intact
    np.testing.assert_array_equal(victim.numpy(), np.arange(10, dtype=np.float32) * 3)


def test_no_hello_is_unauthorized(cluster):
    s = _raw(cluster.address, hello=False)
    s.send(msgpack.packb({"t": "batch", "q": 3, "sync": True}))
    h = _reply(s)
    assert h["error"]["code"] == "Unauthorized"
    s.close(0)


def test_version_mismatch_is_refused(cluster):
    s = _raw(cluster.address, hello=False)
    s.send(msgpack.packb({"t": "hello", "v": 999, "token": None}))
    h = _reply(s)
    assert h["error"]["code"] == "ProtocolError" and "version" in h["error"]["message"]
    s.close(0)


def test_cannot_read_another_sessions_handle(cluster, session, victim):
    other = tw.Session(cluster.address)
    try:
        with pytest.raises(tw.NotFound):
            other.flush(fetch=[victim._id])
        # it works for its own tensors
        with tw.use_session(other):
            assert tw.ones(3).sum().item() == 3
    finally:
        other.close()
    np.testing.assert_array_equal(victim.numpy(), np.arange(10, dtype=np.float32) * 3)


def test_unreachable_dispatcher_fails_fast():
    t0 = time.monotonic()
    with pytest.raises(tw.ConnectionFailed, match="127.0.0.1:1"):
        tw.Session("tcp://127.0.0.1:1", timeout=1.0)
    assert time.monotonic() - t0 < 5


def test_unknown_device_lists_devices(session):
    with pytest.raises(tw.DeviceError, match="cpu:0"):
        tw.zeros(2, device="cpu:7")


def test_execution_error_names_user_line(session):
    x = tw.arange(5)
    bad = x.gather(0, tw.tensor([7]))  # recorded here
    good = x * 2
    with pytest.raises(IndexError) as ei:
        tw.synchronize()
    assert "test_robustness.py" in str(ei.value)
    assert isinstance(ei.value, tw.TensorwireError)
    np.testing.assert_array_equal(good.numpy(), np.arange(5) * 2)  # independent work carried on
    with pytest.raises(tw.TensorwireError):
        (bad + 1).numpy()  # dependents fail too


def test_released_tensors_free_server_memory(session):
    before = tw.memory_stats()["devices"]["cpu:0"]["bytes"]
    xs = [tw.ones(1000) * i for i in range(20)]
    tw.synchronize()
    mid = tw.memory_stats()["devices"]["cpu:0"]["bytes"]
    # the 20 results are held (the ones() temporaries are already freed; small cached scalars may come and go)
    assert 20 * 4000 - 1000 <= mid - before < 21 * 4000
    del xs
    gc.collect()
    after = tw.memory_stats()["devices"]["cpu:0"]["bytes"]
    assert mid - after >= 20 * 4000  # all 20 released with the next message


def test_closed_session_buffers_are_gone(cluster, session):
    other = tw.Session(cluster.address)
    with tw.use_session(other):
        keep = [tw.randn(100) for _ in range(5)]  # noqa: F841 - (made on the device: a small ones would be held)
        tw.synchronize()
    sid = other.session_id
    admin = tw.Session(cluster.address, cluster.admin_token)  # other sessions' buffers are an admin's view
    try:
        stats = admin.cluster_status()["devices"]["cpu:0"]
        assert stats[sid]["buffers"] == 5
        assert sid not in session.cluster_status()["devices"]["cpu:0"]  # a plain session sees only its own
        other.close()
        stats = admin.cluster_status()["devices"]["cpu:0"]
        assert sid not in stats
    finally:
        admin.close()


def test_threads_each_see_only_their_own_tensors(cluster):
    errors = []

    def work(k: int):
        try:
            s = tw.Session(cluster.address)
            with tw.use_session(s):
                x = tw.full((50,), float(k))
                for _ in range(20):
                    x = x + 1
                assert float(x.sum()) == 50 * (k + 20)
            s.close()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors


def test_processes_each_see_only_their_own_tensors(cluster):
    import subprocess
    import sys

    code = """
import sys, tensorwire as tw
s = tw.connect(sys.argv[1]); k = int(sys.argv[2])
x = tw.full((100,), float(k), device="cpu:%d" % (k % 2))
for _ in range(30):
    x = x * 1 + 1
assert float(x.sum()) == 100 * (k + 30), float(x.sum())
assert len(s.cluster_status()["sessions"]) >= 1
print("ok", k)
"""
    procs = [subprocess.Popen([sys.executable, "-c", code, cluster.address, str(k)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for k in range(4)]
    for k, p in enumerate(procs):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.strip() == f"ok {k}"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads a process's environment from /proc (Linux)")
def test_local_workers_bound_the_idle_spin_of_blas_threads(cluster):
    # OpenBLAS's default (~0.1 s of busy-waiting after every multiply) would take the shared cores from the client
    # and the other services; LocalCluster bounds it unless the user's environment sets it
    from tensorwire.cluster import BLAS_THREAD_TIMEOUT

    pid = cluster.services["cpu:0"].proc.pid
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    want = os.environ.get("OPENBLAS_THREAD_TIMEOUT", BLAS_THREAD_TIMEOUT)
    assert env[b"OPENBLAS_THREAD_TIMEOUT"].decode() == want
