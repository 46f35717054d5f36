"""protocol/service.py: the stop event a service loop polls with its sockets, and the signals that set it."""

from __future__ import annotations

import os
import signal
import threading
import time

import zmq

from tensorwire.protocol.service import StopEvent, stop_event_on_signals


def _poller(stop: StopEvent) -> tuple[zmq.Poller, zmq.Socket]:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(stop, zmq.POLLIN)
    return poller, sock


def test_setting_the_event_ends_a_poll_at_once():
    stop = StopEvent()
    poller, sock = _poller(stop)
    try:
        threading.Timer(0.05, stop.set).start()
        t0 = time.monotonic()
        events = dict(poller.poll(30_000))
        assert stop.fileno() in events and sock not in events  # (a poller names a file by its number)
        assert time.monotonic() - t0 < 15  # (not the poll's 30 s)
        assert stop.is_set() and stop.wait(0)
    finally:
        sock.close()


def test_a_cleared_event_no_longer_ends_a_poll():
    stop = StopEvent()
    poller, sock = _poller(stop)
    try:
        stop.set()
        stop.set()  # (twice: one clear still empties it)
        stop.clear()
        assert not stop.is_set()
        assert dict(poller.poll(0)) == {}
    finally:
        sock.close()


def test_sigterm_sets_it_and_a_second_one_changes_nothing():
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        stop = stop_event_on_signals()
        poller, sock = _poller(stop)
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.wait(10)
            assert stop.fileno() in dict(poller.poll(0))
        finally:
            sock.close()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
