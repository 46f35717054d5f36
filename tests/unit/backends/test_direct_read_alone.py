"""The worker's read of its direct socket alone (``DirectChannel.read_alone``, the serve loop's path after a turn
that took direct messages only): it returns the next message as a raw echo's read does, steps aside at once when
the dispatcher's socket has a message (which is then not starved by a client in a round-trip loop), and gives up
within its bound when nothing comes. Real zmq sockets: the worker's ROUTER, a client's DEALER, a dispatcher PAIR."""

from __future__ import annotations

import time

import pytest
import zmq

from tensorwire.backends import idle_spin
from tensorwire.backends.direct import DirectChannel
from tensorwire.backends.idle_spin import IdleSpin
from tensorwire.protocol.wire import pack_header


@pytest.fixture
def sockets(tmp_path):
    ctx = zmq.Context.instance()
    ch = DirectChannel(ctx, "cpu:0", "worker-instance", f"ipc://{tmp_path}/direct.sock")
    assert ch.sock is not None, ch.why_not
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.connect(ch.address)
    disp_w, disp = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    name = f"inproc://read-alone-dispatcher-{tmp_path.name}"  # (one per test: a closed socket's name frees late)
    disp.bind(name)
    disp_w.connect(name)
    yield ch, client, disp, disp_w
    for s in (client, disp, disp_w):
        s.close(0)
    ch.close()


def _wait_for(sock) -> None:
    assert sock.poll(5000), "the message did not arrive"


@pytest.mark.parametrize("spare", [True, False])
def test_the_next_message_is_read(sockets, monkeypatch, spare):
    monkeypatch.setattr(idle_spin, "spare_core", lambda now: spare)  # (spinning on a quiet host; blocking on a busy)
    ch, client, disp, _ = sockets
    spin = IdleSpin(0.01, cores=2)
    spin.worked()
    client.send(pack_header({"t": "hello"}))
    msg = None
    for _ in range(200):  # (each read waits at most ALONE_READ_MS)
        msg = ch.read_alone(spin, disp)
        if msg is not None:
            break
    assert msg is not None and len(msg) == 2  # [route, header]
    assert spin.hits + (not spare) >= 1


def test_a_dispatcher_message_goes_first(sockets):
    ch, client, disp, disp_w = sockets
    client.send(pack_header({"t": "hello"}))
    _wait_for(ch.sock)
    disp_w.send(b"hb")
    _wait_for(disp)
    assert ch.read_alone(IdleSpin(0.0, cores=2), disp) is None  # the loop then polls every socket ...
    assert ch.sock.poll(0)  # ... and the client's message is still there for it


def test_nothing_to_read_ends_within_the_bound(sockets):
    ch, _, disp, _ = sockets
    t0 = time.monotonic()
    assert ch.read_alone(IdleSpin(0.0, cores=2), disp) is None
    assert time.monotonic() - t0 < 5.0  # (bounded: ALONE_READ_MS, not the loop's heartbeat period)


def test_reads_that_time_out_back_off_and_a_catch_resets(sockets):
    ch, client, disp, _ = sockets
    spin = IdleSpin(0.0, cores=2)
    tried = []
    for _ in range(12):  # nothing comes: reads time out, then chances are skipped 1, 2, 4 ... at a time
        before = ch.alone_skip
        assert ch.read_alone(spin, disp) is None
        tried.append(before == 0)
    assert tried[:4] == [True, False, True, False] and tried[4:7] == [False, True, False] and sum(tried) == 4
    while ch.alone_skip:  # (the skipped chances run out) ...
        assert ch.read_alone(spin, disp) is None
    client.send(pack_header({"t": "hello"}))
    _wait_for(ch.sock)
    assert ch.read_alone(spin, disp) is not None and ch.alone_skip_next == 1  # ... and a catch resets the back-off
