"""Base of the named services (autograd, collectives ...): register with the dispatcher, heartbeat, serve.

A named service connects a DEALER to the dispatcher's service socket and registers under its name.
Clients reach it with ``Session.service_request(name, header, frames)``; the dispatcher forwards the
request (``{"t": "request", "q": ..., ...}``) and relays the service's ``{"t": "reply", "q": ...}``
back. The dispatcher notices a dead service through missed heartbeats and answers waiting clients
with ``ServiceUnavailable``. Subclasses implement :meth:`handle`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from pathlib import Path

import zmq

from . import PROTOCOL_VERSION
from .addresses import check_address
from .curve import apply_peer
from .errors import ProtocolError, TensorwireError, error_from_wire, error_to_wire
from .service import HEARTBEAT_S, LIVENESS, StopEvent, announce_ready
from .wire import MAX_MESSAGE, pack_header, send_parts, unpack_header

log = logging.getLogger("tensorwire.service")


#: how long a service whose registration is refused because a live service holds its name keeps trying (that one
#: may have died without the dispatcher knowing yet: it is declared dead after HEARTBEAT_S * LIVENESS of silence)
REGISTER_WAIT_S = float(os.environ.get("TENSORWIRE_REGISTER_WAIT", str(2 * HEARTBEAT_S * LIVENESS)))


def new_instance() -> str:
    """A per-process secret a service registers with and signs its heartbeats with: the dispatcher takes a
    re-registration or a heartbeat for a registered name only from the process that holds it."""
    return secrets.token_hex(16)


def service_socket(ctx: zmq.Context, dispatcher: str, keys: Path | None = None) -> zmq.Socket:
    """A DEALER connected to the dispatcher's service socket (CURVE with the service key pair when ``keys``)."""
    check_address(dispatcher, "--dispatcher")
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    if keys is not None:
        apply_peer(sock, keys, "service")
    sock.connect(dispatcher)
    return sock


def connect_service(ctx: zmq.Context, dispatcher: str, register: dict, keys: Path | None = None) -> zmq.Socket:
    """A DEALER to the dispatcher's service socket that has sent ``register`` (the message type is added)."""
    sock = service_socket(ctx, dispatcher, keys)
    try:  # never blocks: a handshake that failed already (CURVE keys on one side only) leaves no connection to queue
        sock.send(pack_header({"t": "register", "v": PROTOCOL_VERSION, "pid": os.getpid(), **register}), zmq.NOBLOCK)
    except zmq.Again:  # on, and a blocking send would wait forever; no answer comes, which register_service reports
        pass
    return sock


def refusal_error(h: dict) -> TensorwireError:
    """The typed error a ``refused`` answer to a registration carries."""
    err = h.get("error")
    if isinstance(err, dict):
        return error_from_wire(err)
    return ProtocolError(str(h.get("message", "the dispatcher refused this service")))


#: a service still waiting for its dispatcher says so in its log this often
SILENT_WAIT_LOG_S = 30.0


def register_service(ctx: zmq.Context, dispatcher: str, register: dict, *, keys: Path | None = None,
                     stop: threading.Event | None = None, wait_s: float | None = None,
                     on_registered=None) -> zmq.Socket:
    """Connect and register, returning once the dispatcher has answered ``registered`` (or ``stop`` is set).

    A dispatcher that does not answer (not up yet, restarting) is tried again every liveness period. A refusal
    marked ``retry`` (a live service holds the name) is retried for ``wait_s`` seconds (``REGISTER_WAIT_S``):
    the holder may be dead but not yet declared so. Any other refusal, or one past that time, raises its typed
    error (``Unauthorized`` for bad credentials, ``DeviceError`` for a device already served ...)."""
    wait_s = REGISTER_WAIT_S if wait_s is None else wait_s
    deadline = None
    started = time.monotonic()
    told = 0.0  # when the last "no answer yet" went to the log
    for _ in range(1 << 30):  # bounded by the stop event and the refusal deadline
        sock = connect_service(ctx, dispatcher, register, keys)
        retry = False
        if not _wait_for_message(sock, int(HEARTBEAT_S * LIVENESS * 1000), stop):
            if stop is not None and stop.is_set():
                sock.close(0)
                break
            now = time.monotonic()
            if now - told >= SILENT_WAIT_LOG_S:  # never silent: say what it waits for, then every half minute
                told = now
                log.warning("no answer from the dispatcher at %s after %.0fs; still trying. Is it running there? %s",
                            dispatcher, now - started, "Are these its CURVE keys (--keys)?" if keys else
                            "A dispatcher with CURVE keys needs --keys here too.")
        else:
            for h, _ in drain(sock):
                if h["t"] == "registered":
                    if on_registered is not None:  # (the answer's fields: the dispatcher's epoch ...)
                        on_registered(h)
                    return sock
                if h["t"] == "refused":
                    err = refusal_error(h)
                    now = time.monotonic()
                    deadline = deadline or now + wait_s
                    if not h.get("retry") or now >= deadline:
                        sock.close(0)
                        raise err
                    log.warning("%s; trying again", err)
                    retry = True
                    break
        sock.close(0)
        if stop is not None and stop.wait(2 * HEARTBEAT_S if retry else 0):
            break
    return service_socket(ctx, dispatcher, keys)  # stopping: an unregistered socket the caller closes


def _wait_for_message(sock: zmq.Socket, timeout_ms: int, stop: threading.Event | None) -> bool:
    """Whether a message came on ``sock`` within ``timeout_ms``; a ``stop`` that can be polled (``StopEvent``) ends
    the wait when it is set."""
    if not hasattr(stop, "fileno"):
        return bool(sock.poll(timeout_ms))
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(stop, zmq.POLLIN)
    return sock in dict(poller.poll(timeout_ms))


def add_service_credential_args(parser) -> None:
    """The options every service command takes for its credentials (values come from files or the environment,
    never from the command line, where ``ps`` would show them)."""
    parser.add_argument("--service-token-file", default=None,
                        help="file holding the service credential (default: $TENSORWIRE_SERVICE_TOKEN, else "
                             "KEYS/service.token)")
    parser.add_argument("--keys", default=None, help="CURVE keys directory (default $TENSORWIRE_KEYS); a service "
                        "reads dispatcher.key and service.key_secret there")


def say_goodbye(sock: zmq.Socket | None) -> None:
    """Tell the dispatcher this service stops, so its name is free at once for a successor (best effort)."""
    if sock is None:
        return
    with contextlib.suppress(zmq.ZMQError):
        sock.send(pack_header({"t": "bye"}), zmq.NOBLOCK)


#: a file the heartbeat thread touches at every beat, for a supervisor on this host to tell a process that stopped
#: answering (stopped, or stuck with the GIL held) from a live one: ``LocalCluster`` sets it for its workers
HEARTBEAT_FILE_ENV = "TENSORWIRE_HEARTBEAT_FILE"


def _touch(path: str) -> None:
    try:
        os.utime(path)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            open(path, "a").close()
    except OSError:
        pass


def start_heartbeats(ctx: zmq.Context, dispatcher: str, name: str, stop: threading.Event, instance: str,
                     keys: Path | None = None, extra=None) -> threading.Thread:
    """Send ``{"t": "hb", "of": name, "i": instance}`` every HEARTBEAT_S from a thread with a socket of its own, so a
    service busy in a long kernel or MPI call still looks alive; stops when ``stop`` is set. ``extra()``: more
    fields for each heartbeat (a worker's progress per session), read on this thread."""
    def run() -> None:
        try:
            hb = service_socket(ctx, dispatcher, keys)
        except Exception:  # keys unreadable: the registration reports it
            return
        base = {"t": "hb", "of": name, "pid": os.getpid(), "i": instance}
        msg = pack_header(base)
        alive = os.environ.get(HEARTBEAT_FILE_ENV)
        try:
            while not stop.wait(HEARTBEAT_S):
                if alive:
                    _touch(alive)
                if extra is not None:
                    try:
                        msg = pack_header({**base, **extra()})
                    except Exception:  # noqa: BLE001 - a report must never stop the heartbeat
                        log.exception("heartbeat report failed")
                        msg = pack_header(base)
                try:
                    hb.send(msg, zmq.NOBLOCK)
                except zmq.Again:  # the dispatcher is away and the queue to it full: skip a beat, never stop
                    pass
        except zmq.ZMQError:  # the context is closing
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

    def __init__(self, dispatcher: str, *, token: str | None = None, keys: Path | None = None,
                 ctx: zmq.Context | None = None):
        self.dispatcher = dispatcher
        self.token = token  # the service credential
        self.keys = keys
        self.instance = new_instance()
        self.ctx = ctx or zmq.Context.instance()
        self.stop = StopEvent()  # (set: the serve loop's wait for a message returns at once)
        self.sock: zmq.Socket | None = None

    def handle(self, header: dict, frames: list) -> tuple[dict, list]:
        raise NotImplementedError

    def info(self) -> dict:
        return {}

    def _connect(self) -> zmq.Socket:
        return register_service(self.ctx, self.dispatcher, {"service": self.name, "name": self.name,
                                                            "token": self.token, "instance": self.instance,
                                                            "info": self.info()}, keys=self.keys, stop=self.stop)

    def serve(self, ready_line: bool = True) -> None:
        start_heartbeats(self.ctx, self.dispatcher, self.name, self.stop, self.instance, self.keys)
        self.sock = sock = self._connect()
        if ready_line and not self.stop.is_set():
            announce_ready(self.name, pid=os.getpid())
        last_seen = time.monotonic()
        poller = zmq.Poller()
        poller.register(self.stop, zmq.POLLIN)
        poller.register(sock, zmq.POLLIN)
        try:
            while not self.stop.is_set():
                if sock in dict(poller.poll(int(HEARTBEAT_S * 1000))):
                    for h, frames in drain(sock):
                        last_seen = time.monotonic()
                        t = h["t"]
                        if t == "refused":
                            raise refusal_error(h)
                        elif t == "request":
                            self._answer(h, frames)
                if time.monotonic() - last_seen > HEARTBEAT_S * LIVENESS:
                    log.warning("dispatcher silent; reconnecting")
                    poller.unregister(sock)
                    sock.close(0)
                    self.sock = sock = self._connect()
                    poller.register(sock, zmq.POLLIN)
                    last_seen = time.monotonic()
        finally:
            self.stop.set()
            say_goodbye(sock)
            sock.close(0)

    def _answer(self, h: dict, frames: list) -> None:
        q = h.get("q")
        t_recv = time.monotonic_ns()
        try:
            reply, out_frames = self.handle(h, frames)
        except Exception as e:  # a bad request never stops the service
            log.warning("request failed: %s", e)
            reply, out_frames = {"error": error_to_wire(e)}, []
        if h.get("prof") is not None:  # tw.profiler is on: this request's span and this clock's readings (offset)
            t_send = time.monotonic_ns()
            op = str(h.get("op"))[:64]
            span = [f"{self.name}::{op}", self.name, t_recv, t_send - t_recv, {"cached": reply.get("cached")}]
            reply = {**reply, "prof": {"pid": os.getpid(), "t_recv": t_recv, "t_send": t_send, "spans": [span]}}
        send_parts(self.sock, [pack_header({**reply, "t": "reply", "q": q}), *out_frames])
