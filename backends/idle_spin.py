"""How long the worker's loop busy-waits for the next message after it answered one, before it blocks in poll.

A process blocked in ``zmq_poll`` pays a wake-up for every message (on a VM an idle vCPU halts: tens to hundreds of
microseconds), and a client in a round-trip loop (``(x + 1).numpy()``, a compiled step with its ``loss.item()``)
sends its next message a hundred-odd microseconds after our answer. So after an iteration that did work, the worker
polls without blocking for up to ``TENSORWIRE_WORKER_SPIN_US`` (yielding the core between checks), and blocks only
when nothing came. It spins only while a core is spare (``protocol.service.spare_core``: the 1-minute load at most
the cores plus one, and more than one core this process may run on), and backs off when spinning does not pay: after
a spin that caught nothing, the next ``skip`` idle periods block at once (``skip`` doubles on each miss up to
``MAX_SKIP``; a catch resets it), so a session that sends now and then costs at most one spin per burst.

The bound adapts to the session: a message that comes soon after a spin gave up (within ``MAX_BOUND_FACTOR`` times
the set bound of the spin's start) lengthens it to a quarter more than that gap, and is no miss; one that comes
later halves it back towards the set bound, and each catch eases it 2% back towards a quarter more than the gap it
caught (one late message, a collection's pause, does not keep the worker spinning long for good). The char-RNN
classifier's messages come 100-400 us apart: the set bound caught 86% of them and 99.5% adapted, a step 4-6%
shorter (742, 730 -> 696, 705 us).
"""

from __future__ import annotations

import os
import time

from tensorwire.protocol.errors import ConfigurationError
from tensorwire.protocol.service import spare_core, spin_wait

SPIN_ENV = "TENSORWIRE_WORKER_SPIN_US"
#: microseconds the worker busy-waits for the next message after work (``TENSORWIRE_WORKER_SPIN_US``; 0: never)
DEFAULT_SPIN_US = 250.0
#: the most idle periods a run of misses makes the worker block at once before it tries spinning again
MAX_SKIP = 64
#: the bound grows up to this many times the set one (2 ms by default) for a session whose messages come just late
MAX_BOUND_FACTOR = 8


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def spin_from_env(environ=os.environ) -> float:
    """The spin bound in seconds from ``TENSORWIRE_WORKER_SPIN_US`` (default ``DEFAULT_SPIN_US``);
    ConfigurationError with what to set when it is not a number of microseconds >= 0."""
    text = environ.get(SPIN_ENV, "")
    if not text.strip():
        return DEFAULT_SPIN_US * 1e-6
    try:
        us = float(text)
    except ValueError:
        raise ConfigurationError(
            f"{SPIN_ENV}={text!r}: expected microseconds, e.g. 250 (0 turns the spin off)") from None
    if not us >= 0 or us > 1e6:
        raise ConfigurationError(f"{SPIN_ENV}={text!r}: expected microseconds between 0 and 1000000 (0: off)")
    return us * 1e-6


class IdleSpin:
    """The spin policy of one loop (one thread): :meth:`wait` before blocking, :meth:`worked` after an iteration
    that did something. The spin is the client's (``protocol.service.spin_wait``); what its poll found is handed
    back, which spares the poll after it (each zmq poll of the worker's three sockets is five system calls)."""

    __slots__ = ("spin_s", "bound", "cores", "armed", "skip", "skip_next", "spins", "hits", "gave_up", "clock")

    def __init__(self, spin_s: float, cores: int | None = None):
        self.spin_s = spin_s  # the set bound
        self.bound = spin_s  # the bound now (module docstring: it lengthens up to MAX_BOUND_FACTOR times spin_s)
        self.cores = _usable_cores() if cores is None else cores
        self.armed = False  # the last iteration did work: the next message may be close behind
        self.skip = 0  # idle periods to block at once after the last miss ...
        self.skip_next = 1  # ... and how many the next miss skips
        self.spins = 0  # spins tried (tests, stats)
        self.hits = 0  # ... and those that caught a message
        self.gave_up: float | None = None  # when the last spin that caught nothing started (None: none since work)
        self.clock = time.monotonic

    def worked(self) -> None:
        """The loop took a message (or an outcome) this iteration."""
        self.armed = True
        if self.gave_up is not None:
            self._came_late()

    def _came_late(self) -> None:
        """Work came after a spin that caught nothing: when it came within the longest bound of that spin's start,
        the next spins last a quarter longer than that gap (up to it), and the miss's back-off is undone; when it
        came later (a pause), the bound halves back towards the set one."""
        gap = self.clock() - self.gave_up
        self.gave_up = None
        longest = self.spin_s * MAX_BOUND_FACTOR
        if gap <= longest:
            self.bound = min(longest, max(self.bound, gap * 1.25))
            self.skip, self.skip_next = 0, 1
        else:
            self.bound = max(self.spin_s, self.bound * 0.5)

    def wait(self, poll):
        """Before blocking: when that may pay, call ``poll(0)`` (a zmq poll, which releases the GIL) until it reports
        something, for up to the bound, yielding the core between checks. Returns what it reported (the caller uses
        it rather than poll again), or None: block as usual."""
        if not self.armed or self.spin_s <= 0 or self.cores < 2:
            return None
        self.armed = False
        if self.skip:
            self.skip -= 1
            return None
        if not spare_core(time.monotonic()):
            return None
        self.spins += 1
        start = self.clock()
        got = spin_wait(poll, self.bound)
        if got:
            self.hits += 1
            self.skip_next = 1
            if self.bound > self.spin_s:  # (a bound a late message lengthened eases back to what catches them now)
                self.bound = max(self.spin_s, self.bound * 0.98, (self.clock() - start) * 1.25)
            return got
        self.gave_up = start
        self.skip = self.skip_next
        self.skip_next = min(self.skip_next * 2, MAX_SKIP)
        return None


__all__ = ["DEFAULT_SPIN_US", "IdleSpin", "MAX_BOUND_FACTOR", "MAX_SKIP", "SPIN_ENV", "spin_from_env"]
