"""Running sessions' work beside the worker's main thread, and stopping it between steps.

The worker's main thread owns the socket and every session's state. A batch whose estimated work
(:func:`plan_work`, elements touched) is small runs right there, as before (no thread hand-off in a round trip); a
larger one, or one that builds a compiled runner before it runs (``executor.builds_runner``: gcc may take seconds),
runs on a thread of a small pool (:class:`Pool`), so one session's long op or compile does not hold the others: the
numpy and compiled kernels release the GIL, a compile waits on a child process, and the OS shares the cores between
the threads. A session runs one
batch at a time, in order, whichever thread runs it.

Cancelling (:meth:`CancelScope.cancel`) raises :class:`Interrupt` in the pool thread at its next Python step: after
the kernel running then returns, before the next one starts (a kernel itself is never cut short). Only the code
inside a scope can be interrupted: running the plan's kernels, never the worker's bookkeeping. Code inside a scope
that starts a thread does so :func:`uninterrupted`: CPython (3.11) gives a new thread's state its creator's ident
until the new thread runs, so an interrupt sent in that window lands in the new thread, which dies before it has
started, and its creator waits for it forever (seen: a hot plan's compile submitted from a batch being cancelled
hung the worker, its main thread then blocked on the compile pool's lock).
"""

from __future__ import annotations

import collections
import ctypes
import os
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tensorwire.protocol.ops import OPS
from tensorwire.protocol.service import EXEC_THREADS_DEFAULT
from tensorwire.protocol.service import EXEC_THREADS_ENV as POOL_ENV
from tensorwire.protocol.shapes import numel

OFFLOAD_ENV = "TENSORWIRE_OFFLOAD_WORK"
#: batches touching at least this many elements run on the pool (~a few ms of work on one core)
OFFLOAD_WORK = int(os.environ.get(OFFLOAD_ENV, str(1 << 21)))


class Interrupt(BaseException):
    """Raised asynchronously in a pool thread to stop a cancelled batch (a BaseException, so the executor's
    ``except Exception`` fallbacks do not swallow it)."""


def _set_async_exc(ident: int, exc) -> int:
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc) if exc else None)


#: the scope the calling thread runs in, if any (:func:`uninterrupted` finds it there)
_current = threading.local()


class CancelScope:
    """Where a batch may be interrupted: ``with scope: run()`` on the thread that runs it; ``scope.cancel()`` from
    any thread."""

    __slots__ = ("lock", "thread", "cancelled", "shields")

    def __init__(self):
        self.lock = threading.Lock()
        self.thread: int | None = None
        self.cancelled = False
        self.shields = 0  # sections of the scope's code running uninterrupted (cancel waits for their end)

    def __enter__(self):
        with self.lock:
            if self.cancelled:
                raise Interrupt()
            self.thread = threading.get_ident()
        _current.scope = self
        return self

    def __exit__(self, *exc) -> bool:
        _current.scope = None
        with self.lock:
            if self.thread is not None:
                self.thread = None
                if self.cancelled:  # an interrupt may still be pending for this thread: take it back
                    _set_async_exc(threading.get_ident(), None)
        return False

    def cancel(self) -> None:
        with self.lock:
            if self.cancelled:
                return
            self.cancelled = True
            if self.thread is not None and not self.shields:
                _set_async_exc(self.thread, Interrupt)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Run the block without :class:`Interrupt` arriving in it (a cancel meanwhile takes effect at its end, raised
    there): for code inside a :class:`CancelScope` that starts threads (see the module's doc). Outside a scope it
    does nothing."""
    scope = getattr(_current, "scope", None)
    if scope is None:
        yield
        return
    with scope.lock:
        scope.shields += 1
    try:
        yield
    finally:
        with scope.lock:
            scope.shields -= 1
            pending = scope.cancelled and not scope.shields and scope.thread is not None
        if pending:
            raise Interrupt()


def plan_work(steps) -> int:
    """Elements a run of ``steps`` touches: each step's output, and the inputs it reads whole (a matmul counts its
    multiply-adds). A step that reads only what it outputs counts its output and its index inputs, not the whole of
    its source (:func:`reads_output_only`): a loader's 32 windows of a 1M-token text gathered by ``index`` touch 256
    elements of it, not a million, and a slice of it is a view. The sum of :func:`step_work` over the steps (the
    planner sums it once per remembered expansion: ``executor._Expansion``)."""
    return sum([step_work(s.op, s.shape, s.in_meta) for s in steps])


def step_work(op: str, shape, in_meta) -> int:
    """One step's part of :func:`plan_work`: a step of ``op`` making ``shape`` from inputs of ``in_meta``."""
    n = numel(shape)
    if op == "matmul" and in_meta:
        k = in_meta[0][0][-1] if in_meta[0][0] else 1
        n *= max(1, k)
    else:
        for s, _ in in_meta[1:] if reads_output_only(op) else in_meta:
            n = max(n, numel(s))
    return n + 64  # a step costs something however small


#: ops that read, of their first input, only the elements they output (beyond the op table's movement kind)
_GATHERS = frozenset({"index", "gather"})


def reads_output_only(op: str) -> bool:
    """Whether ``op`` reads of its first input only the elements it outputs (one read an output element): the op
    table's movement ops (views and copies: ``slice``, ``reshape``, ``permute``, ...) and the gathers (``index``,
    ``gather``), whose other inputs are their indices."""
    if op in _GATHERS:
        return True
    o = OPS.get(op)
    return o is not None and o.kind == "movement"


class Pool:
    """Daemon threads running submitted callables; each result is handed to ``done(result)`` on the thread that ran
    it, which must pass it on to the main thread (see :class:`Executor`).

    A task goes to the thread that went idle last (a stack, not a queue): with one batch at a time, the same thread
    runs them all. That matters for compiled CPU kernels: each thread that starts an OpenMP region has a team of its
    own, and the OS places a team that has run before on separate cores at once, while a team woken for the first
    time in a while may share a core with its helper for the whole kernel (the 8-op chain took 8 ms instead of 4 ms
    on about one call in four when the pool's four threads took turns)."""

    def __init__(self, threads: int | None = None):
        self.size = max(1, int(os.environ.get(POOL_ENV, EXEC_THREADS_DEFAULT)) if threads is None else int(threads))
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue] = []  # the idle threads' inboxes, the one idle most recently last
        self._backlog: collections.deque = collections.deque()  # tasks waiting for a thread (all are busy)
        self._closed = False

    def submit(self, fn) -> None:
        with self._lock:
            if self._idle:
                inbox = self._idle.pop()
            elif len(self.threads) < self.size:
                inbox = queue.SimpleQueue()
                t = threading.Thread(target=self._loop, args=(inbox,), name=f"tensorwire-exec-{len(self.threads)}",
                                     daemon=True)
                self.threads.append(t)
                t.start()
            else:
                self._backlog.append(fn)
                return
        inbox.put(fn)

    def _loop(self, inbox: queue.SimpleQueue) -> None:
        for _ in iter(int, 1):  # until the pool closes or the process ends (daemon threads)
            fn = inbox.get()
            if fn is None:
                return
            for _ in iter(int, 1):  # this task, then the backlog's, until none is left
                try:
                    fn()
                except BaseException:  # noqa: BLE001 - fn reports its own outcome; nothing may end the thread
                    pass
                with self._lock:
                    if self._closed:
                        return
                    if not self._backlog:
                        self._idle.append(inbox)
                        break
                    fn = self._backlog.popleft()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)
