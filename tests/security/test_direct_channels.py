"""Issue 30: direct channels. Single-device work goes straight to the worker under a capability the dispatcher
granted; the worker checks it by itself. A capability is bound to its session, its worker process, the
dispatcher's epoch and an expiry; a forged, altered or foreign one is refused with a typed error; a malformed
direct message changes nothing; and a session's order holds when its work moves between the two paths. On the
workers' host the channel runs on the same-host lane (``protocol/lane.py``): the attacks below run on both it and
the ZeroMQ channel (``attacker``), and a broken frame table on the lane closes that connection alone."""

from __future__ import annotations

import os
import secrets
import socket
import stat
import struct
import time

import msgpack
import numpy as np
import pytest

import tensorwire as tw
from tensorwire.protocol.capability import CAP_BYTES, channel_key, issue, verify, worker_id
from tensorwire.protocol.errors import Unauthorized
from tensorwire.protocol.wire import array_from_frame

from .conftest import CLIENT_TOKEN, RawLane, check_typed, hello, raw_socket, recv, send

VALUES = np.linspace(-1, 1, 5, dtype=np.float32)


# -- the capability itself ------------------------------------------------------------------------------
def test_capability_binds_session_worker_epoch_and_expiry():
    inst = secrets.token_hex(16)
    key, sid = channel_key(inst), os.urandom(8)
    cap = issue(key, sid, "cpu:0", "epoch-a", expires=2_000_000_000)
    assert len(cap) == CAP_BYTES
    assert verify(key, cap, "cpu:0", "epoch-a", now=1_000) == sid
    bad = [
        (channel_key(secrets.token_hex(16)), cap, "cpu:0", "epoch-a", 1_000),  # another worker process (restart)
        (key, cap, "cpu:1", "epoch-a", 1_000),  # another device
        (key, cap, "cpu:0", "epoch-b", 1_000),  # a restarted dispatcher
        (key, cap, "cpu:0", "epoch-a", 2_000_000_001),  # expired
        (key, os.urandom(8) + cap[8:], "cpu:0", "epoch-a", 1_000),  # another session's id pasted in
        (key, cap[:8] + (3_000_000_000).to_bytes(8, "big") + cap[16:], "cpu:0", "epoch-a", 1_000),  # longer life
        (key, cap[:-1], "cpu:0", "epoch-a", 1_000),
        (key, "text", "cpu:0", "epoch-a", 1_000),
        (key, cap, "cpu:0", None, 1_000),  # a worker not registered with any dispatcher
    ]
    for args in bad:
        with pytest.raises(Unauthorized):
            verify(*args[:4], now=args[4])
    assert worker_id(inst) != worker_id(secrets.token_hex(16)) and inst not in worker_id(inst)


# -- a cluster: the victim's session and raw attackers ----------------------------------------------------
@pytest.fixture(scope="module")
def victim(cluster):
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    x = s.const(VALUES, "cpu:0")
    y = (x * 2).exp()
    np.testing.assert_allclose(y.numpy(), np.exp(VALUES * 2), rtol=1e-6)
    yield s, x, y
    s.close()


def _grant(welcome: dict, device: str) -> dict:
    (g,) = [g for g in welcome["channels"] if g["device"] == device]
    return g


@pytest.fixture(scope="module", params=["channel", "lane"])
def attacker(cluster, request):
    """A raw session of its own (with its own grants) and a raw peer of cpu:0's worker: a DEALER on its direct
    channel, or its same-host lane (``protocol/lane.py``), where every attack must fare as on the channel."""
    d = raw_socket(cluster.address)
    w = hello(d, CLIENT_TOKEN)
    g = _grant(w, "cpu:0")
    c = raw_socket(g["address"])
    lane = RawLane(c, g["cap"]) if request.param == "lane" else None
    yield d, w, g, lane or c
    d.close(0)
    c.close(0)
    if lane is not None:
        lane.close()


def _hello_ok(c, q: int) -> dict:
    """The worker's answer to a hello numbered ``q`` on ``c``: on the lane it carries the nonce (the proof it is the
    worker's socket)."""
    return {"t": "ok", "q": q, "device": "cpu:0", **({"nonce": c.info["nonce"]} if isinstance(c, RawLane) else {})}


def test_single_device_work_goes_direct(victim):
    s, x, y = victim
    z = (y + x).sum()
    assert z.item() == pytest.approx(float(np.sum(np.exp(VALUES * 2) + VALUES)), rel=1e-5)
    plane = s.cluster_status()["data_plane"]
    assert plane["cpu:0"]["path"] == "direct" and plane["cpu:0"]["connected"], plane
    assert plane["cpu:0"]["messages"] >= 3, plane


def test_a_session_on_the_workers_host_runs_on_a_lane_only_its_user_can_open(victim):
    s, x, y = victim
    assert s.cluster_status()["data_plane"]["cpu:0"]["lane"]
    folder = os.path.dirname(s._plane.channels["cpu:0"].sock.sock.getpeername())
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and os.stat(folder).st_uid == os.getuid()


def test_a_broken_frame_table_on_the_lane_closes_that_connection_and_nothing_else(victim):
    s, x, y = victim
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(15)
    raw.connect(s._plane.channels["cpu:0"].sock.sock.getpeername())
    raw.sendall(struct.pack("<QI", 12, 2) + struct.pack("<Q", 1 << 40) + b"abcd")  # (sizes past the body)
    try:
        assert raw.recv(16) == b""
    except ConnectionResetError:
        pass
    raw.close()
    assert float((y + 1).sum().item()) == pytest.approx(float(np.sum(np.exp(VALUES * 2) + 1)), rel=1e-5)
    assert s.cluster_status()["data_plane"]["cpu:0"]["lane"]


def test_worker_answers_its_own_capability(attacker):
    _, _, g, c = attacker
    send(c, {"t": "hello", "q": 1, "cap": g["cap"]})
    assert recv(c) == _hello_ok(c, 1)


@pytest.mark.parametrize("cap", ["missing", "random", "other-device", "altered-sid", "truncated"])
def test_forged_capabilities_are_refused(attacker, victim, cap):
    d, w, g, c = attacker
    s, x, y = victim
    caps = {"missing": None, "random": os.urandom(CAP_BYTES), "other-device": _grant(w, "cpu:1")["cap"],
            "altered-sid": bytes.fromhex(s.session_id) + g["cap"][8:], "truncated": g["cap"][:20]}
    send(c, {"t": "run", "q": 7, "cap": caps[cap], "fetch": [x._id, y._id], "ext": [], "outs": []})
    h = recv(c)
    assert h["t"] == "error" and h["q"] == 7, h
    check_typed(h["error"])
    assert h["error"]["code"] == "Unauthorized", h
    np.testing.assert_allclose(y.numpy(), np.exp(VALUES * 2), rtol=1e-6)  # the victim's data is untouched


def test_a_capability_names_its_own_sessions_tensors_only(attacker, victim):
    """The attacker's valid capability acts for the attacker's session: the victim's ids do not exist there."""
    _, _, g, c = attacker
    s, x, y = victim
    send(c, {"t": "run", "q": 8, "cap": g["cap"], "fetch": [x._id], "release": [y._id], "ext": [], "outs": []})
    h = recv(c)
    assert h["t"] == "done" and not h["values"], h
    (fe,) = h["fetch_errors"]
    check_typed(fe)
    assert fe["code"] == "NotFound", fe
    np.testing.assert_allclose(y.numpy(), np.exp(VALUES * 2), rtol=1e-6)  # the release named nothing of the victim's


MALFORMED = {
    "unknown-type": {"t": "steal"},
    "q-not-an-int": {"t": "run", "q": [1], "fetch": []},
    "ext-not-ints": {"t": "run", "q": 2, "ext": ["a"], "outs": []},
    "unknown-op": {"t": "run", "q": 3, "ext": [], "outs": [70], "devs": ["cpu:0"], "nodes": [["pwn", [], {}, 0]]},
    "another-device": {"t": "run", "q": 4, "ext": [], "outs": [71], "devs": ["cpu:1"],
                       "nodes": [["full", [], {"shape": [2], "dtype": "float32", "value": 1.0}, 0]]},
    "collective": {"t": "run", "q": 5, "ext": [], "outs": [72, 73], "devs": ["cpu:0"],
                   "nodes": [["full", [], {"shape": [2], "dtype": "float32", "value": 1.0}, 0],
                             ["collective", [0], {"key": 1, "kind": "all_reduce", "op": "sum", "n": 1, "rank": 0},
                              0]]},
    "outs-too-short": {"t": "run", "q": 6, "ext": [], "outs": [], "devs": ["cpu:0"],
                       "nodes": [["full", [], {"shape": [2], "dtype": "float32", "value": 1.0}, 0]]},
    "forward-reference": {"t": "run", "q": 9, "ext": [], "outs": [74], "devs": ["cpu:0"],
                          "nodes": [["neg", [0], {}, 0]]},
    "fetch-without-q": {"t": "run", "fetch": [1]},
    "dyn-malformed": {"t": "run", "q": 10, "ext": [], "outs": [], "plan": 5, "dyn": [["x", {}]]},
    "too-many-inputs": {"t": "run", "q": 13, "ext": [], "outs": [75, 76], "devs": ["cpu:0"],  # (past MAX_INPUTS)
                        "nodes": [["full", [], {"shape": [1], "dtype": "float32", "value": 1.0}, 0],
                                  ["cat", [0] * 4097, {"dim": 0}, 0]]},
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_direct_messages_get_typed_errors_and_change_nothing(attacker, victim, name):
    _, _, g, c = attacker
    s, x, y = victim
    send(c, {**MALFORMED[name], "cap": g["cap"]})
    if name == "fetch-without-q":  # (no q, no answer: nothing waits for it; the next answer proves the worker lives)
        send(c, {"t": "hello", "q": 11, "cap": g["cap"]})
        assert recv(c)["t"] in ("error", "ok")
    else:
        h = recv(c)
        assert h["t"] == "error", h
        check_typed(h["error"])
    send(c, {"t": "hello", "q": 12, "cap": g["cap"]})  # the worker goes on serving
    for _ in range(3):
        h = recv(c)
        if h.get("q") == 12:
            break
    assert h["t"] == "ok", h
    np.testing.assert_allclose(y.numpy(), np.exp(VALUES * 2), rtol=1e-6)



def _replay_slice(c, cap: bytes, q: int, out: int, starts: list, stops: list) -> dict:
    """Replay plan 90 (``arange(10)[2:6]``, sent first by the caller) with new slice bounds; fetch its output."""
    send(c, {"t": "run", "q": q, "cap": cap, "ext": [], "outs": [out - 1, out], "plan": 90, "fetch": [out],
             "release": [out - 1], "dyn": [[1, {"starts": starts, "stops": stops}]]})
    return recv(c)


def test_replayed_slice_bounds_are_checked_against_the_plan(attacker, victim):
    """A slice's bounds are dynamic (a plan is reused at a new offset, its kernels take the start as a parameter):
    a replay whose bounds leave the tensor or change the planned length is refused with a typed error, before
    anything reads memory by them; bounds in range answer right."""
    _, _, g, c = attacker
    s, x, y = victim
    nodes = [["arange", [], {"start": 0, "step": 1, "n": 10, "dtype": "float32"}, 0],
             ["slice", [0], {"starts": [2], "stops": [6], "steps": [1]}, 0]]
    send(c, {"t": "run", "q": 20, "cap": g["cap"], "ext": [], "outs": [80, 81], "plan": 90, "nodes": nodes,
             "devs": ["cpu:0"], "fetch": [81], "release": [80]})
    h = recv(c)
    assert h["t"] == "done" and h["values"], h
    for q, (starts, stops) in enumerate([([8], [12]), ([-2], [2]), ([0], [6]), ([3], [5])], 21):
        h = _replay_slice(c, g["cap"], q, 83 + 2 * q, starts, stops)
        assert h["t"] in ("done", "error"), h
        errors = [h["error"]] if h["t"] == "error" else h.get("fetch_errors") or h.get("errors") or []
        assert errors, h  # refused, not answered
        check_typed(errors[0])
        assert errors[0]["code"] == "ProtocolError", errors[0]
    send(c, {"t": "run", "q": 30, "cap": g["cap"], "ext": [], "outs": [149, 150], "plan": 90, "fetch": [150],
             "release": [149], "dyn": [[1, {"starts": [6], "stops": [10]}]]})
    h, values = _fetch_reply(c)
    assert h["t"] == "done" and not h.get("fetch_errors"), h
    assert values[0].tolist() == [6.0, 7.0, 8.0, 9.0]
    np.testing.assert_allclose(y.numpy(), np.exp(VALUES * 2), rtol=1e-6)

def _fetch_reply(c) -> tuple[dict, list]:
    """The next answer and the values it fetched (in frames, or in its header when small: wire.INLINE_MAX)."""
    msg = c.recv_multipart()
    h = msgpack.unpackb(msg[0], raw=False, strict_map_key=False)
    return h, [array_from_frame(d, msg[1:])[1] for d in h.get("values") or ()]


def test_forged_replays_of_a_known_plan_are_refused(attacker, victim):
    """A replay of a plan the worker knows (the commonest direct message, which the worker runs at once, without
    queueing it: ``Executor.replay_now``) is checked as any batch is: a forged capability, another session's
    tensors, inputs of another shape, an output id that is a live handle, malformed replay fields are refused with
    typed errors and change nothing; a good replay answers right."""
    d, w, g, c = attacker
    s, x, y = victim
    src = np.arange(4, dtype=np.float32)
    send(c, {"t": "run", "q": 50, "cap": g["cap"], "ext": [], "outs": [200], "devs": ["cpu:0"],
             "nodes": [["const", [], {"shape": [4], "dtype": "float32", "frame": 0}, 0]]}, src.tobytes())
    assert recv(c)["t"] == "done"
    plan = {"ext": [200], "plan": 96}
    send(c, {"t": "run", "q": 51, "cap": g["cap"], **plan, "outs": [201], "devs": ["cpu:0"],
             "nodes": [["neg", [-1], {}, 0]], "fetch": [201]})
    h, frames = _fetch_reply(c)
    assert h["t"] == "done" and frames[0].tolist() == (-src).tolist(), h

    def replay(q: int, **fields) -> dict:
        send(c, {"t": "run", "q": q, "cap": g["cap"], **plan, "outs": [210 + q], "fetch": [210 + q], **fields})
        return recv(c)

    forged = {"random": os.urandom(CAP_BYTES), "other-device": _grant(w, "cpu:1")["cap"],
              "victim-sid": bytes.fromhex(s.session_id) + g["cap"][8:]}
    for q, cap in enumerate(forged.values(), 52):
        h = replay(q, cap=cap, ext=[x._id], release=[y._id])
        assert h["t"] == "error" and h["error"]["code"] == "Unauthorized", h
        check_typed(h["error"])
    odd = s.const(np.zeros((2, 2), np.float32), "cpu:0")  # (the victim's own: the attacker cannot name it)
    cases = {
        "victim's input": dict(ext=[x._id]),
        "another shape": dict(ext=[202]),
        "live output id": dict(outs=[200]),
        "outs and out_first": dict(out_first=300),
        "malformed temps": dict(temps=[[0, 5]]),
        "malformed dyn": dict(dyn=[[0, "x"]]),
        "release not ints": dict(release=["a"]),
    }
    send(c, {"t": "run", "q": 59, "cap": g["cap"], "ext": [200], "outs": [202], "devs": ["cpu:0"],
             "nodes": [["reshape", [-1], {"shape": [2, 2]}, 0]], "sync": True})
    assert recv(c)["t"] == "done"
    for q, (name, fields) in enumerate(cases.items(), 60):
        h = replay(q, **fields)
        errors = [h["error"]] if h["t"] == "error" else (h.get("errors") or []) + (h.get("fetch_errors") or [])
        assert errors and not h.get("values"), (name, h)
        check_typed(errors[0])
        assert errors[0]["code"] in ("ProtocolError", "NotFound", "DependencyFailed"), (name, errors[0])
        assert "NotFound" in errors[0]["message"] if errors[0]["code"] == "DependencyFailed" else True, errors[0]
    send(c, {"t": "run", "q": 70, "cap": g["cap"], "fetch": [200]})
    h, frames = _fetch_reply(c)
    assert h["t"] == "done" and frames and frames[0].tolist() == src.tolist(), h
    send(c, {"t": "run", "q": 71, "cap": g["cap"], **plan, "outs": [290], "fetch": [290], "release": [290 - 1]})
    h, frames = _fetch_reply(c)
    assert h["t"] == "done" and not h["errors"] and frames[0].tolist() == (-src).tolist()
    np.testing.assert_allclose(y.numpy(), np.exp(VALUES * 2), rtol=1e-6)
    np.testing.assert_array_equal(odd.numpy(), np.zeros((2, 2), np.float32))


def test_a_closed_sessions_capability_is_refused(cluster):
    d = raw_socket(cluster.address)
    w = hello(d, CLIENT_TOKEN)
    g = _grant(w, "cpu:0")
    send(d, {"t": "close", "q": 1, "k": w["key"]})
    assert recv(d)["t"] == "closed"
    c = raw_socket(g["address"])
    try:
        deadline = time.monotonic() + 20  # (the worker hears of the close from the dispatcher, asynchronously: a
        while True:  # wait bounded in time, not in tries, which a busy machine answered faster than the close came)
            send(c, {"t": "hello", "q": 2, "cap": g["cap"]})
            h = recv(c)
            if h["t"] == "error" or time.monotonic() > deadline:
                break
        assert h["t"] == "error" and h["error"]["code"] == "Unauthorized", h
    finally:
        c.close(0)
        d.close(0)


# -- one session's order across the two paths ----------------------------------------------------------------
def test_order_holds_when_work_switches_paths(cluster):
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    try:
        a = s.const(np.zeros(4, np.float32), "cpu:0")
        expect = np.zeros(4)
        for i in range(12):
            a = a + 1  # direct on cpu:0 (after the fence)
            expect = expect + 1
            b = a.to("cpu:1")  # cross-device: the relay, behind a fence on cpu:0
            c = b * (i + 1)  # cpu:1 alone: direct again once the relay is synced, or relayed while cooling down
            np.testing.assert_array_equal(c.numpy(), expect * (i + 1))
            del b, c
        np.testing.assert_array_equal(a.numpy(), expect)
        made_direct = (a * 3).sum()  # made on a channel, then read by a relayed cross-device batch (its locs)
        moved = made_direct.to("cpu:1") + 1
        assert moved.item() == pytest.approx(float(expect.sum() * 3 + 1))
        del a, made_direct, moved
        s.synchronize()
        st = s.memory_stats()["devices"]
        for dev in ("cpu:0", "cpu:1"):  # nothing left but the session's cached scalars (x * 2 keeps a 0-d 2.0)
            assert st[dev]["buffers"] == sum(1 for k in s._scalars if k[3] == dev), (dev, st)
        plane = s.cluster_status()["data_plane"]
        assert {"cpu:0", "cpu:1"} <= set(plane), plane
    finally:
        s.close()


def test_deferred_errors_cross_paths(cluster):
    """An error of direct work surfaces at the next sync point, even when that one goes through the relay."""
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    try:
        bad = s.const(np.arange(5, dtype=np.int64), "cpu:0").gather(0, s.const(np.array([9]), "cpu:0"))
        s.flush()
        with pytest.raises(IndexError):
            bad.to("cpu:1").numpy()
        ok = s.const(VALUES, "cpu:0") + 1
        np.testing.assert_allclose(ok.numpy(), VALUES + 1)
    finally:
        s.close()


# -- shared memory on one host ----------------------------------------------------------------------------------
def _io_files(prefix: str) -> list[str]:
    d, base = os.path.split(prefix)
    return [f for f in os.listdir(d) if f.startswith(base + "-")]


def test_large_values_move_through_shared_memory_and_files_are_reused(cluster):
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    try:
        a = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)  # 4 MiB
        t = s.const(a, "cpu:0")
        np.testing.assert_array_equal(s.fetch(t), a)
        ch = s._plane.channels["cpu:0"]
        assert ch.shm is not None, "client and worker share this host: shared memory should be on"
        before = len(_io_files(ch.shm))
        for k in range(20):  # uploads and downloads through files the worker lends and takes back
            v = s.fetch(s.const(a + k, "cpu:0") * 2)
            np.testing.assert_array_equal(v, (a + k) * 2)
            assert not v.flags.writeable
            del v
        assert len(_io_files(ch.shm)) <= before + 4, "files are reused, not made anew each time"
        small = s.fetch(s.const(a[:10], "cpu:0"))  # under the threshold: a frame, as before
        np.testing.assert_array_equal(small, a[:10])
    finally:
        s.close()


def test_shared_memory_paths_are_the_workers_own(attacker, victim):
    """A client cannot make the worker read a file it chose, or a file lent to another session."""
    _, _, g, c = attacker
    s, x, y = victim
    victim_ch = s._plane.channels["cpu:0"]
    s.fetch(s.const(np.zeros(1 << 19, np.float32), "cpu:0"))  # the victim holds files on loan now
    lent = list(victim_ch.maps.maps)  # (the paths of the files it mapped)
    for path in ["/etc/passwd", *(lent[:1] or [])]:
        send(c, {"t": "run", "q": 30, "cap": g["cap"], "ext": [], "outs": [80], "devs": ["cpu:0"],
                 "nodes": [["const", [], {"shape": [4], "dtype": "float32", "frame": 0}, 0]],
                 "shm_frames": [[0, path]]}, b"")
        h = recv(c)
        assert h["t"] == "error" and h["error"]["code"] == "ProtocolError", h
        check_typed(h["error"])
        send(c, {"t": "hello", "q": 31, "cap": g["cap"], "shm_give": [path]})
        h = recv(c)
        assert h["t"] == "error" and h["error"]["code"] == "ProtocolError", h
    send(c, {"t": "shm_take", "q": 32, "cap": g["cap"], "sizes": [-1]})
    assert recv(c)["error"]["code"] == "ProtocolError"
    np.testing.assert_allclose(y.numpy(), np.exp(VALUES * 2), rtol=1e-6)


# -- worker to worker ----------------------------------------------------------------------------------------------
def test_moves_go_worker_to_worker_and_reuse_the_sources_files(cluster):
    s = tw.Session(cluster.address, CLIENT_TOKEN)
    try:
        a = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)  # 4 MiB: through shared memory
        x = s.const(a, "cpu:0")
        np.testing.assert_array_equal(s.fetch(x), a)  # (uploaded on cpu:0's channel: its hello told us its files)
        ch = s._plane.channels["cpu:0"]
        for k in range(12):
            y = x.to("cpu:1") * (k + 1)
            np.testing.assert_allclose(s.fetch(y), a * (k + 1), rtol=1e-6)
            del y
        s.synchronize()
        assert len(_io_files(ch.shm)) <= 12, "the source's files come back to its pool and are reused"
        small = s.const(a[:7], "cpu:0").to("cpu:1")  # a frame on the direct channel
        np.testing.assert_array_equal(s.fetch(small), a[:7])
    finally:
        s.close()


def test_a_client_cannot_pass_itself_off_as_a_worker(attacker, victim):
    """Worker-to-worker messages are signed with the service credential's key: a client's forgery is dropped."""
    _, _, g, c = attacker
    s, x, y = victim
    forged = {"t": "xfer", "s": bytes.fromhex(s.session_id), "x": 1, "dtype": "float32", "shape": [5], "shm": "",
              "from": "", "err": None, "mac": os.urandom(32)}
    send(c, forged, np.zeros(5, np.float32).tobytes())
    send(c, {"t": "xfer_give", "paths": ["/dev/shm/x"], "mac": os.urandom(32)})
    send(c, {"t": "hello", "q": 40, "cap": g["cap"]})  # the worker is fine, and answered nothing to the forgeries
    assert recv(c) == _hello_ok(c, 40)
    moved = (y.to("cpu:1") + 0).numpy()
    np.testing.assert_allclose(moved, np.exp(VALUES * 2), rtol=1e-6)


def test_a_wildcard_bind_advertises_the_address_that_reaches_the_dispatcher():
    from tensorwire.backends.direct import advertised

    assert advertised("tcp://0.0.0.0:5560", "tcp://127.0.0.1:5556") == "tcp://127.0.0.1:5560"
    assert advertised("tcp://10.0.0.7:5560", "tcp://127.0.0.1:5556") == "tcp://10.0.0.7:5560"  # (as given)
    assert advertised("ipc:///run/tw/cpu-0.sock", None) == "ipc:///run/tw/cpu-0.sock"
