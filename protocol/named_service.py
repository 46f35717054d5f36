"""Base of the named services (autograd, collectives ...): register with the dispatcher, heartbeat, serve.

A named service connects a DEALER to the dispatcher's service socket and registers under its name.
Clients reach it with ``Session.service_request(name, header, frames)``; the dispatcher forwards the
request (``{"t": "request", "q": ..., ...}``) and relays the service's ``{"t": "reply", "q": ...}``
back. The dispatcher notices a dead service through missed heartbeats and answers waiting clients
with ``ServiceUnavailable``. Subclasses implement :meth:`handle`.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import zmq

from . import PROTOCOL_VERSION
from .errors import ProtocolError, error_to_wire
from .service import HEARTBEAT_S, LIVENESS, announce_ready
from .wire import MAX_MESSAGE, pack_header, send_parts, unpack_header

log = logging.getLogger("tensorwire.service")


class NamedService:
    """Serve requests forwarded by the dispatcher. ``handle(header, frames) -> (reply_header, frames)``."""

    name = "service"

    def __init__(self, dispatcher: str, *, token: str | None = None, ctx: zmq.Context | None = None):
        self.dispatcher = dispatcher
        self.token = token
        self.ctx = ctx or zmq.Context.instance()
        self.stop = threading.Event()
        self.sock: zmq.Socket | None = None

    def handle(self, header: dict, frames: list) -> tuple[dict, list]:
        raise NotImplementedError

    def info(self) -> dict:
        return {}

    def _connect(self) -> zmq.Socket:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        sock.connect(self.dispatcher)
        sock.send(pack_header({"t": "register", "v": PROTOCOL_VERSION, "service": self.name, "name": self.name,
                               "pid": os.getpid(), "token": self.token, "info": self.info()}))
        return sock

    def serve(self, ready_line: bool = True) -> None:
        self.sock = sock = self._connect()
        last_seen = time.monotonic()
        next_hb = last_seen + HEARTBEAT_S
        announced = False
        try:
            while not self.stop.is_set():
                if sock.poll(int(HEARTBEAT_S * 1000)):
                    for _ in range(1000):
                        if not sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                            break
                        msg = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                        last_seen = time.monotonic()
                        try:
                            h = unpack_header(msg[0].bytes)
                        except ProtocolError as e:
                            log.warning("dropping malformed message: %s", e)
                            continue
                        t = h["t"]
                        if t == "registered":
                            if ready_line and not announced:
                                announce_ready(self.name, pid=os.getpid())
                                announced = True
                        elif t == "refused":
                            raise ProtocolError(h.get("message", "the dispatcher refused this service"))
                        elif t == "request":
                            self._answer(h, msg[1:])
                now = time.monotonic()
                if now >= next_hb:
                    sock.send(pack_header({"t": "hb"}))
                    next_hb = now + HEARTBEAT_S
                if now - last_seen > HEARTBEAT_S * LIVENESS:
                    log.warning("dispatcher silent; reconnecting")
                    sock.close(0)
                    self.sock = sock = self._connect()
                    last_seen = now
        finally:
            sock.close(0)

    def _answer(self, h: dict, frames: list) -> None:
        q = h.get("q")
        try:
            reply, out_frames = self.handle(h, frames)
        except Exception as e:  # a bad request never stops the service
            log.warning("request failed: %s", e)
            reply, out_frames = {"error": error_to_wire(e)}, []
        send_parts(self.sock, [pack_header({**reply, "t": "reply", "q": q}), *out_frames])
