"""How the dispatcher's loop judges liveness independently of how much traffic it carries.

- **Time-bounded draining.** The loop spends at most ``CLIENT_SLICE_S`` on client messages before it turns to the
  services' socket and its timers, so a flood of large legal client messages delays a heartbeat by at most one
  message, never by a queue's worth.
- **Judged with all the evidence.** Before it declares a service dead, the loop reads every message waiting on the
  services' socket (:func:`drain_fully`): a heartbeat that arrived while the loop was busy counts. A service is
  only lost when it really sent nothing for ``HEARTBEAT_S * LIVENESS``.
- **Client leases.** A session whose client sent nothing (no request, no lease renewal) for the lease period is
  released with its buffers (:class:`Leases`); the client hears why if it comes back.
- **Restarts.** A supervisor that restarts a worker (``LocalCluster``) tells the new process how the old one ended
  (:data:`RESTARTED_ENV`); it registers with that in its info (:data:`RESTARTED_INFO`), and a session that uses a
  tensor the old one held gets ``WorkerLost`` saying so.
- **Epochs.** Each dispatcher process has a random epoch, sent to services when they register; a worker that
  registers with a dispatcher of a new epoch drops the buffers of the old one's sessions, which nobody can name
  any more (a restarted dispatcher knows none of them, and may hand out their ids again).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable

import zmq

from tensorwire.protocol.liveness import SESSION_LEASE_S

#: the most time one turn of the loop spends on client messages before it serves services and timers
CLIENT_SLICE_S = 0.05
#: the most fetch errors one reply lists (a client raises the first; a batch fetching millions of unknown ids must
#: not make the dispatcher build and send millions of error maps)
MAX_FETCH_ERRORS = 64
_REMEMBER_EXPIRED = 4096
#: set by a worker's supervisor when it restarts the worker: how the previous process ended ("was killed by SIGKILL")
RESTARTED_ENV = "TENSORWIRE_RESTARTED_AFTER"
#: the key of a worker's registration info that carries it
RESTARTED_INFO = "restarted_after"


def new_epoch() -> str:
    """A random id for this dispatcher process (16 hex digits)."""
    return os.urandom(8).hex()


def drain_fully(drain: Callable[[zmq.Socket], None], sock: zmq.Socket, rounds: int = 1000) -> None:
    """Call ``drain(sock)`` (which reads a bounded number of messages) until nothing is waiting on ``sock``,
    at most ``rounds`` times."""
    for _ in range(rounds):
        if not sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            return
        drain(sock)


class Leases:
    """Which sessions' leases ran out, and a bounded memory of the ones that did (for a clear error)."""

    def __init__(self, lease_s: float = SESSION_LEASE_S):
        self.lease_s = lease_s
        self._expired: OrderedDict[bytes, float] = OrderedDict()

    def expired(self, sessions: dict, caught_up: float) -> list:
        """The sessions (values of ``sessions``) whose client has been silent longer than the lease.

        ``caught_up``: the last wall time the dispatcher found its client socket empty. Silence is measured up to
        then, not up to now: while the dispatcher is behind (a flood of large messages, a loaded host), a client's
        next message may be waiting in the socket, and a lease must not run out on the dispatcher's own delay
        (issue 36: a flood made it expire the flooding session, and a quiet one, between two of their messages).
        Once the socket is empty, every message sent before that moment has been read, so a session last seen a
        lease before it was really silent. (A flood that never lets the socket empty keeps sessions for as long as
        it lasts; they go at the first moment it does.)"""
        return [s for s in sessions.values() if caught_up - s.last_seen > self.lease_s]

    def note_expired(self, sid: bytes) -> None:
        self._expired[sid] = time.time()
        while len(self._expired) > _REMEMBER_EXPIRED:
            self._expired.popitem(last=False)

    def why_unknown(self, sid: bytes) -> str | None:
        """Why ``sid`` has no session, when it is one whose lease ran out (None otherwise)."""
        if sid in self._expired:
            return (
                f"this session expired: the dispatcher heard nothing from the client for {self.lease_s:g}s "
                f"(TENSORWIRE_SESSION_LEASE_S); its tensors were freed. Open a new session"
            )
        return None
