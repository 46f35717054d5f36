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


def connect_service(ctx: zmq.Context, dispatcher: str, register: dict) -> zmq.Socket:
    """A DEALER to the dispatcher's service socket that has sent ``register`` (the message type is added)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    sock.connect(dispatcher)
    sock.send(pack_header({"t": "register", "v": PROTOCOL_VERSION, "pid": os.getpid(), **register}))
    return sock


def start_heartbeats(ctx: zmq.Context, dispatcher: str, name: str, stop: threading.Event) -> threading.Thread:
    """Send ``{"t": "hb", "of": name}`` every HEARTBEAT_S from a thread with a socket of its own, so a service
    busy in a long kernel or MPI call still looks alive; stops when ``stop`` is set."""
    def run() -> None:
        hb = ctx.socket(zmq.DEALER)
        hb.setsockopt(zmq.LINGER, 0)
        hb.connect(dispatcher)
        msg = pack_header({"t": "hb", "of": name, "pid": os.getpid()})
        try:
            while not stop.wait(HEARTBEAT_S):
                hb.send(msg, zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        finally:
            hb.close(0)

    th = threading.Thread(target=run, name=f"tw-heartbeat-{name}", daemon=True)
    th.start()
    return th


def drain(sock: zmq.Socket, limit: int = 1000):
    """Yield ``(header, frames)`` for the messages waiting on ``sock`` (at most ``limit``); malformed ones are
    logged and skipped, never raised."""
    for _ in range(limit):
        if not sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:  # cheaper than catching zmq.Again
            return
        msg = sock.recv_multipart(zmq.NOBLOCK, copy=False)
        try:
            h = unpack_header(msg[0].bytes)
        except ProtocolError as e:
            log.warning("dropping malformed message: %s", e)
            continue
        yield h, msg[1:]


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
        return connect_service(self.ctx, self.dispatcher, {"service": self.name, "name": self.name,
                                                           "token": self.token, "info": self.info()})

    def serve(self, ready_line: bool = True) -> None:
        start_heartbeats(self.ctx, self.dispatcher, self.name, self.stop)
        self.sock = sock = self._connect()
        last_seen = time.monotonic()
        announced = False
        try:
            while not self.stop.is_set():
                if sock.poll(int(HEARTBEAT_S * 1000)):
                    for h, frames in drain(sock):
                        last_seen = time.monotonic()
                        t = h["t"]
                        if t == "registered":
                            if ready_line and not announced:
                                announce_ready(self.name, pid=os.getpid())
                                announced = True
                        elif t == "refused":
                            raise ProtocolError(h.get("message", "the dispatcher refused this service"))
                        elif t == "request":
                            self._answer(h, frames)
                if time.monotonic() - last_seen > HEARTBEAT_S * LIVENESS:
                    log.warning("dispatcher silent; reconnecting")
                    sock.close(0)
                    self.sock = sock = self._connect()
                    last_seen = time.monotonic()
        finally:
            self.stop.set()
            sock.close(0)

    def _answer(self, h: dict, frames: list) -> None:
        q = h.get("q")
        try:
            reply, out_frames = self.handle(h, frames)
        except Exception as e:  # a bad request never stops the service
            log.warning("request failed: %s", e)
            reply, out_frames = {"error": error_to_wire(e)}, []
        send_parts(self.sock, [pack_header({**reply, "t": "reply", "q": q}), *out_frames])
