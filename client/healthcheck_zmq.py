"""The dispatcher ping of ``tensorwire health tcp://HOST:5555`` (see :mod:`tensorwire.healthcheck`).

Its own module so that zmq and the wire (and with them numpy) load for a dispatcher probe only:
:func:`tensorwire.healthcheck.main` imports it for a ``tcp://`` target, and the hub's probe (``tensorwire health
http://...``, compose.yaml's healthcheck every 30 s) never does.
"""

from __future__ import annotations

import os

import zmq

from tensorwire.protocol.addresses import check_address
from tensorwire.protocol.curve import apply_peer, keys_dir
from tensorwire.protocol.errors import ConnectionFailed
from tensorwire.protocol.handshake import FirstAnswer
from tensorwire.protocol.wire import pack_header, unpack_header


def ping_dispatcher(address: str, *, timeout: float, keys: str | os.PathLike | None = None) -> None:
    """Send the dispatcher a ``ping`` and wait for its ``pong``; ConnectionFailed if none comes within ``timeout``
    seconds (``tensorwire health`` passes its ``--timeout``, :data:`tensorwire.healthcheck.DEFAULT_TIMEOUT_S` by
    default). ``keys``: a CURVE keys directory with the client pair (default ``$TENSORWIRE_KEYS``)."""
    check_address(address, "the dispatcher address")
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        keys = keys_dir(keys)
        if keys is not None:
            apply_peer(sock, keys, "client")
        first = FirstAnswer(sock, address)  # (a failed handshake says why at once: no keys, the wrong keys ...)
        first.send([pack_header({"t": "ping", "q": 1})], keys=keys is not None)
        first.wait(timeout, keys=keys is not None, hint="is it running there?")
        h = unpack_header(sock.recv(zmq.NOBLOCK))
        if h.get("t") != "pong":
            raise ConnectionFailed(f"{address} answered {str(h.get('t'))[:40]!r} to a ping, not 'pong'")
    finally:
        sock.close(0)
