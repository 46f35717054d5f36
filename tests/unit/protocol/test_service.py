"""protocol/service.py: the stop event a service loop polls with its sockets, and the signals that set it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
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


def test_the_file_is_written_with_the_flag_set_under_the_lock(monkeypatch):
    """Whoever sees the event set finds its file readable and the other way round: ``set`` writes the file after
    setting the flag (a poll woken by the file finds ``is_set()``) and while it holds the event's lock (a ``wait()``,
    which takes that lock, returns only once the file is readable: CI saw ``wait()`` return and a poll of the file
    find nothing when another thread set the flag first and wrote the file after, unlocked)."""
    stop = StopEvent()
    seen = []
    real_write = os.write

    def recording_write(fd, data):
        if fd == stop._w:
            seen.append((stop.is_set(), stop._cond._is_owned()))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", recording_write)
    stop.set()
    assert seen == [(True, True)]
    assert stop.is_set() and select.select([stop.fileno()], [], [], 0)[0]


def test_a_wait_returns_with_the_file_readable_when_another_thread_sets_it():
    stop = StopEvent()
    for _ in range(200):  # (bounded: the race the order closes showed up about once in a suite run)
        stop.clear()
        threading.Thread(target=stop.set).start()
        assert stop.wait(10)
        assert select.select([stop.fileno()], [], [], 0)[0]


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


def test_a_signal_while_the_main_thread_holds_the_events_lock_still_sets_it():
    """A signal handled where the main thread holds the event's lock (inside ``wait()`` between its wake-up and its
    return: ``tensorwire up`` waits a second at a time) sets the event once the thread lets go; setting it in the
    handler itself waited for that lock forever (a child process, so that a hang is a timeout here)."""
    code = (
        "import signal, sys\n"
        "from tensorwire.protocol.service import stop_event_on_signals\n"
        "ev = stop_event_on_signals()\n"
        "with ev._cond:\n"
        "    signal.raise_signal(signal.SIGINT)\n"
        "    held = ev.is_set()\n"
        "sys.exit(0 if not held and ev.wait(10) else 3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], timeout=30, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
