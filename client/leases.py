"""Keeps the leases of this process's sessions: one daemon thread renews every open session's lease.

The dispatcher releases a session whose client has been silent for its lease period (it says how long in its
``welcome``; see ``tensorwire.protocol.liveness``). A client waiting on an answer pings anyway; this thread covers
the time in between, when the program computes or idles, by sending ``{"t": "lease"}`` a few times per lease
period. It uses a session's socket only when nobody else does (it tries the session's lock and skips the turn
otherwise: the holder is talking to the dispatcher, which renews the lease too). A killed process stops renewing,
and the dispatcher frees its session within one lease period.
"""

from __future__ import annotations

import os
import threading
import time
import weakref

_lock = threading.Lock()
_sessions: weakref.WeakSet = weakref.WeakSet()
_thread: threading.Thread | None = None
_TICK_S = 0.25  # how often the thread looks at the sessions (each has its own renewal period)


def keep(session) -> None:
    """Renew ``session``'s lease until it closes (``session.renew_lease()`` is called when one is due)."""
    global _thread
    with _lock:
        _sessions.add(session)
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="tw-session-leases", daemon=True)
            _thread.start()


def _run() -> None:
    while True:
        time.sleep(_TICK_S)
        now = time.monotonic()
        with _lock:
            sessions = list(_sessions)
        if not sessions:
            with _lock:
                if not _sessions:  # nothing to renew: end; the next session starts a thread again
                    global _thread
                    _thread = None
                    return
            continue
        for s in sessions:
            if s.closed:
                with _lock:
                    _sessions.discard(s)
            else:
                s.renew_lease(now)
        del sessions


def _after_fork_in_child() -> None:
    """A forked child has no lease thread and must not renew its parent's sessions (their sockets are the
    parent's)."""
    global _thread, _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    _sessions.clear()
    _thread = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
