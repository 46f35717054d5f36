"""Liveness settings the client and the dispatcher share: session leases and ZeroMQ connection heartbeats.

A session is held by a *lease*: the dispatcher releases a session (and every buffer it holds on the workers)
when no message of its client arrived for ``SESSION_LEASE_S``; a live client renews the lease in the background
(``{"t": "lease"}``) while it has nothing else to say. The dispatcher announces the lease in its ``welcome``, so
one setting on the dispatcher governs every client.

The libzmq this project runs on (4.3, without the draft API) has no disconnect notification on a ROUTER socket
(``ZMQ_ROUTER_NOTIFY``), so the lease, not the transport, is what tells the dispatcher that a client died. ZeroMQ's
own heartbeats (``ZMQ_HEARTBEAT_IVL``/``TTL``/``TIMEOUT``, answered by libzmq's I/O thread without the application)
still run on every connection: they close a connection whose peer vanished without a TCP reset (a host that lost
power, a cut network), so the queues libzmq holds for it are freed.
"""

from __future__ import annotations

import os

import zmq

#: how long the dispatcher keeps a session whose client has gone silent (TENSORWIRE_SESSION_LEASE_S)
SESSION_LEASE_S = float(os.environ.get("TENSORWIRE_SESSION_LEASE_S", "10"))
#: a client renews its lease this many times per lease period, so a few late renewals do not lose the session
RENEWALS_PER_LEASE = 5
#: ZeroMQ connection heartbeats: a ping this often, and a connection that answers none for the timeout is closed
ZMQ_HEARTBEAT_IVL_S = 1.0
ZMQ_HEARTBEAT_TIMEOUT_S = 10.0


def set_zmq_heartbeats(
    sock: zmq.Socket, ivl_s: float = ZMQ_HEARTBEAT_IVL_S, timeout_s: float = ZMQ_HEARTBEAT_TIMEOUT_S
) -> None:
    """Turn on ZeroMQ's connection heartbeats on ``sock`` (ZMTP 3.1 PING/PONG, handled by libzmq's I/O thread).

    ``ZMQ_HEARTBEAT_TTL`` asks the peer to drop the connection too when it hears nothing for ``timeout_s``."""
    sock.setsockopt(zmq.HEARTBEAT_IVL, int(ivl_s * 1000))
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(timeout_s * 1000))
    sock.setsockopt(zmq.HEARTBEAT_TTL, int(timeout_s * 1000))
