"""The worker loop's busy-wait after work (``backends/idle_spin.py``): it catches a message that comes within its
bound, blocks at once when not armed or when spinning does not pay (backing off after misses), and never spins on a
host without a spare core. A real zmq pair stands in for the worker's poller."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from tensorwire.backends import idle_spin
from tensorwire.backends.idle_spin import MAX_SKIP, IdleSpin, spin_from_env


@pytest.fixture
def pair(request):
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    # (a name per test: closing the last test's socket frees its endpoint on zmq's I/O thread, later under load)
    endpoint = f"inproc://idle-spin-{request.node.name}"
    a.bind(endpoint)
    b.connect(endpoint)
    yield a, b
    a.close(0)
    b.close(0)


@pytest.fixture(autouse=True)
def quiet_host(monkeypatch):
    monkeypatch.setattr(idle_spin, "spare_core", lambda now: True)  # (a busy host: test_busy_host_never_spins)


def test_a_message_within_the_bound_is_caught_without_blocking(pair):
    a, b = pair
    spin = IdleSpin(0.5, cores=2)
    spin.worked()
    t = threading.Timer(0.005, b.send, (b"next",))
    t.start()
    t0 = time.perf_counter()
    assert spin.wait(a.poll) == zmq.POLLIN  # (what the poll found: the caller does not poll again)
    assert time.perf_counter() - t0 < 0.5 and a.recv() == b"next"
    assert (spin.spins, spin.hits) == (1, 1)
    t.join()


def test_no_spin_unless_the_last_iteration_did_work(pair):
    a, _ = pair
    spin = IdleSpin(0.05, cores=2)
    t0 = time.perf_counter()
    assert spin.wait(a.poll) is None and spin.spins == 0
    spin.worked()
    assert spin.wait(a.poll) is None and spin.spins == 1  # (one spin, it caught nothing) ...
    assert spin.wait(a.poll) is None and spin.spins == 1  # ... and it is not armed again until work
    assert time.perf_counter() - t0 < 1.0


class _Clock:
    """A clock the test moves: each read is ``step`` seconds after the last."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_misses_back_off_and_a_catch_resets(pair):
    a, b = pair
    spin = IdleSpin(0.001, cores=2)
    spin.clock = _Clock(1.0)  # (the work after each miss comes long after it: a miss, not a message just late)
    skipped = []
    for _ in range(8):  # each miss skips twice as many idle periods as the last one
        spin.worked()
        assert spin.wait(a.poll) is None
        n = 0
        while spin.skip:
            spin.worked()
            before = spin.spins
            assert spin.wait(a.poll) is None and spin.spins == before  # (blocked at once: no spin)
            n += 1
        skipped.append(n)
    assert skipped == [1, 2, 4, 8, 16, 32, 64, 64] and MAX_SKIP == 64
    b.send(b"x")
    spin.worked()
    assert spin.wait(a.poll) and spin.skip == 0 and spin.skip_next == 1
    a.recv()
    spin.worked()
    assert spin.wait(a.poll) is None and spin.skip == 1  # (back to the shortest back-off)


def test_off_one_core_or_zero_bound(pair):
    a, b = pair
    b.send(b"x")
    for spin in (IdleSpin(0.05, cores=1), IdleSpin(0.0, cores=8)):
        spin.worked()
        assert spin.wait(a.poll) is None and spin.spins == 0


def test_busy_host_never_spins(pair, monkeypatch):
    a, b = pair
    monkeypatch.setattr(idle_spin, "spare_core", lambda now: False)
    b.send(b"x")
    spin = IdleSpin(0.05, cores=2)
    spin.worked()
    assert spin.wait(a.poll) is None and spin.spins == 0


def test_the_knob():
    assert spin_from_env({}) == pytest.approx(idle_spin.DEFAULT_SPIN_US * 1e-6)
    assert spin_from_env({"TENSORWIRE_WORKER_SPIN_US": "0"}) == 0.0
    assert spin_from_env({"TENSORWIRE_WORKER_SPIN_US": "80"}) == pytest.approx(80e-6)
    for bad in ("fast", "-1", "nan"):
        with pytest.raises(ValueError, match="TENSORWIRE_WORKER_SPIN_US"):
            spin_from_env({"TENSORWIRE_WORKER_SPIN_US": bad})


def test_work_just_after_a_spin_gave_up_lengthens_the_bound(pair):
    """A message that comes soon after the spin gave up (a loop that records ~300 us between its messages against a
    250 us bound) is no miss: the bound grows to catch the next one, up to MAX_BOUND_FACTOR times the set bound; a
    pause halves it back."""
    a, b = pair
    spin = IdleSpin(0.001, cores=2)
    clock = spin.clock = _Clock(0.0)
    spin.worked()
    assert spin.wait(a.poll) is None and spin.skip == 1  # (the spin caught nothing ...)
    clock.now += 0.0016  # (... and the next message came 1.6 ms after it started)
    spin.worked()
    assert spin.skip == 0 and spin.skip_next == 1 and spin.bound == pytest.approx(0.002)
    t0 = time.perf_counter()
    assert spin.wait(a.poll) is None and time.perf_counter() - t0 >= 0.002 - 1e-4  # (it spun the longer bound)
    clock.now += 0.1  # far later than any spin: a pause
    spin.worked()
    assert spin.bound == pytest.approx(0.001)
    for _ in range(3):  # never past its cap
        spin.skip = 0
        spin.worked()
        spin.wait(a.poll)
        clock.now += 0.00099 * idle_spin.MAX_BOUND_FACTOR
        spin.worked()
    assert spin.bound == pytest.approx(0.001 * idle_spin.MAX_BOUND_FACTOR)
    b.send(b"x")
    spin.skip = 0
    spin.worked()
    assert spin.wait(a.poll) == zmq.POLLIN and a.recv() == b"x"  # (caught at once: the bound eases 2%)
    assert spin.bound == pytest.approx(0.98 * 0.001 * idle_spin.MAX_BOUND_FACTOR)
    for _ in range(200):  # ... back to the set bound, catch by catch
        b.send(b"x")
        spin.worked()
        assert spin.wait(a.poll) and a.recv() == b"x"
    assert spin.bound == pytest.approx(0.001)
