"""A client's first answer from the dispatcher, with its ZMTP handshake watched (issue 36, finding 3).

A client whose security does not match the dispatcher's (no keys against a CURVE dispatcher, keys against a plain
one, the wrong dispatcher key, a client key it does not authorise) never gets an answer: libzmq drops the connection
and says nothing to the socket. :class:`FirstAnswer` watches the handshake through a socket monitor while the first
answer is awaited, so such a client fails at once with ``ConnectionFailed`` naming the cause, and any other wait
is bounded by its timeout. Every call here is bounded: sends do not block, receives are polled, the monitor is
closed with linger 0.
"""

from __future__ import annotations

import contextlib
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

from .errors import ConnectionFailed

#: the handshake outcomes the monitor reports
_EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
           | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_CONNECTED | zmq.EVENT_CONNECT_RETRIED)
#: ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: one side speaks CURVE, the other plain ZMTP (NULL)
_MECHANISM_MISMATCH = 0x11000002


def handshake_failure(event: int, value: int, address: str, keys: bool) -> str | None:
    """What a failed handshake means for a client (``keys``: it has CURVE keys), or None for any other event.

    Which side notices a mechanism mismatch first is a race: the other side sees the connection dropped mid-handshake
    (``NO_DETAIL``), as it does from a peer that is no ZMTP service at all."""
    keys_hint = ("pass keys= (the keys directory from `tensorwire keys`, with dispatcher.key and client.key_secret) "
                 "or set TENSORWIRE_KEYS")
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (f"the dispatcher at {address} refused this client's CURVE key (ZAP status {value}): add its "
                "client.key to the dispatcher's keys directory (clients/), or use that directory's client.key_secret")
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == _MECHANISM_MISMATCH:
        if keys:
            return (f"the dispatcher at {address} does not use CURVE keys (started without --keys) and this client "
                    "has some: connect without keys= and TENSORWIRE_KEYS, or start the dispatcher with --keys")
        return f"the dispatcher at {address} uses CURVE keys and this client has none: {keys_hint}"
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return (f"the handshake with {address} failed (ZMTP protocol error {value:#x}): is a tensorwire dispatcher "
                "listening there?")
    if event != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        return None
    if not keys:
        return (f"the handshake with {address} failed: the dispatcher there uses CURVE keys and this client has none "
                f"({keys_hint}), or what listens there is not a tensorwire dispatcher")
    return (f"the CURVE handshake with {address} failed: the dispatcher.key in this client's keys directory is not "
            "that dispatcher's public key (keys from another `tensorwire keys` run?), the dispatcher does not use "
            "CURVE keys (started without --keys), or what listens there is not a tensorwire dispatcher")


def _what_happened(seen: set[int]) -> str:
    """What the connection did meanwhile, for a timeout's message."""
    if zmq.EVENT_HANDSHAKE_SUCCEEDED in seen:
        return "a peer there completed the handshake but never answered (is that the dispatcher's client port?)"
    if zmq.EVENT_CONNECTED in seen:
        return "the connection opened but its handshake never completed"
    if zmq.EVENT_CONNECT_RETRIED in seen:
        return "nothing listens there (the connection was refused; still retrying)"
    return "the connection never opened (the wrong host, or a firewall?)"


class FirstAnswer:
    """Connect ``sock`` to ``address`` with its handshake watched; :meth:`wait` returns once an answer is waiting.

    ``first = FirstAnswer(sock, address); first.send(parts, keys=...); first.wait(timeout_s, keys=..., hint=...)``
    (``keys``: this side has CURVE keys): raises ``ConnectionFailed`` at once when the handshake fails, or after
    ``timeout_s`` without an answer (the message ends with ``hint``). The monitor is gone once :meth:`wait` returns
    or either raises (``close()`` for a caller that fails in between)."""

    def __init__(self, sock: zmq.Socket, address: str):
        self.sock = sock
        self.address = address
        self.monitor: zmq.Socket | None = sock.get_monitor_socket(_EVENTS)
        self.monitor.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(address)
        except BaseException:
            self.close()
            raise

    def send(self, parts: list, *, keys: bool) -> None:
        """Send the first message without blocking. A handshake that failed on a mechanism mismatch (CURVE keys on
        one side only) before the send leaves the socket no connection to queue on: a blocking send would wait
        forever (a keyless client once hung so); this raises ``ConnectionFailed`` with the handshake's failure."""
        try:
            self.sock.send_multipart(parts, zmq.NOBLOCK)
            return
        except zmq.Again:
            pass
        try:
            deadline = time.monotonic() + 2.0  # (the failure's event was queued before the connection was dropped)
            while (left := deadline - time.monotonic()) > 0 and self.monitor.poll(max(1, int(left * 1000))):
                ev = recv_monitor_message(self.monitor, zmq.NOBLOCK)
                why = handshake_failure(ev["event"], ev["value"], self.address, keys)
                if why is not None:
                    raise ConnectionFailed(why)
            raise ConnectionFailed(f"the connection to {self.address} was dropped before the first message (a "
                                   "handshake that failed: CURVE keys on one side only?)")
        finally:
            self.close()

    def wait(self, timeout_s: float, *, keys: bool, hint: str) -> None:
        try:
            poller = zmq.Poller()
            poller.register(self.sock, zmq.POLLIN)
            poller.register(self.monitor, zmq.POLLIN)
            deadline = time.monotonic() + timeout_s
            seen: set[int] = set()
            while (left := deadline - time.monotonic()) > 0:
                ready = dict(poller.poll(max(1, int(left * 1000))))
                if self.sock in ready:
                    return
                while self.monitor in ready and self.monitor.poll(0):
                    ev = recv_monitor_message(self.monitor, zmq.NOBLOCK)
                    seen.add(ev["event"])
                    why = handshake_failure(ev["event"], ev["value"], self.address, keys)
                    if why is not None:
                        raise ConnectionFailed(why)
            raise ConnectionFailed(f"no answer from a tensorwire dispatcher at {self.address} within "
                                   f"{timeout_s:g}s: {_what_happened(seen)} ({hint})")
        finally:
            self.close()

    def close(self) -> None:
        if self.monitor is None:
            return
        with contextlib.suppress(zmq.ZMQError):
            self.sock.disable_monitor()
        self.monitor.close(0)
        self.monitor = None
