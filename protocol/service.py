"""Small helpers every service process shares: readiness lines, free ports, signal handling."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time

READY = "TENSORWIRE-READY"
#: where workers put the shared-memory files they exchange with their collectives rank
SHM_DIR = os.environ.get("TENSORWIRE_SHM_DIR", "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
#: the setting of :data:`HEARTBEAT_S` (a test cluster that waits for a lost service sets it shorter)
HEARTBEAT_ENV = "TENSORWIRE_HEARTBEAT_S"
HEARTBEAT_S = float(os.environ.get(HEARTBEAT_ENV, "0.5"))  # services and the dispatcher exchange a heartbeat this often
LIVENESS = 10  # ... and declare the other side dead after this many missed heartbeats
#: the threads a worker runs sessions' larger batches on beside its main loop (``backends/jobs.py``'s pool; a
#: ``LocalCluster`` passes it on to its workers: ``tw.set_num_interop_threads``)
EXEC_THREADS_ENV = "TENSORWIRE_EXEC_THREADS"
EXEC_THREADS_DEFAULT = 4


def default_worker_threads(devices: int) -> int:
    """The BLAS/OpenMP threads each of a host's ``devices`` workers runs kernels on when its cluster is given no
    number (``LocalCluster(worker_threads=None)``): the host's cores shared out between them."""
    return max(1, (os.cpu_count() or 1) // max(1, devices))


def spin_wait(poll, spin_s: float):
    """Busy-wait up to ``spin_s`` seconds for ``poll(0)`` (a zmq poll, which releases the GIL) to report a message,
    yielding the core to any other runnable thread between checks; what ``poll`` reported (truthy) when a message is
    there, else False.

    A process blocked in poll on a virtual machine wakes slowly (an idle vCPU halts: hundreds of microseconds per
    message), so a process that expects an answer soon spins a little before it blocks."""
    if spin_s <= 0:
        return False
    end = time.perf_counter() + spin_s
    for _ in range(1 << 30):  # bounded by the time
        got = poll(0)
        if got:
            return got
        if time.perf_counter() >= end:
            return False
        os.sched_yield()
    return False


_CORES = os.cpu_count() or 1
_spare = [0.0, True]  # (when last read, whether a core was spare then)


def spare_core(now: float) -> bool:
    """Whether this host is not oversubscribed: its 1-minute load average (``/proc/loadavg``) at most its cores plus
    one (this process and the worker it waits on count in it), read at most every 0.2 s; True where it cannot be
    read. A process may spin for an answer only then: on a busy host a spinning waiter takes the core the answer's
    producer needs (with 2 cores at load 5-6, a one-op round trip took 1.2-2.1 ms spinning, 0.32-0.76 ms
    blocking; at load 1-2, 222-233 us spinning, 293-551 us blocking)."""
    if now - _spare[0] < 0.2:
        return _spare[1]
    _spare[0] = now
    try:
        with open("/proc/loadavg", "rb") as f:
            _spare[1] = core_is_spare(f.read(), _CORES)
    except OSError:
        _spare[1] = True
    return _spare[1]


def core_is_spare(loadavg: bytes, cores: int) -> bool:
    """From ``/proc/loadavg`` (``0.52 0.61 0.58 2/312 4123``: the 1-, 5- and 15-minute load averages first): whether
    the last minute's load is at most ``cores + 1``; True when the line cannot be read."""
    try:
        return float(loadavg.split()[0]) <= cores + 1
    except (ValueError, IndexError):
        return True


def announce_ready(service: str, **info) -> None:
    """Print the one line a launcher waits for: ``TENSORWIRE-READY {json}``."""
    sys.stdout.write(f"{READY} {json.dumps({'service': service, **info})}\n")
    sys.stdout.flush()


def parse_ready(line: str) -> dict | None:
    if not line.startswith(READY):
        return None
    return json.loads(line[len(READY):].strip())


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


#: allocations of at least this many bytes get pages of their own, returned when freed (glibc's ``M_MMAP_THRESHOLD``;
#: ``TENSORWIRE_MMAP_THRESHOLD``, 0 leaves glibc's default, which grows with the largest block freed, except in a
#: worker, whose trim threshold fixes it at 128 KiB). 16 MiB: a BiLSTM step's 4-9 MB blocks come from a worker's
#: kept heap instead of being mapped and faulted in afresh each time (docs/architecture.md, issue 37)
MMAP_THRESHOLD = 16 << 20


def tune_gc() -> None:
    """Services allocate many short-lived objects per message: freeze what startup made and collect the
    young generation less often, so the cyclic collector does not sit in the middle of round trips. And large
    blocks (tensors, message frames) are mapped on their own and unmapped when freed: glibc's default threshold
    rises to the largest block freed so far, after which freed megabytes stay in the heap, and a service's memory
    then depends on the order its blocks came and went (a worker taking 96 MiB of uploads under a 16 MiB quota
    peaked 28-63 MiB over its start, 38-44 with the threshold fixed; blocks under the threshold, reused most, stay in
    the heap, and a larger block's page faults are small beside the work it holds)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    fix_mmap_threshold()


def fix_mmap_threshold() -> bool:
    """Set glibc's mmap threshold to ``TENSORWIRE_MMAP_THRESHOLD`` bytes (default :data:`MMAP_THRESHOLD`), which also
    stops it from moving; False where there is no glibc or it is turned off (0)."""
    raw = os.environ.get("TENSORWIRE_MMAP_THRESHOLD", "").strip()
    try:
        n = int(raw) if raw else MMAP_THRESHOLD
    except ValueError:
        n = MMAP_THRESHOLD
    if n <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, n))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # (musl and others: no mallopt)
        return False


def profiled(service: str, fn, *args):
    """Run ``fn(*args)``; when ``TENSORWIRE_PROFILE`` names a directory, under cProfile, writing the stats to
    ``<dir>/<service>-<pid>.prof`` when it returns (a developer's tool: ``python -m pstats`` reads the file)."""
    out_dir = os.environ.get("TENSORWIRE_PROFILE")
    if not out_dir:
        return fn(*args)
    import cProfile  # lazy: a developer's tool, under TENSORWIRE_PROFILE only

    prof = cProfile.Profile()
    try:
        return prof.runcall(fn, *args)
    finally:
        os.makedirs(out_dir, exist_ok=True)
        prof.dump_stats(os.path.join(out_dir, f"{service}-{os.getpid()}.prof"))


class StopEvent(threading.Event):
    """A ``threading.Event`` a zmq poller can wait on too (``poller.register(stop, zmq.POLLIN)``): its ``fileno()``
    is readable once it is set, so a loop waiting for messages wakes at once when it is asked to stop, not at the
    end of its poll's timeout."""

    def __init__(self):
        super().__init__()
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def set(self) -> None:
        # The flag, then the file, then the waiters, all under the event's lock: a poll woken by the file finds the
        # flag set, and a ``wait()`` returns (it takes the lock) only once the file is readable. Setting the flag
        # (``Event.set``) before writing the file, unlocked, let a waiter return and poll nothing (CI saw it, the
        # event set from another thread); the file before the flag let a woken poll find it unset.
        with self._cond:
            self._flag = True
            try:
                os.write(self._w, b"x")
            except BlockingIOError:  # (set before: already readable)
                pass
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:  # (as set: the flag and the file change together)
            self._flag = False
            with contextlib.suppress(BlockingIOError):
                while os.read(self._r, 4096):  # (no longer readable)
                    pass

    def fileno(self) -> int:
        return self._r

    def __del__(self):
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


def stop_event_on_signals() -> StopEvent:
    """An event set by SIGINT/SIGTERM, so a service loop can stop cleanly (and at once: :class:`StopEvent`)."""
    ev = StopEvent()
    setting = []  # (not empty: a handler is setting it)

    def handler(signum, frame):
        # The handler runs on the main thread between two of its bytecodes, so possibly where that thread holds the
        # event's lock (no RLock): inside ``ev.wait()`` between its wake-up and its return (``tensorwire up``'s loop
        # waits a second at a time), or inside a first signal's ``ev.set()`` (two SIGTERMs in a row hung a worker).
        # Setting the event here would wait for that lock forever; a thread sets it once the main thread lets go.
        # No call comes between the check and the mark, so no handler can run in between.
        if setting:
            return
        setting.append(signum)
        threading.Thread(target=ev.set, name="tw-stop", daemon=True).start()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    return ev
