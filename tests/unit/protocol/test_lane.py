"""The same-host lane's framing and bounds (``protocol/lane.py``), on a listener and sockets in this process: whole
messages only, whatever pieces they arrive in; a malformed frame table closes that connection alone; answers past the
bounds are dropped with an ``OutOfMemory`` error in their place; a peer that reads nothing at all loses its
connection; the client's end reports a closed lane as ``LaneClosed``."""

from __future__ import annotations

import os
import select
import socket
import stat
import struct
import threading

import pytest
import zmq

from tensorwire.protocol.lane import EVENTS, POLLIN, LaneClosed, LaneListener, LaneSocket, encode
from tensorwire.protocol.wire import pack_header, recv_frames, send_parts, unpack_header


@pytest.fixture
def listener(tmp_path):
    lane = LaneListener("cpu:0", byte_bound=1 << 20, hwm=4, max_message=1 << 24, folder=str(tmp_path),
                        pack=pack_header)
    yield lane
    lane.close()


def _take_all(lane, want: int, tries: int = 200) -> list:
    got: list = []
    for _ in range(tries):  # (bounded: each take reads what the kernel holds now)
        got += lane.take()
        if len(got) >= want:
            break
    return got


def test_the_folder_is_private_and_goes_with_the_listener(tmp_path):
    lane = LaneListener("cpu:0", 1 << 20, 4, 1 << 20, folder=str(tmp_path))
    mode = stat.S_IMODE(os.stat(lane.dir).st_mode)
    assert mode == 0o700 and os.stat(lane.dir).st_uid == os.getuid()
    assert stat.S_ISSOCK(os.stat(lane.path).st_mode)
    lane.close()
    assert not os.path.exists(lane.dir)


def test_messages_round_trip_with_their_frames(listener):
    c = LaneSocket(listener.path, 20, "cpu:0")
    payload = bytes(range(256)) * 300  # (77 KB: more than one read on the way)
    send_parts(c, [pack_header({"t": "run", "q": 1}), payload, memoryview(b"")])
    (msg,) = _take_all(listener, 1)
    route = msg[0].bytes
    assert unpack_header(msg[1].bytes) == {"t": "run", "q": 1}
    assert bytes(msg[2]) == payload and bytes(msg[3]) == b""
    assert listener.send(route, [pack_header({"t": "done", "q": 1}), b"abc"], 1)
    assert c.getsockopt(EVENTS) == POLLIN
    back = recv_frames(c, zmq.NOBLOCK)
    assert unpack_header(back[0].bytes) == {"t": "done", "q": 1} and bytes(back[1]) == b"abc"
    with pytest.raises(zmq.Again):
        recv_frames(c, zmq.NOBLOCK)
    c.close()


def test_a_message_in_pieces_is_taken_whole(listener):
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(listener.path)
    data = b"".join(bytes(b) for b in encode([pack_header({"t": "hello", "q": 3}), b"xyz" * 10])[0])
    for i in range(len(data)):  # one byte at a time: nothing is handed on before the whole message came
        raw.sendall(data[i:i + 1])
        got = listener.take()
        if i < len(data) - 1:
            assert got == []
    if not got:
        got = _take_all(listener, 1)
    assert unpack_header(got[0][1].bytes) == {"t": "hello", "q": 3} and bytes(got[0][2]) == b"xyz" * 10
    raw.close()


@pytest.mark.parametrize("bad", ["no-frames", "sizes-do-not-add-up", "too-large"])
def test_a_broken_frame_table_closes_that_connection_only(listener, bad):
    good = LaneSocket(listener.path, 20, "cpu:0")
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(listener.path)
    _take_all(listener, 0, tries=3)  # (both accepted)
    if bad == "no-frames":
        raw.sendall(struct.pack("<QI", 8, 0) + b"\0" * 8)
    elif bad == "sizes-do-not-add-up":
        raw.sendall(struct.pack("<QI", 8 + 4, 1) + struct.pack("<Q", 99) + b"abcd")
    else:
        raw.sendall(struct.pack("<QI", 1 << 40, 1))
    assert _take_all(listener, 1, tries=20) == []
    raw.settimeout(5)
    try:
        assert raw.recv(16) == b""  # (closed by the listener...
    except ConnectionResetError:
        pass  # ... with bytes of ours unread)
    send_parts(good, [pack_header({"t": "hello", "q": 5})])
    (msg,) = _take_all(listener, 1)
    assert unpack_header(msg[1].bytes)["q"] == 5
    raw.close()
    good.close()


def _connected(listener) -> tuple[LaneSocket, bytes]:
    c = LaneSocket(listener.path, 10_000, "cpu:0")  # (reads wait up to 10 s for a message)
    send_parts(c, [pack_header({"t": "hello", "q": 0})])
    (msg,) = _take_all(listener, 1)
    return c, msg[0].bytes


def test_answers_past_the_bounds_become_errors_in_their_place(listener):
    c, route = _connected(listener)
    sent = [listener.send(route, [pack_header({"t": "done", "q": q}), b"\1" * (300 << 10)], q) for q in range(1, 8)]
    assert sent[0] and not sent[-1], sent  # (the socket's buffer, the queue, then the bounds: dropped)
    got = []
    done = threading.Event()

    def worker_loop():  # (the worker's side writes what the reader made room for, as its loop does)
        for _ in range(100_000):
            if done.is_set():
                return
            select.select([listener], [], [], 0.05)  # (its loop's poll: the lane's descriptor)
            listener.take()

    t = threading.Thread(target=worker_loop, daemon=True)
    t.start()
    try:
        for _ in range(len(sent)):
            h = unpack_header(recv_frames(c)[0].bytes)
            got.append((h["q"], "done" if h["t"] == "done" else h["error"]["code"]))
    finally:
        done.set()
        t.join(10)
    assert [q for q, _ in got] == list(range(1, 8))  # every request answered, in order...
    assert [k == "done" for _, k in got] == sent  # ... the dropped ones by an error in their place
    assert {k for _, k in got} == {"done", "OutOfMemory"}
    c.close()


def test_a_peer_that_reads_nothing_loses_its_connection(listener):
    c, route = _connected(listener)
    for q in range(1, 100):  # (bounded: twice the message bound closes it)
        listener.send(route, [pack_header({"t": "done", "q": q}), b"\1" * (300 << 10)], q)
        if route not in listener.conns:
            break
    assert route not in listener.conns and q <= 2 * listener.hwm + 4, q
    with pytest.raises(LaneClosed):
        for _ in range(100):  # (what was written before the close, then its end)
            recv_frames(c)
    assert c.getsockopt(EVENTS) == POLLIN  # (a closed lane stays readable: its reader learns it is closed)
    c.close()


def test_sending_on_a_lane_whose_worker_went_is_silent_and_the_read_says_so(tmp_path):
    lane = LaneListener("cpu:0", 1 << 20, 4, 1 << 20, folder=str(tmp_path))
    c = LaneSocket(lane.path, 20, "cpu:7")
    _take_all(lane, 0, tries=3)
    lane.close()
    for _ in range(3):
        send_parts(c, [pack_header({"t": "run"}), b"x" * 70000])  # (no error here, as ZeroMQ queues)
    with pytest.raises(LaneClosed) as e:
        recv_frames(c)
    assert e.value.device == "cpu:7"
    c.close()
