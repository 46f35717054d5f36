"""Work relayed to a worker that is behind is never lost: the dispatcher's ROUTER dropped messages to a worker past
its send high-water mark (libzmq's default, 1000 messages) without a word, so a worker whose main thread fell that
far behind (a session's long queue of small relayed batches on a loaded host) never saw some batches, and the next
batch that read their outputs failed with ``NotFound`` (the flaky ``test_direct_late_hello.py`` busy test). The
dispatcher's socket for services now has no send high-water mark (``dispatcher/answers.py``, "Messages").

Stopping the worker (SIGSTOP, well inside its liveness bound) makes "behind" deterministic: nothing of the backlog
is read until it continues.

The backlog is bounded at the client (``client/channels.RelayWindow``): past ``TENSORWIRE_RELAY_MAX_BATCHES``
relayed batches or ``TENSORWIRE_RELAY_MAX_BYTES`` of their frames that no answer covered, the next relayed batch waits
(back-pressure, never a drop or an error), so the dispatcher holds at most a window of work for a stopped worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import numpy as np
import pytest

import tensorwire as tw
from tensorwire.protocol.errors import WorkerLost

#: relayed batches queued while the worker is stopped: past the ~1000 messages a ROUTER held for it before dropping
BACKLOG = 1500


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(devices=["cpu:0"], autograd=False, collectives=False) as c:
        yield c


def test_batches_relayed_to_a_stopped_worker_all_run_once_it_continues(cluster):
    s = tw.Session(cluster.address)
    try:
        s._plane.enabled = False  # (as TENSORWIRE_DIRECT=0 for this session: every batch through the dispatcher)
        s._relay.max_batches = 4 * BACKLOG  # (the client's own bound, tested below, would stop it at 256)
        y = s.const(np.zeros(4, np.float32), "cpu:0")
        np.testing.assert_array_equal(y.numpy(), np.zeros(4))
        pid = cluster.services["cpu:0"].proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            for _ in range(BACKLOG):
                y = y + 1
                s.flush()
            s.devices()  # answered by the dispatcher after it read (and sent on) every batch before it
        finally:
            os.kill(pid, signal.SIGCONT)
        np.testing.assert_array_equal(y.numpy(), np.full(4, BACKLOG, np.float32))
    finally:
        s.close()


def _relay_session(cluster, max_batches: int, max_bytes: int) -> tw.Session:
    s = tw.Session(cluster.address)
    s._plane.enabled = False  # every batch through the dispatcher
    s._relay.max_batches, s._relay.max_bytes = max_batches, max_bytes
    return s


def _until(cond, what: str, limit_s: float = 60.0) -> None:
    """Poll ``cond`` (a state of the client: no service is waited for here) until it holds."""
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


class _Sender(threading.Thread):
    """Relays ``n`` batches without waiting, each adding ``step`` to ``y`` (an upload of its own when ``upload``)."""

    def __init__(self, s: tw.Session, y, n: int, upload: bool):
        super().__init__(daemon=True)
        self.s, self.y, self.n, self.upload, self.sent, self.error = s, y, n, upload, 0, None

    def run(self):
        try:
            for k in range(self.n):
                step = self.s.const(np.full(self.y.shape, k % 7, np.float32), "cpu:0") if self.upload else 1
                self.y = self.y + step
                self.s.flush()
                self.sent = k + 1
        except BaseException as e:  # (the test raises it)
            self.error = e


def _expected(n: int, shape, upload: bool) -> np.ndarray:
    return np.full(shape, sum(k % 7 for k in range(n)) if upload else n, np.float32)


@pytest.mark.parametrize("upload", [False, True], ids=["count", "bytes"])
def test_a_client_relaying_to_a_stopped_worker_waits_at_its_bound(cluster, upload):
    """A client that relays faster than the worker runs (here: not at all) stops at its window, with the
    dispatcher's memory flat however many more batches the program means to send; once the worker continues,
    every batch runs, in order. ``count``: 1-element batches against a 64-batch window; ``bytes``: 256 KiB
    uploads against an 8 MiB window (unbounded, 600 of them would queue 150 MiB in the dispatcher)."""
    n, shape = (BACKLOG, (4,)) if not upload else (600, (64 << 10,))
    s = _relay_session(cluster, 64 if not upload else 1 << 20, 1 << 30 if not upload else 8 << 20)
    try:
        y = s.const(np.zeros(shape, np.float32), "cpu:0")
        np.testing.assert_array_equal(y.numpy(), np.zeros(shape))
        dispatcher = cluster.services["dispatcher"].proc.pid
        rss0 = _rss(dispatcher)
        pid = cluster.services["cpu:0"].proc.pid
        os.kill(pid, signal.SIGSTOP)
        sender = _Sender(s, y, n, upload)
        try:
            sender.start()
            _until(lambda: s._relay.waits > 0 or sender.error is not None, "the sender waits at its bound")
            assert sender.error is None, sender.error
            sent = sender.sent
            if not upload:  # stays at the bound: one batch past it is counted, then waits
                assert s._relay.unanswered <= 64 and s._relay.peak <= 64 and sent <= 64
            else:
                assert (s._relay.sent_bytes - s._relay.done_bytes) < (8 << 20) + (256 << 10) and sent <= 34
            time.sleep(0.5)  # (the window's last messages reach the dispatcher: libzmq queues them on both sides)
            rss_at_bound = _rss(dispatcher)
            time.sleep(0.5)  # (the sender is blocked: nothing more may reach the dispatcher meanwhile)
            assert sender.sent == sent and sender.is_alive()
            rss_later = _rss(dispatcher)
            assert rss_later - rss_at_bound < 4 << 20, (rss_at_bound, rss_later)
            print(f"dispatcher RSS: {rss0 >> 20} MiB before, {rss_later >> 20} MiB at the bound ({sent} sent)")
            if upload:  # what it holds for the stopped worker is the window, not the program's 150 MiB
                assert rss_later - rss0 < 48 << 20, (rss0, rss_later)
        finally:
            os.kill(pid, signal.SIGCONT)
        sender.join(120)
        assert not sender.is_alive() and sender.error is None, sender.error
        assert s._relay.peak <= (64 if not upload else 34)
        np.testing.assert_array_equal(sender.y.numpy(), _expected(n, shape, upload))
    finally:
        s.close()


def test_a_client_waiting_at_its_bound_for_a_worker_that_dies_gets_worker_lost():
    """The wait at the bound is a wait for an answer like any other: a worker that dies while the client waits for
    it ends the wait (the dispatcher fails what it owed), and the session's next answer raises ``WorkerLost``,
    as without the bound; nothing hangs."""
    with tw.LocalCluster(devices=["cpu:0"], autograd=False, collectives=False, restart=None) as c:
        s = _relay_session(c, 16, 1 << 30)
        try:
            y = s.const(np.zeros(4, np.float32), "cpu:0")
            y.numpy()
            proc = c.services["cpu:0"].proc
            os.kill(proc.pid, signal.SIGSTOP)
            sender = _Sender(s, y, 200, False)
            sender.start()
            _until(lambda: s._relay.waits > 0 or sender.error is not None, "the sender waits at its bound")
            os.kill(proc.pid, signal.SIGKILL)
            sender.join(60)
            assert not sender.is_alive(), "the wait at the bound hung after its worker died"
            with pytest.raises(WorkerLost):
                if sender.error is not None:
                    raise sender.error
                s.synchronize()
        finally:
            s.close()



def _rss(pid: int) -> int:
    """A process's resident memory in bytes (Linux's /proc: the services run on this host)."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _read_after_cancel(s: tw.Session) -> np.ndarray:
    """A new value's read after a cancel: the first answer may report the cancel (once), the next is the value. (Two
    uploads; a Python scalar would do as well: a cancel remakes the session's cached scalars, test_failure_chains)"""
    z = s.const(np.ones(4, np.float32), "cpu:0") + s.const(np.ones(4, np.float32), "cpu:0")
    try:
        return z.numpy()
    except tw.Cancelled:
        return z.numpy()


def test_tw_cancel_ends_a_wait_at_the_bound(cluster):
    """``tw.cancel()`` from another thread while a relaying thread waits at its bound for a slow worker: the queued
    work is cancelled and the wait ends with ``Cancelled`` at the relaying line (the wait is where that program is),
    not after the whole backlog ran; the session works on."""
    s = _relay_session(cluster, 4, 1 << 30)
    err, sent = [], [0]
    try:
        x = s.const(np.random.default_rng(0).standard_normal((600, 600)).astype(np.float32), "cpu:0")
        y = x.sum()
        y.numpy()

        def relay():
            nonlocal y
            try:
                for k in range(400):  # (~10-40 ms of a worker's thread each: ~10 s in all)
                    y = y + (x @ x).sum()
                    s.flush()
                    sent[0] = k + 1
            except BaseException as e:
                err.append(e)

        t = threading.Thread(target=relay, daemon=True)
        t.start()
        _until(lambda: s._relay.waits > 0 or err, "the sender waits at its bound")
        s.cancel()
        t.join(60)
        assert not t.is_alive()
        assert err and isinstance(err[0], tw.Cancelled), err
        assert sent[0] < 400
        np.testing.assert_array_equal(_read_after_cancel(s), np.full(4, 2, np.float32))
    finally:
        s.close()


@contextlib.contextmanager
def _ctrl_c_raises():
    """SIGINT raises ``KeyboardInterrupt`` in the main thread meanwhile, as in a program started from a terminal. A
    test run started in the background of a non-interactive shell (``pytest ... &``, a script's job) inherits SIGINT
    ignored, and Python then installs no handler: the signal did nothing, the wait at the bound went on until the
    dispatcher declared the stopped worker lost (``HEARTBEAT_S * LIVENESS``), its marks' ``WorkerLost`` answers
    emptied the window, and the loop ran to its end ("DID NOT RAISE"). The inherited handler is restored after."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def test_ctrl_c_ends_a_wait_at_the_bound(cluster):
    """Ctrl-C while the program waits at its bound for a stopped worker: ``KeyboardInterrupt`` at once (the queued
    work is cancelled, as for any interrupted wait), and the session works on once the worker continues."""
    s = _relay_session(cluster, 16, 1 << 30)
    try:
        y = s.const(np.zeros(4, np.float32), "cpu:0")
        y.numpy()
        pid = cluster.services["cpu:0"].proc.pid
        interrupted: list[int] = []  # (the relay's waits when the interrupter sent SIGINT)

        def interrupt():
            _until(lambda: s._relay.waits > 0, "the program waits at its bound")
            interrupted.append(s._relay.waits)
            os.kill(os.getpid(), signal.SIGINT)

        interrupter = threading.Thread(daemon=True, target=interrupt)
        with _ctrl_c_raises():
            os.kill(pid, signal.SIGSTOP)
            try:
                interrupter.start()
                with pytest.raises(KeyboardInterrupt):
                    for _ in range(10_000):
                        y = y + 1
                        s.flush()
            finally:
                os.kill(pid, signal.SIGCONT)
            interrupter.join(10)
        assert interrupted == [1] and s._relay.waits == 1, (interrupted, s._relay.waits)  # (one wait, interrupted)
        np.testing.assert_array_equal(_read_after_cancel(s), np.full(4, 2, np.float32))
    finally:
        s.close()
