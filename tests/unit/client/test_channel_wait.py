"""The client's wait for an answer due on one direct channel (``Channel.wait_answer``, used by ``Session._wait``):
it reads that channel alone, as a raw echo's caller does, and steps aside when anything else wants the waiter (a
cancel from another thread, a message of the dispatcher), and ends within its bound when nothing comes, after which
the session watches every socket. Real zmq sockets: a worker's ROUTER and the channel's DEALER."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from tensorwire.channels import Channel


@pytest.fixture
def channel(tmp_path):
    ctx = zmq.Context.instance()
    worker = ctx.socket(zmq.ROUTER)
    worker.setsockopt(zmq.LINGER, 0)
    address = f"ipc://{tmp_path}/worker.sock"
    worker.bind(address)
    ch = Channel({"device": "cpu:0", "address": address, "wid": "w", "cap": b"c" * 40, "expires": time.time() + 60})
    ch.open(ctx)
    ch.sock.send(b"hello")
    route, _ = worker.recv_multipart()
    yield ch, worker, route
    ch.close()
    worker.close(0)


@pytest.mark.parametrize("spin_s", [0.0, 0.5])
def test_an_answer_is_read_on_the_channel_alone(channel, spin_s):
    ch, worker, route = channel
    t = threading.Timer(0.005, worker.send_multipart, ([route, b"answer"],))
    t.start()
    got = False
    for _ in range(1000):  # (each wait ends within CHANNEL_BLOCK_S)
        got = ch.wait_answer(spin_s, lambda: False)
        if got is not False:
            break
    t.join()
    if got is True:  # (the spin saw it: the session then reads it)
        got = [ch.sock.recv(copy=False)]
    assert [f.bytes for f in got] == [b"answer"]


@pytest.mark.parametrize("spin_s", [0.0, 0.5])
def test_anything_else_wanting_the_waiter_ends_the_wait(channel, spin_s):
    ch, worker, route = channel
    asked = []

    def others():
        asked.append(1)
        return True

    assert ch.wait_answer(spin_s, others) is True and asked  # (a cancel, the dispatcher: the session looks)
    worker.send_multipart([route, b"late"])
    assert ch.sock.poll(5000) and ch.sock.recv() == b"late"  # nothing was read meanwhile


def test_nothing_within_the_bound_hands_back_to_the_full_wait(channel):
    ch, _, _ = channel
    t0 = time.monotonic()
    assert ch.wait_answer(0.001, lambda: False) is False
    assert time.monotonic() - t0 < 5.0  # (CHANNEL_BLOCK_S, not the session's ping period)
