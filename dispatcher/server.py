"""The dispatcher: a broker in the manner of ZeroMQ's Majordomo pattern.

Two ROUTER sockets: one for clients, one for services (device workers, autograd, collectives).
Services register by name and exchange heartbeats; the dispatcher notices a dead one and tells the
sessions it affected. Every client message is checked (protocol version, credentials, structure,
handle ownership) before anything runs; a bad message gets a ``ProtocolError`` reply and the
dispatcher goes on serving everyone else.

Handles are namespaced by session: the dispatcher maps (session, client id) to the device that
holds it, and workers keep each session's buffers apart, so one session can never name another's
tensor.

Trust (docs/security.md): a session is a secret the dispatcher issues at ``hello`` (``welcome``'s
``key``: an 8-byte public id and a 32-byte secret); every later client message carries it as ``k``
and is refused without it, whatever socket it comes from: a routing id is only where answers go.
Services register with the service credential, which clients never hold; a name (a device) is
served by one live service at a time. With a keys directory, both sockets run CURVE and authorise
client keys and service keys separately (``protocol/curve.py``).
"""

from __future__ import annotations

import argparse
import hmac
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol.addresses import check_address, is_address_in_use, port_in_use
from tensorwire.protocol.batch_ids import check_temps, kept_nodes, out_ids
from tensorwire.protocol.capability import CHANNEL_TTL_S, channel_key, issue, worker_id
from tensorwire.protocol.credentials import (
    ADMIN_TOKEN_ENV,
    CLIENT_TOKEN_ENV,
    new_token,
    resolve_token,
    service_token,
    write_token_file,
)
from tensorwire.protocol.curve import CLIENTS, SERVICES, apply_server, is_local_address, keys_dir, start_authenticator
from tensorwire.protocol.errors import (
    ConfigurationError,
    DependencyFailed,
    DeviceError,
    NotFound,
    ProtocolError,
    ServiceUnavailable,
    TensorwireError,
    Unauthorized,
    WorkerLost,
    error_to_wire,
)
from tensorwire.protocol.liveness import set_zmq_heartbeats
from tensorwire.protocol.logs import configure as configure_logging
from tensorwire.protocol.metrics import add_metrics_args, serve_metrics
from tensorwire.protocol.ops import load_plugin_ops
from tensorwire.protocol.progress import check as check_progress
from tensorwire.protocol.service import (
    HEARTBEAT_S,
    LIVENESS,
    announce_ready,
    profiled,
    stop_event_on_signals,
    tune_gc,
)
from tensorwire.protocol.shm_paths import check_shm_path
from tensorwire.protocol.wire import MAX_MESSAGE, pack_header, send_parts, unpack_header

from .liveness import CLIENT_SLICE_S, MAX_FETCH_ERRORS, Leases, drain_fully, new_epoch
from .plans import RawPlan, Split, split_batch
from .telemetry import POLL_S, DispatcherCollector, Telemetry

log = logging.getLogger("tensorwire.dispatcher")
MAX_PLANS = 4096
#: profiler spans the dispatcher keeps per session until its client collects them (the rest are counted, not kept)
MAX_SPANS = 1 << 17
#: collectives that failed before all their parts started, remembered to answer the late parts (oldest go first)
MAX_FAILED_COLLECTIVES = 4096
SID_BYTES, SECRET_BYTES = 8, 32  # a session key is its public id followed by its secret
_NAME = re.compile(r"[A-Za-z0-9_.@:-]{1,128}")  # service and device names
_MALFORMED = "malformed message: the dispatcher could not process it (see its log)"


@dataclass
class ServiceInfo:
    ident: bytes
    kind: str  # "worker", "autograd", "collectives", ...
    name: str  # device name for workers, service name otherwise
    info: dict
    last_seen: float
    instance: str = ""  # the per-process secret it registered with (signs its heartbeats)
    plans: set = field(default_factory=set)  # (session, plan) pairs this worker has compiled


@dataclass
class Pending:
    expect: set
    values: list = field(default_factory=list)
    frames: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    fetch_errors: list = field(default_factory=list)
    prof: tuple | None = None  # (profiler batch number, monotonic ns it arrived) of a profiled batch


@dataclass
class Gather:
    """A request the dispatcher sent to several workers (``stats``, ``profile_collect``) and the answers so far."""

    kind: str  # "stats" (a client's), "poll" (the dispatcher's own, for metrics) or "profile"
    sid: bytes | None  # the session that asked (None: the dispatcher itself)
    cq: object  # the client's request number
    expect: set  # devices not answered yet
    data: dict = field(default_factory=dict)


@dataclass
class Session:
    sid: bytes  # public id: what workers and admins see (stats), never enough to act as the session
    secret: bytes  # issued at hello; every message of the session proves it
    ident: bytes  # the routing id answers go to: the last connection that proved the secret
    client: str
    admin: bool = False  # opened with the admin credential: stats shows every session
    handles: dict = field(default_factory=dict)  # client id -> device
    failed: dict = field(default_factory=dict)  # client id -> wire error (never reached a worker)
    plans: dict = field(default_factory=dict)  # plan no -> Split
    pending: dict = field(default_factory=dict)  # seq -> Pending
    errors: list = field(default_factory=list)
    touched: set = field(default_factory=set)  # devices holding state of this session
    last_seen: float = 0.0
    spans: list | None = None  # profiler spans of its profiled batches, until collected
    spans_dropped: int = 0
    host: str = ""  # the client's host id (protocol.shm_paths.host_id): who can reach a worker's loopback address


_INT = {int}


class Dispatcher:
    """The broker process. ``serve()`` runs until ``stop`` is set."""

    def __init__(self, client_addr: str, service_addr: str, *, service_token: str, token: str | None = None,
                 admin_token: str | None = None, keys: Path | None = None, insecure: bool = False,
                 hub_url: str | None = None, ctx: zmq.Context | None = None):
        """``service_token``: the credential services register with (required, distinct from the others);
        ``token``: what clients present at hello (None: any local client may open a session); ``admin_token``:
        opens sessions that see the whole cluster in stats; ``keys``: a CURVE keys directory (``tensorwire keys``),
        required unless both addresses are loopback or ipc, or ``insecure`` says to listen in clear anyway."""
        check_address(client_addr, "--address", bind=True)
        check_address(service_addr, "--service-address", bind=True)
        if not service_token:
            raise Unauthorized("the dispatcher needs a service credential: set TENSORWIRE_SERVICE_TOKEN or pass "
                               "--service-token-file FILE (`tensorwire keys --dir DIR` writes DIR/service.token)")
        if service_token in (token, admin_token):
            raise Unauthorized("the service credential must differ from the client and admin tokens")
        exposed = [a for a in (client_addr, service_addr) if not is_local_address(a)]
        if exposed and keys is None and not insecure:
            raise Unauthorized(f"refusing to listen on {', '.join(exposed)} without CURVE keys: tokens and tensors "
                               f"would cross the network in clear. Create keys with `tensorwire keys --dir DIR` and "
                               f"pass --keys DIR (or bind 127.0.0.1 / ipc://, or pass --insecure explicitly)")
        self.ctx = ctx or zmq.Context.instance()
        self.auth = start_authenticator(self.ctx, keys) if keys is not None else None
        self.clients = self.ctx.socket(zmq.ROUTER)
        self.services = self.ctx.socket(zmq.ROUTER)
        for s, domain in ((self.clients, CLIENTS), (self.services, SERVICES)):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
            # no ROUTER_HANDOVER: a peer claiming a connected peer's routing id is refused, not handed its traffic
            if keys is not None:
                apply_server(s, keys, domain)
            set_zmq_heartbeats(s)
            try:  # a dead peer is noticed at once where libzmq has this (draft) option; heartbeats otherwise
                s.setsockopt(zmq.ROUTER_NOTIFY, zmq.NOTIFY_DISCONNECT)
            except (zmq.ZMQError, AttributeError):
                log.info("no ZMQ_ROUTER_NOTIFY in libzmq %s: dead clients are found by their leases, dead "
                         "services by their heartbeats", zmq.zmq_version())
        try:
            self.client_addr = self._bind(self.clients, client_addr, "--address")
            self.service_addr = self._bind(self.services, service_addr, "--service-address")
        except ConfigurationError:
            self.clients.close(0)
            self.services.close(0)
            if self.auth is not None:
                self.auth.stop()
            raise
        self.token = token
        self.admin_token = admin_token
        self.service_token = service_token
        self.hub_url = hub_url
        self.sessions: dict[bytes, Session] = {}  # public id -> session
        self.by_ident: dict[bytes, bytes] = {}  # routing id -> the public id of the session it opened last
        self.svc_by_ident: dict[bytes, ServiceInfo] = {}
        self.workers: dict[str, ServiceInfo] = {}  # device -> worker
        self.named: dict[str, ServiceInfo] = {}  # service name -> service (autograd, collectives)
        self.xroutes: dict[int, tuple[bytes, str, str]] = {}  # transfer key -> (session, src, dst)
        self.next_x = 1
        self.gathers: dict[int, Gather] = {}
        self.next_gather = 1
        self.telemetry = Telemetry()
        self.metrics_server = None
        self.metrics_url: str | None = None
        self._next_poll = 0.0
        self.forwards: dict[int, tuple] = {}  # service request id -> (session, client seq, service name)
        self.coll_ranks: dict[str, ServiceInfo] = {}  # device -> the collectives rank serving it
        self.coll_pending: dict[int, dict] = {}  # collective key -> {"all": devices, "devices": still waiting}
        # collectives that failed before every part was ready -> (their devices, the error): a part that starts
        # after the failure is answered with it (bounded: the oldest are forgotten first)
        self.coll_failed: dict[int, tuple[set, dict]] = {}
        self.next_coll = 1
        self.next_fwd = 1
        self.started = time.time()
        self.epoch = new_epoch()  # tells a worker whether its buffers belong to this dispatcher's sessions
        self.leases = Leases()

    @staticmethod
    def _bind(sock: zmq.Socket, addr: str, option: str) -> str:
        try:
            if addr.endswith(":0"):
                port = sock.bind_to_random_port(addr[: addr.rindex(":")])
                return f"{addr[: addr.rindex(':')]}:{port}"
            sock.bind(addr)
        except zmq.ZMQError as e:
            if is_address_in_use(e) and addr.startswith("tcp://"):
                host, _, port = addr[len("tcp://") :].rpartition(":")
                raise port_in_use("the dispatcher", host, port, option) from None
            raise ConfigurationError(f"the dispatcher cannot listen on {option} {addr}: {e.strerror}") from None
        return addr

    # -- sending -----------------------------------------------------------------------------
    def _to_client(self, ident: bytes, header: dict, frames=()) -> None:
        send_parts(self.clients, [ident, pack_header(header), *frames])

    def _to_service(self, svc: ServiceInfo, header: dict, frames=()) -> None:
        send_parts(self.services, [svc.ident, pack_header(header), *frames])

    # -- main loop ---------------------------------------------------------------------------
    def serve(self, stop, ready_line: bool = True) -> None:
        poller = zmq.Poller()
        poller.register(self.clients, zmq.POLLIN)
        poller.register(self.services, zmq.POLLIN)
        if ready_line:
            extra = {"metrics_url": self.metrics_url} if self.metrics_url else {}
            announce_ready("dispatcher", address=self.client_addr, service_address=self.service_addr,
                           pid=os.getpid(), **extra)
        next_hb = time.monotonic() + HEARTBEAT_S
        while not stop.is_set():
            events = dict(poller.poll(int(HEARTBEAT_S * 1000)))
            if self.services in events:
                self._drain(self.services, self._on_service)
            if self.clients in events:
                self._drain(self.clients, self._on_client, time.monotonic() + CLIENT_SLICE_S)
            now = time.monotonic()
            if now >= next_hb:
                next_hb = now + HEARTBEAT_S
                drain_fully(lambda sock: self._drain(sock, self._on_service), self.services)
                self._heartbeat(time.monotonic())
                self.telemetry.sample(time.monotonic())
                if self.metrics_server is not None and now >= self._next_poll:
                    self._next_poll = now + POLL_S
                    if not any(g.kind == "poll" for g in self.gathers.values()):
                        self._gather("poll", None, None, list(self.workers), {"t": "stats"})
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        self.clients.close(0)
        self.services.close(0)
        if self.auth is not None:
            self.auth.stop()

    def serve_metrics(self, port: int, host: str = "127.0.0.1") -> str:
        """Serve Prometheus metrics at ``http://host:port/metrics`` (port 0 picks a free one); returns the URL."""
        self.metrics_server, self.metrics_url = serve_metrics(DispatcherCollector(self), host, port)
        return self.metrics_url

    def _drain(self, sock, handler, deadline: float | None = None) -> None:
        for _ in range(256):  # bounded, so neither socket starves the other
            if not sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:  # cheaper than catching zmq.Again
                return
            if deadline is not None and time.monotonic() > deadline:  # time-bounded too (see liveness.py)
                return
            msg = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            if len(msg) < 2:
                continue
            if len(msg) == 2 and not msg[1].bytes:  # the peer disconnected (ROUTER_NOTIFY)
                self._disconnected(sock, msg[0].bytes)
                continue
            try:
                handler(msg[0].bytes, msg[1], msg[2:])
            except Exception:  # nothing a peer sends may stop the dispatcher; its details stay in the log
                log.exception("error handling a message")
                self.telemetry.error(ProtocolError.code)
                if handler == self._on_client:
                    self._to_client(msg[0].bytes, {"t": "error", "error": ProtocolError(_MALFORMED).to_wire()})

    def _disconnected(self, sock, ident: bytes) -> None:
        if sock is self.services:
            svc = self.svc_by_ident.get(ident)
            if svc is not None:
                self._service_lost(svc, "disconnected (its process died or closed the connection)")
        else:
            s = self.sessions.get(self.by_ident.get(ident, b""))
            if s is not None and s.ident == ident:  # a client that vanished: free everything it held
                self._close_session(s, "ended: its client disconnected")

    def _heartbeat(self, now: float) -> None:
        for svc in list(self.svc_by_ident.values()):
            if now - svc.last_seen > HEARTBEAT_S * LIVENESS:
                self._service_lost(svc, "stopped sending heartbeats")
            else:
                self._to_service(svc, {"t": "hb"})
        for s in self.leases.expired(self.sessions, time.time()):  # its client died or was cut off
            log.warning("session %s expired: no message from its client for %gs", s.sid.hex(), self.leases.lease_s)
            self.leases.note_expired(s.sid)
            self._close_session(s, "expired")

    # -- services ----------------------------------------------------------------------------
    def _on_service(self, ident: bytes, hframe, frames) -> None:
        try:
            h = unpack_header(hframe.bytes)
        except ProtocolError as e:
            log.warning("dropping a malformed service message: %s", e.message)
            return
        t = h["t"]
        svc = self.svc_by_ident.get(ident)
        if svc is not None:
            svc.last_seen = time.monotonic()
        if t == "hb":
            of = h.get("of")
            if of is not None:  # a service's heartbeat thread, on a socket of its own, signed with its instance
                w = (self.workers.get(of) or self.named.get(of)) if isinstance(of, str) else None
                i = h.get("i")
                if w is not None and isinstance(i, str) and hmac.compare_digest(i.encode(), w.instance.encode()):
                    w.last_seen = time.monotonic()
            elif svc is None:  # a service we forgot (dispatcher restarted): ask it to register
                self.services.send_multipart([ident, pack_header({"t": "hb"})])
            return
        if t == "register":
            self._register(ident, h)
            return
        if svc is None:  # only registered services may say anything else
            return
        if t == "done":
            self._worker_done(svc, h, frames)
        elif t == "bye":  # a service stopping cleanly: its name is free for a successor at once
            self._service_lost(svc, "stopped")
        elif t == "xfer_got":  # a transfer went straight from its source's worker to this one: forget its route
            x = h.get("x")
            route = self.xroutes.get(x) if type(x) is int else None
            if route is not None and route[2] == svc.name and h.get("s") == route[0]:
                del self.xroutes[x]
        elif t == "xfer":
            x = h.get("x")
            route = self.xroutes.get(x) if type(x) is int else None
            if route is not None and route[1] == svc.name and h.get("s") == route[0]:
                del self.xroutes[x]
                dst = self.workers.get(route[2])
                if dst is not None:
                    self._to_service(dst, h, frames)
        elif t == "coll_ready":  # a worker's input is in shared memory
            self._coll_ready(svc, h)
        elif t == "coll_abort":  # a worker's input failed: so does the collective, everywhere
            self._coll_abort(svc, h)
        elif t == "coll_done":  # a rank finished (or failed) its part: tell its worker
            key = h.get("key")
            dev = svc.info.get("device")
            if type(key) is not int or svc.kind != "collectives" or self.coll_ranks.get(dev) is not svc:
                return
            pending = self.coll_pending.get(key)
            w = self.workers.get(dev)
            err = h.get("err")
            if w is not None:
                msg = {"t": "coll_done", "key": key, **({"err": _wire_error(err)} if err else {})}
                direct = h.get("direct")
                if not err and isinstance(direct, dict) and pending is not None and pending.get("direct"):
                    # the group's communicator id for the worker (the worker checks it names its device)
                    msg["direct"] = {k: direct.get(k) for k in ("uid", "rank", "devices")}
                self._to_service(w, msg)
            if pending is not None:
                pending["devices"].discard(dev)
                if not pending["devices"]:
                    del self.coll_pending[key]
        elif t == "progress":  # a worker's download for one session's hub_tensor load
            self._progress(svc, h)
        elif t == "need_plan":  # a worker evicted a compiled plan (bounded cache): send its fragment again
            self._resend_plan(svc, h)
        elif t in ("stats", "profile"):
            self._gathered(svc, t, h)
        elif t == "reply":  # a named service answering a forwarded request
            q = h.get("q")
            fwd = self.forwards.get(q) if type(q) is int else None
            if fwd is not None and fwd[2] == svc.name:
                del self.forwards[q]
                s = self.sessions.get(fwd[0])
                if s is not None:
                    self._to_client(s.ident, {**h, "t": "service_reply", "q": fwd[1]}, frames)

    def _progress(self, svc: ServiceInfo, h: dict) -> None:
        """Pass a worker's download progress on to the session it names, only if that worker serves the session's
        work; a malformed report is dropped and logged (``tensorwire.protocol.progress``)."""
        sid = h.get("s")
        s = self.sessions.get(sid) if type(sid) is bytes else None
        fields = check_progress(h)
        if fields is None or svc.kind != "worker" or self.workers.get(svc.name) is not svc:
            log.warning("dropping a malformed progress report from %s %s", svc.kind, svc.name)
            return
        if s is None or svc.name not in s.touched:  # (a session that closed meanwhile: nobody waits for it)
            log.debug("dropping a progress report from %s for a session it does not serve", svc.name)
            return
        self._to_client(s.ident, {"t": "progress", **fields, "device": svc.name})

    def _coll_ready(self, svc: ServiceInfo, h: dict) -> None:
        """Release a collective's ranks once every worker's input is in shared memory. The file a worker names
        must be one of its own (``protocol/shm_paths.py``): a rank maps it read-write and writes the result in."""
        key = h.get("key")
        pend = self.coll_pending.get(key) if type(key) is int else None
        if pend is None and svc.kind == "worker" and type(key) is int:
            failed = self.coll_failed.get(key)
            if failed is not None and svc.name in failed[0]:  # it failed before this part started: say so now
                self._to_service(svc, {"t": "coll_done", "key": key, "err": failed[1]})
            return
        if pend is None or svc.kind != "worker" or svc.name not in pend["all"]:
            return
        if svc.name not in self.coll_ranks:
            self._coll_failed(key, f"no collectives rank serves {svc.name}")
            return
        if h.get("direct") is True:  # the input stays on the device: the transport (NCCL) moves it
            if not pend.get("direct"):
                self._coll_failed(key, f"the worker for {svc.name} asked for a device transport this collective "
                                       f"does not use")
                return
        else:
            try:
                check_shm_path(h.get("path"), svc.info.get("pid"), svc.name)
            except ProtocolError as e:
                log.warning("worker %s: %s", svc.name, e.message)
                self._coll_failed(key, f"the worker for {svc.name} named a file that is not its own shared memory")
                return
        # the rank learns the device and pid from the dispatcher's registration, not from the worker's message
        pend.setdefault("ready", {})[svc.name] = {**h, "device": svc.name, "pid": svc.info.get("pid")}
        if len(pend["ready"]) == len(pend["all"]):
            parts = list(pend["ready"].values())
            if len({(m.get("direct") is True, str(m.get("dtype")), str(m.get("shape"))) for m in parts}) != 1:
                del pend["ready"]  # no rank is released: they are told to skip it
                self._coll_failed(key, "", error_to_wire(ProtocolError(
                    "the parts of a collective disagree on dtype, shape or transport")))
                return
            if pend.get("direct"):  # communicators any part aborted: rank 0 makes the group a new id
                broken = sorted({b for m in parts if isinstance(m.get("broken"), list) for b in m["broken"][:64]
                                 if isinstance(b, str)})
                parts = [{**m, "broken": broken} for m in parts]
            # every part is ready: release the ranks together, so none spins in MPI waiting for a peer
            for msg in parts:
                self._to_service(self.coll_ranks[msg["device"]], msg)

    def _coll_abort(self, svc: ServiceInfo, h: dict) -> None:
        """A worker's input to a collective failed: every part fails with that input's error (typed fields only),
        so no peer waits for a part that will never come."""
        key = h.get("key")
        pend = self.coll_pending.get(key) if type(key) is int else None
        if pend is None or svc.kind != "worker" or svc.name not in pend["all"]:
            return
        err = h.get("err")
        if isinstance(err, dict) and isinstance(err.get("code"), str) and isinstance(err.get("message"), str):
            err = {k: err[k] for k in ("code", "message", "origin", "device") if k in err}
        else:
            err = None
        self._coll_failed(key, f"the input on {svc.name} failed", err)

    def _refuse(self, ident: bytes, err: TensorwireError, retry: bool = False) -> None:
        self.services.send_multipart([ident, pack_header({"t": "refused", "error": err.to_wire(),
                                                          "message": err.message, "retry": retry})])

    def _resend_plan(self, svc: ServiceInfo, h: dict) -> None:
        s = self.sessions.get(h.get("s"))
        split = s.plans.get(h.get("plan")) if s is not None and isinstance(h.get("plan"), int) else None
        frags = getattr(split, "frags", None)  # (a plan kept unsplit has none yet: the client sends it again)
        frag = frags.get(svc.name) if frags is not None else None
        reply = {"t": "plan", "s": h.get("s"), "plan": h.get("plan")}
        if frag is None:
            reply["err"] = error_to_wire(NotFound(f"plan {h.get('plan')} is not known to the dispatcher"))
        else:
            reply["nodes"] = frag.nodes
        self._to_service(svc, reply)

    def _register(self, ident: bytes, h: dict) -> None:
        """Admit a service: the right protocol version and service credential, sane names, and a name (a
        device) nobody alive holds. A process re-registering (same instance secret) replaces its old
        registration; another one is refused (``retry``: the holder may be dead and not yet declared so)."""
        if h.get("v") != PROTOCOL_VERSION:
            self._refuse(ident, ProtocolError(f"protocol version {h.get('v')!r} != {PROTOCOL_VERSION}"))
            return
        token = h.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.service_token.encode()):
            log.warning("refused a service registration with a wrong service credential")
            self._refuse(ident, Unauthorized("the dispatcher refused the service credential: give this service the "
                                             "dispatcher's own (TENSORWIRE_SERVICE_TOKEN, --service-token-file, or "
                                             "KEYS/service.token from `tensorwire keys`)"))
            return
        kind = h.get("service")
        name = h.get("device") if kind == "worker" else h.get("name", kind)
        info, instance, pid = h.get("info"), h.get("instance"), h.get("pid")
        if not (isinstance(kind, str) and _NAME.fullmatch(kind) and isinstance(name, str) and _NAME.fullmatch(name)
                and (info is None or isinstance(info, dict)) and isinstance(instance, str)
                and 16 <= len(instance) <= 128 and type(pid) is int):
            self._refuse(ident, ProtocolError("a registration needs string 'service' and 'device'/'name' (letters, "
                                              "digits, _.@:-), a map 'info', a string 'instance' and an int 'pid'"))
            return
        info = dict(info or {})
        info["pid"] = pid
        old = self.workers.get(name) if kind == "worker" else self.named.get(name)
        rank_dev = info.get("device") if kind == "collectives" else None
        if kind == "collectives" and not isinstance(rank_dev, str):
            self._refuse(ident, ProtocolError("a collectives rank must name its device in info"))
            return
        holder = old or (self.coll_ranks.get(rank_dev) if rank_dev is not None else None)
        if holder is not None and holder.ident != ident:
            if hmac.compare_digest(holder.instance.encode(), instance.encode()):  # the same process, reconnected
                self._service_lost(holder, "reconnected")
            else:
                what = f"{name} is already served" if kind == "worker" else f"{holder.name} is already registered"
                cls = DeviceError if kind in ("worker", "collectives") else Unauthorized
                log.warning("refused a second registration: %s (by pid %s)", what, holder.info.get("pid"))
                self._refuse(ident, cls(f"{what} by a live service (pid {holder.info.get('pid')}); a second one is "
                                        f"refused, not swapped in (stop the first, or wait until the dispatcher "
                                        f"declares it dead after {HEARTBEAT_S * LIVENESS:g}s of silence)"),
                             retry=True)
                return
        svc = ServiceInfo(ident, kind, name, info, time.monotonic(), instance)
        self.svc_by_ident[ident] = svc
        if kind == "worker":
            self.workers[name] = svc
        else:
            self.named[name] = svc
            if rank_dev is not None:
                self.coll_ranks[rank_dev] = svc
        self.services.send_multipart([ident, pack_header({"t": "registered", "name": name, "epoch": self.epoch})])
        log.info("registered %s %s", kind, name)

    def _service_lost(self, svc: ServiceInfo, why: str) -> None:
        self.svc_by_ident.pop(svc.ident, None)
        if svc.kind == "worker":
            if self.workers.get(svc.name) is svc:
                del self.workers[svc.name]
            err = error_to_wire(WorkerLost(f"the worker for {svc.name} {why}; tensors on {svc.name} are lost",
                                           device=svc.name))
            for s in self.sessions.values():
                lost = [i for i, d in s.handles.items() if d == svc.name]
                for i in lost:
                    del s.handles[i]
                    s.failed[i] = err
                waiting = [q for q, p in s.pending.items() if svc.name in p.expect]
                for q in waiting:  # requests waiting on it get the error now...
                    p = s.pending[q]
                    p.expect.discard(svc.name)
                    p.errors.append(err)
                    self._maybe_reply(s, q)
                if svc.name in s.touched:
                    s.touched.discard(svc.name)
                    if not waiting:  # ...otherwise the session hears of it at its next sync
                        s.errors.append(err)
            for key, (sid, src, dst) in list(self.xroutes.items()):
                if src == svc.name:
                    del self.xroutes[key]
                    w = self.workers.get(dst)
                    if w is not None:
                        self._to_service(w, {"t": "xfer", "s": sid, "x": key, "err": err})
            for q, g in list(self.gathers.items()):
                if svc.name in g.expect:
                    g.expect.discard(svc.name)
                    if not g.expect:
                        self._finish_gather(q)
            self.telemetry.workers_lost[svc.name] += 1
            self.telemetry.load.pop(svc.name, None)
            for gk, pend in list(self.coll_pending.items()):
                if svc.name in pend["all"]:
                    self._coll_failed(gk, f"the worker for {svc.name} {why} during the collective")
            for rank in self.coll_ranks.values():
                self._to_service(rank, {"t": "worker_lost", "device": svc.name})
        else:
            if self.named.get(svc.name) is svc:
                del self.named[svc.name]
            if svc.kind == "collectives":
                dev = svc.info.get("device")
                if self.coll_ranks.get(dev) is svc:
                    del self.coll_ranks[dev]
                for gk, pend in list(self.coll_pending.items()):
                    if dev in pend["all"]:
                        self._coll_failed(gk, f"the collectives rank for {dev} {why}")
            for q, (sid, cq, name) in list(self.forwards.items()):
                if name == svc.name:
                    self.forwards.pop(q)
                    owner = self.sessions.get(sid)
                    if owner is None:
                        continue
                    self._to_client(owner.ident, {"t": "service_reply", "q": cq, "error": error_to_wire(
                        ServiceUnavailable(f"the {svc.name} service {why}"))})
        log.warning("%s %s %s", svc.kind, svc.name, why)

    def _coll_failed(self, gk, why: str, err: dict | None = None) -> None:
        """Answer every worker still waiting on collective ``gk`` with an error (never leave one hanging):
        ``err`` when a part's input failed with it, else ``ServiceUnavailable`` saying ``why``."""
        pend = self.coll_pending.pop(gk, None)
        if pend is None:
            return
        err = err or error_to_wire(ServiceUnavailable(f"collective failed: {why}"))
        for dev in pend["devices"]:
            w = self.workers.get(dev)
            if w is not None:
                self._to_service(w, {"t": "coll_done", "key": gk, "err": err})
        if len(pend.get("ready", ())) < len(pend["all"]):  # no rank was released: they forget it and go on
            # a worker whose part has not started yet drops this coll_done (it knows no such part): its coll_ready
            # comes later and is answered with the error then (see _coll_ready)
            self.coll_failed[gk] = (set(pend["all"]) - set(pend.get("ready", ())), err)
            if len(self.coll_failed) > MAX_FAILED_COLLECTIVES:
                self.coll_failed.pop(next(iter(self.coll_failed)))
            for dev in pend["all"]:
                rank = self.coll_ranks.get(dev)
                if rank is not None:
                    self._to_service(rank, {"t": "coll_cancel", "key": gk})

    def _worker_done(self, svc: ServiceInfo, h: dict, frames) -> None:
        sid, q = h.get("s"), h.get("q")
        s = self.sessions.get(sid) if type(sid) is bytes else None
        p = s.pending.get(q) if s is not None and (q is None or type(q) is int) else None
        if p is None or svc.name not in p.expect:
            return
        values, errors, fetch_errors = h.get("values") or [], h.get("errors") or [], h.get("fetch_errors") or []
        if not (isinstance(values, list) and isinstance(errors, list) and isinstance(fetch_errors, list)
                and all(isinstance(v, list) and len(v) == 4 and type(v[3]) is int and 0 <= v[3] < len(frames)
                        for v in values)):
            log.warning("worker %s sent a malformed result", svc.name)
            values, frames, fetch_errors = [], [], []
            errors = [ProtocolError(f"the worker for {svc.name} sent a malformed result").to_wire()]
        base = len(p.frames)
        for v in values:
            p.values.append([v[0], v[1], v[2], v[3] + base])
        p.frames.extend(frames)
        if frames:
            self.telemetry.device(svc.name).bytes_out += sum(map(len, frames))
        p.errors.extend(map(_wire_error, errors))
        for e in errors:
            self.telemetry.error(e)
        p.fetch_errors.extend(_wire_error(e, keep=("fetched", "node", "origin")) for e in fetch_errors)
        p.expect.discard(svc.name)
        self._maybe_reply(s, q)

    def _maybe_reply(self, s: Session, q) -> None:
        p = s.pending.get(q)
        if p is None or p.expect:
            return
        del s.pending[q]
        self._to_client(s.ident, {"t": "result", "q": q, "values": p.values, "errors": p.errors,
                                "fetch_errors": p.fetch_errors}, p.frames)
        if p.prof is not None:
            t0 = p.prof[1]
            self._span(s, ("dispatcher::batch", "dispatcher", t0, time.monotonic_ns() - t0, {"batch": p.prof[0]}))

    # -- clients -----------------------------------------------------------------------------
    def _on_client(self, ident: bytes, hframe, frames) -> None:
        try:
            h = unpack_header(hframe.bytes)
        except ProtocolError as e:
            self._to_client(ident, {"t": "error", "error": e.to_wire()})
            return
        t = h["t"]
        q = h.get("q")
        if q is not None and type(q) is not int:
            self._to_client(ident, {"t": "error", "error": ProtocolError("'q' must be an int").to_wire()})
            return
        if t == "hello":
            self._hello(ident, h)
            return
        if t == "ping":
            s = self._session_of(h.get("k")) if h.get("k") is not None else None
            pong = {"t": "pong", "q": q}
            if s is not None:  # a client waiting on a long answer pings: that renews its lease
                s.last_seen = time.time()
                if h.get("w") is not None:  # waiting on direct channels: are those workers still the ones granted?
                    pong["lost"] = self._lost_workers(h["w"])
            self._to_client(ident, pong)
            return
        s = self._session_of(h.get("k"))
        if s is None:  # a routing id is never an identity: without the session's key nothing is touched
            key = h.get("k")
            expired = self.leases.why_unknown(key[:SID_BYTES]) if isinstance(key, bytes) else None
            self._to_client(ident, {"t": "error", "q": q, "error": error_to_wire(Unauthorized(expired or
                "no session: send 'hello' with the protocol version and credentials first, then the session "
                "key it answers with ('k') in every message"))})
            return
        s.ident = ident  # answers go where the key was last proven (a client that reconnected gets them)
        s.last_seen = time.time()
        if h.get("forget") is not None:  # handles the client released on direct channels
            self._forget(s, h["forget"])
        if t == "lease":  # the client's renewal: nothing to answer
            return
        if t == "batch":
            self._batch(s, h, frames)
        elif t == "channel":  # a fresh grant of direct channels (the last one is about to expire)
            self._to_client(ident, {"t": "channels", "q": q, "channels": self._channels(s)})
        elif t == "close":
            self._close_session(s)
            if q is not None:
                self._to_client(ident, {"t": "closed", "q": q})
        elif t == "cancel":  # tw.cancel(): the workers stop what the session submitted so far
            for dev in s.touched:
                w = self.workers.get(dev)
                if w is not None:
                    self._to_service(w, {"t": "cancel", "s": s.sid})
        elif t == "devices":
            self._to_client(ident, {"t": "devices", "q": q, "devices": self._device_list()})
        elif t == "stats":
            self._stats(s, h)
        elif t == "profile_collect":
            self._profile_collect(s, h)
        elif t == "service":
            self._forward(s, h, frames)
        else:
            self._to_client(ident, {"t": "error", "q": q,
                                    "error": ProtocolError(f"unknown message type {t[:100]!r}").to_wire()})

    def _session_of(self, key) -> Session | None:
        """The session whose key (public id + secret, from ``welcome``) is ``key``; None for anything else. The
        secret is compared in constant time."""
        if type(key) is not bytes or len(key) != SID_BYTES + SECRET_BYTES:
            return None
        s = self.sessions.get(key[:SID_BYTES])
        if s is None or not hmac.compare_digest(s.secret, key[SID_BYTES:]):
            return None
        return s

    def _device_list(self) -> list[dict]:
        return [{"device": d, **{k: v for k, v in w.info.items() if k != "device"}}
                for d, w in sorted(self.workers.items(), key=lambda kv: _device_sort_key(kv[0]))]

    def _hello(self, ident: bytes, h: dict) -> None:
        if h.get("v") != PROTOCOL_VERSION:
            self._to_client(ident, {"t": "error", "error": ProtocolError(
                f"protocol version mismatch: client speaks {str(h.get('v'))[:20]!r}, dispatcher speaks "
                f"{PROTOCOL_VERSION}; install matching tensorwire versions").to_wire()})
            return
        token = h.get("token")
        token = token.encode() if isinstance(token, str) else b""
        admin = bool(self.admin_token) and hmac.compare_digest(token, self.admin_token.encode())
        if self.token and not admin and not hmac.compare_digest(token, self.token.encode()):
            self._to_client(ident, {"t": "error", "error": Unauthorized(
                "the dispatcher refused the credentials (pass token= to tw.connect or set TENSORWIRE_TOKEN)"
            ).to_wire()})
            return
        old = self.sessions.get(self.by_ident.get(ident, b""))
        if old is not None and old.ident == ident:  # a second hello on one connection replaces its session
            self._close_session(old, "replaced by a new hello on its connection")
        sid = secrets.token_bytes(SID_BYTES)
        while sid in self.sessions:  # (2^64 ids: a repeat is all but impossible)
            sid = secrets.token_bytes(SID_BYTES)
        s = Session(sid, secrets.token_bytes(SECRET_BYTES), ident, str(h.get("client", ""))[:200], admin,
                    last_seen=time.time(), host=str(h.get("host", ""))[:64])
        self.sessions[sid] = s
        self.by_ident[ident] = sid
        self.telemetry.sessions_opened += 1
        log.info("session %s opened by %s%s (%d live)", sid.hex(), s.client or "a client", " (admin)" if admin else "",
                 len(self.sessions))
        self._to_client(ident, {"t": "welcome", "session": sid.hex(), "key": sid + s.secret, "admin": admin,
                                "devices": self._device_list(), "hub_url": self.hub_url,
                                "services": sorted(self.named), "lease_s": self.leases.lease_s,
                                "channels": self._channels(s)})

    # -- direct channels (the data plane: see protocol/capability.py and backends/direct.py) -------------------
    def _channels(self, s: Session) -> list[dict]:
        """Grants of direct channels for session ``s``: each worker that listens for them, with its address, its
        public worker id, its CURVE public key (when the cluster has keys: the client pins it) and a capability
        bound to the session, that worker process, this epoch and an expiry."""
        expires = int(time.time() + CHANNEL_TTL_S)
        out = []
        for dev, w in self.workers.items():
            addr = w.info.get("direct")
            if isinstance(addr, str) and (s.host == w.info.get("host") or not is_local_address(addr)):
                # (a worker listening on loopback or a unix socket is offered only to clients on its own host)
                out.append({"device": dev, "address": addr, "wid": worker_id(w.instance), "expires": expires,
                            "cap": issue(channel_key(w.instance), s.sid, dev, self.epoch, expires),
                            "key": w.info.get("direct_key") if isinstance(w.info.get("direct_key"), str) else None})
        return out

    def _peer(self, src: str, dst: str) -> list | None:
        """How ``src``'s worker reaches ``dst``'s directly: ``[address, CURVE key or None, same host]``; None: through
        this dispatcher (``dst`` has no direct channel, or they do not agree on encryption)."""
        a, b = self.workers.get(src), self.workers.get(dst)
        if a is None or b is None or not isinstance(b.info.get("direct"), str):
            return None
        key = b.info.get("direct_key")
        if bool(a.info.get("direct_key")) != bool(key):
            return None
        host = a.info.get("host")
        same = isinstance(host, str) and host == b.info.get("host")
        if not same and is_local_address(b.info["direct"]):  # (its loopback is not the source's)
            return None
        return [b.info["direct"], key if isinstance(key, str) else None, same]

    def _lost_workers(self, wanted) -> list[str]:
        """Of ``[[device, worker id], ...]`` (the channels a client waits on), the devices whose worker is gone or
        is another process now."""
        if type(wanted) is not list:
            return []
        lost = []
        for item in wanted[:1024]:
            if type(item) is list and len(item) == 2 and type(item[0]) is str:
                w = self.workers.get(item[0])
                if w is None or worker_id(w.instance) != item[1]:
                    lost.append(item[0])
        return lost

    @staticmethod
    def _forget(s: Session, ids) -> None:
        """Drop handles the client released on a direct channel (their worker has freed them already)."""
        if _is_int_list(ids):
            for i in ids:
                s.handles.pop(i, None)

    def _close_session(self, s: Session, why: str = "closed by its client") -> None:
        if self.sessions.pop(s.sid, None) is not None:
            log.info("session %s %s (%d handles; %d live)", s.sid.hex(), why, len(s.handles), len(self.sessions))
        if self.by_ident.get(s.ident) == s.sid:
            del self.by_ident[s.ident]
        for w in self.workers.values():
            self._to_service(w, {"t": "drop_session", "s": s.sid})
            w.plans = {p for p in w.plans if p[0] != s.sid}

    def _fail_batch(self, s: Session, outs, err: dict) -> None:
        """A batch failed validation: its outputs fail (later batches reading them fail with DependencyFailed)
        and the error is reported at the next sync point. Live handles are never touched."""
        if _is_int_list(outs):  # (only a batch's kept outputs: its temporaries have no handles)
            for i in outs:
                if i not in s.handles:
                    s.failed[i] = err
        s.errors.append(err)
        self.telemetry.error(err)

    def _batch(self, s: Session, h: dict, frames) -> None:
        q = h.get("q")
        prof = h.get("prof")  # the profiler is on: the batch's number in the client's profile
        t0 = time.monotonic_ns() if prof is not None else 0
        try:
            self._run_batch(s, h, frames, t0)
        except TensorwireError as e:
            err = e.to_wire()
            self._fail_batch(s, self._kept_outs(s, h), err)
            if h.get("sync") or h.get("fetch"):
                fetch = h.get("fetch")
                fe = [{**err, "fetched": i} for i in fetch] if _is_int_list(fetch) else []
                errs, s.errors = s.errors, []
                self._to_client(s.ident, {"t": "result", "q": q, "values": [], "errors": errs, "fetch_errors": fe})
        if type(prof) is int:
            self._span(s, ("dispatcher::route", "dispatcher", t0, time.monotonic_ns() - t0,
                           {"batch": prof, "nodes": len(self._outs(s, h)), "replay": h.get("nodes") is None}))

    @staticmethod
    def _outs(s: Session, h: dict):
        """The batch's output ids (see ``protocol.batch_ids``), or [] where they cannot be known (a malformed batch,
        or a replay of a plan the dispatcher does not have)."""
        n = None
        if "out_first" in h:
            nodes, plan = h.get("nodes"), s.plans.get(h.get("plan")) if type(h.get("plan")) is int else None
            if type(nodes) is list:
                n = len(nodes)
            elif isinstance(plan, Split):
                n = plan.n_nodes
            elif isinstance(plan, RawPlan):
                n = len(plan.nodes)
        try:
            outs = out_ids(h, n)
        except ProtocolError:
            return []
        return outs if type(outs) is range or _is_int_list(outs) else []

    def _kept_outs(self, s: Session, h: dict) -> object:
        """The output ids of a batch that are not its temporaries (what a failed batch marks failed)."""
        if "out_first" not in h and "temps" not in h:
            return h.get("outs")  # (checked by _fail_batch: a flood of ids is gone through once)
        outs = self._outs(s, h)
        try:
            temps = check_temps(h.get("temps"), len(outs))
        except ProtocolError:
            temps = []
        return [outs[j] for j in kept_nodes(len(outs), temps)] if temps else list(outs)

    def _span(self, s: Session, span: tuple) -> None:
        """Keep a profiler span for the session's client to collect (at most MAX_SPANS; the rest are counted)."""
        if s.spans is None:
            s.spans = []
        if len(s.spans) < MAX_SPANS:
            s.spans.append(span)
        else:
            s.spans_dropped += 1

    @staticmethod
    def _keep_raw_plan(s: Session, plan_no, nodes, devs) -> None:
        """A well-formed batch that cannot run now: the client replays its structure by number from now on, so
        keep it, to be split again when it next runs (on the devices then serving)."""
        if plan_no is None:
            return
        if len(s.plans) >= MAX_PLANS:
            s.plans.pop(next(iter(s.plans)))
        s.plans[plan_no] = RawPlan(nodes, devs)

    def _run_batch(self, s: Session, h: dict, frames, t0: int = 0) -> None:
        q = h.get("q")
        prof = h.get("prof")
        if prof is not None and type(prof) is not int:
            raise ProtocolError("'prof' must be an int (the batch's number in the client's profile)")
        ext = h.get("ext") or []
        outs = h.get("outs") or []  # (or the block from out_first, known once the plan is: see protocol.batch_ids)
        fetch = h.get("fetch") or []
        release = h.get("release") or []
        plan_no = h.get("plan")
        drop_plans = h.get("drop_plans") or []
        for name, lst in (("ext", ext), ("outs", outs), ("fetch", fetch), ("release", release),
                          ("drop_plans", drop_plans)):
            if not _is_int_list(lst):
                raise ProtocolError(f"batch '{name}' must be a list of ints")
        if plan_no is not None and type(plan_no) is not int:
            raise ProtocolError("'plan' must be an int")
        # (validation first, then the commit below: a batch that fails changes nothing but its outputs' errors)
        # every external input must be a live handle of this session
        handles = s.handles
        if h.get("lost"):
            self._lost_handles(s, h["lost"])
        locs = self._locs(s, h.get("locs"))
        ext_dev = [handles.get(i) or locs.get(i) for i in ext]
        failed_ext = {}
        if None in ext_dev:
            for k, i in enumerate(ext):
                if ext_dev[k] is None:
                    if i not in s.failed:
                        raise NotFound(f"handle {i} does not exist in this session (released, never created, "
                                       f"or another session's)")
                    failed_ext[k] = s.failed[i]
        nodes = h.get("nodes")
        if nodes is not None:
            self.telemetry.plan_misses += 1
            try:
                split = split_batch(nodes, h.get("devs") or [], [d or "" for d in ext_dev], self.workers)
            except ProtocolError:
                raise  # malformed: nothing is kept
            except TensorwireError:  # well formed, not runnable now (a device has no worker): keep the plan
                self._keep_raw_plan(s, plan_no, nodes, h.get("devs") or [])
                raise
        elif plan_no is not None:
            self.telemetry.plan_hits += 1
            split = s.plans.get(plan_no) if plan_no not in drop_plans else None
            if split is None:
                raise NotFound(f"plan {plan_no} is not known to the dispatcher (send the full batch)")
            if isinstance(split, RawPlan):
                if failed_ext:
                    raise _input_failed(ext, failed_ext)
                split = s.plans[plan_no] = split_batch(split.nodes, split.devs, ext_dev, self.workers)
            if ext_dev != split.ext_dev:
                for k, d in enumerate(ext_dev):
                    if d is not None and d != split.ext_dev[k]:
                        raise ProtocolError(f"plan {plan_no} replayed with input {ext[k]} on {d}, "
                                            f"expected {split.ext_dev[k]}")
        else:
            split = Split({}, [], [], 0, [], 0)
        out_first = h.get("out_first")
        if out_first is not None:
            outs = out_ids(h, split.n_nodes)
        if len(outs) != split.n_nodes or len(ext) != len(split.ext_dev):
            raise ProtocolError(f"batch has {split.n_nodes} nodes and {len(split.ext_dev)} inputs but "
                                f"{len(outs)} output ids and {len(ext)} input ids")
        temps = check_temps(h.get("temps"), split.n_nodes)
        kept = kept_nodes(split.n_nodes, temps) if temps else None  # (None: every node's id becomes a handle)
        kept_ids = outs if kept is None else [outs[j] for j in kept]
        if not handles.keys().isdisjoint(kept_ids):
            raise ProtocolError("an output id is already a live handle of this session")
        if failed_ext:  # an input failed before reaching any worker: the whole batch fails with it
            if nodes is not None:
                self._keep_raw_plan(s, plan_no, nodes, h.get("devs") or [])
            raise _input_failed(ext, failed_ext)
        dyn = h.get("dyn") or []
        if not isinstance(dyn, list):
            raise ProtocolError("'dyn' must be a list")
        dyn_by_node: dict[int, dict] = {}
        for item in dyn:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int)
                    and isinstance(item[1], dict)):
                raise ProtocolError("'dyn' entries must be [node, attrs]")
            dyn_by_node[item[0]] = item[1]
        colls = self._check_collectives(split, nodes, dyn_by_node) if split.coll_groups else None
        # --- everything validated: commit state and send ---
        for p in drop_plans:
            s.plans.pop(p, None)
        if nodes is not None and plan_no is not None:
            if len(s.plans) >= MAX_PLANS:
                s.plans.pop(next(iter(s.plans)))
            s.plans[plan_no] = split
        if kept is None:
            handles.update(zip(outs, split.node_dev))
        else:
            node_dev = split.node_dev
            handles.update((outs[j], node_dev[j]) for j in kept)
        if s.failed:
            for i in kept_ids:
                s.failed.pop(i, None)
            for i in release:
                s.failed.pop(i, None)
        by_dev_release: dict[str, list[int]] = {}
        for i in release:
            d = handles.pop(i, None) or locs.get(i)
            if d is not None:
                by_dev_release.setdefault(d, []).append(i)
        by_dev_fetch: dict[str, list[int]] = {}
        fetch_errors = []
        for i in fetch:
            d = s.handles.get(i) or locs.get(i)
            if d is None:
                if len(fetch_errors) >= MAX_FETCH_ERRORS:
                    continue
                err = s.failed.get(i) or NotFound(f"handle {i} does not exist in this session").to_wire()
                fetch_errors.append({**err, "fetched": i})
            else:
                by_dev_fetch.setdefault(d, []).append(i)
        reply_devs = set(by_dev_fetch)
        if h.get("sync"):  # every device holding the session's state, this batch's own included
            reply_devs |= (s.touched | set(split.frags)) & set(self.workers)
        coll_map, coll_direct = self._announce_collectives(s, colls) if colls else (None, None)
        xbase = self.next_x
        self.next_x += split.n_xfer
        xto: dict[str, list] = {}  # source device -> its transfers that go straight to the destination's worker
        for k, (src, dst) in enumerate(split.xfer_route):
            self.xroutes[xbase + k] = (s.sid, src, dst)
            peer = self._peer(src, dst)
            if peer is not None:
                xto.setdefault(src, []).append([k, *peer])
        devs = set(split.frags) | set(by_dev_release) | reply_devs
        nbytes = sum(map(len, frames)) if frames else 0
        # a batch split across devices releases each device's temporaries by id (a whole one passes the ranges on)
        temp_nodes = (set(range(split.n_nodes)).difference(kept)
                      if temps and not all(f.whole for f in split.frags.values()) else ())
        for dev in devs:
            w = self.workers.get(dev)
            if w is None:
                continue
            frag = split.frags.get(dev)
            msg = {"t": "run", "s": s.sid, "q": q, "x": xbase, "reply": dev in reply_devs,
                   "fetch": by_dev_fetch.get(dev, []), "release": by_dev_release.get(dev, [])}
            if prof is not None:
                msg["prof"] = prof
            if dev in xto:
                msg["xto"] = xto[dev]
            counters = self.telemetry.device(dev)
            counters.batches += 1
            if frag is not None:
                counters.ops += len(frag.nodes)
                counters.bytes_in += nbytes
            if coll_map:
                msg["coll"] = coll_map
                if coll_direct:  # these go over the devices' own transport (NCCL), not shared memory
                    msg["coll_direct"] = coll_direct
            if frag is not None:
                if frag.whole:  # the batch runs on this one device, in order: ids pass through as they are
                    msg["ext"] = ext
                    if out_first is None:
                        msg["outs"] = outs
                    else:
                        msg["out_first"] = out_first
                    if temps:
                        msg["temps"] = temps
                else:
                    msg["ext"] = [ext[k] for k in frag.ext]
                    msg["outs"] = [outs[j] if j is not None else None for j in frag.node_of]
                    if temp_nodes:  # this device's share of the temporaries: released once the fragment ran
                        msg["release"] = msg["release"] + [outs[j] for j in frag.node_of
                                                           if j is not None and j in temp_nodes]
                if plan_no is not None:
                    msg["plan"] = plan_no
                    key = (s.sid, plan_no)
                    if nodes is not None or key not in w.plans:
                        msg["nodes"] = frag.nodes
                        w.plans.add(key)
                else:
                    msg["nodes"] = frag.nodes
                if frag.dyn_nodes and dyn_by_node:
                    msg["dyn"] = [[li, dyn_by_node[frag.node_of[li]]] for li in frag.dyn_nodes
                                  if frag.node_of[li] in dyn_by_node]
                s.touched.add(dev)
            self._to_service(w, msg, frames if frag is not None else ())
        if reply_devs or h.get("sync") or fetch:
            p = Pending(set(d for d in reply_devs if d in self.workers))
            if prof is not None:
                p.prof = (prof, t0)
            p.errors.extend(s.errors)
            s.errors = []
            p.fetch_errors.extend(fetch_errors)
            s.pending[q] = p
            self._maybe_reply(s, q)

    def _locs(self, s: Session, locs) -> dict:
        """``{id: device}`` from a batch's ``locs`` (``{device: [ids]}``): where the handles the client made on
        direct channels live, which this dispatcher never saw. Only for ids it does not know itself, and only on
        devices served now; the worker holding them checks that they are the session's (it keeps each session's
        buffers apart), so a client naming ids it does not hold gets NotFound from there."""
        if not locs:
            return {}
        if not isinstance(locs, dict):
            raise ProtocolError("'locs' must map device names to lists of ids")
        out = {}
        for dev, ids in locs.items():
            if not isinstance(dev, str) or not _is_int_list(ids):
                raise ProtocolError("'locs' must map device names to lists of ids")
            if dev in self.workers:
                s.touched.add(dev)
                for i in ids:
                    out[i] = dev
        return out

    @staticmethod
    def _lost_handles(s: Session, lost) -> None:
        """Handles the client made on a direct channel to a worker that died (``{device: [ids]}``): using one fails
        with ``WorkerLost``, as for the handles this dispatcher routed there itself."""
        if not isinstance(lost, dict):
            raise ProtocolError("'lost' must map device names to lists of ids")
        for dev, ids in lost.items():
            if not isinstance(dev, str) or not _is_int_list(ids):
                raise ProtocolError("'lost' must map device names to lists of ids")
            err = error_to_wire(WorkerLost(f"the worker for {dev[:128]} was lost; tensors on {dev[:128]} are lost",
                                           device=dev[:128]))
            for i in ids:
                if i not in s.handles:
                    s.failed[i] = err

    def _check_collectives(self, split: Split, nodes, dyn_by_node: dict) -> list[tuple[int, list[str]]]:
        """Validate the batch's collectives (one key per collective, a rank serving every device); returns
        ``[(client key, devices in rank order)]`` for :meth:`_announce_collectives`. Changes nothing."""
        out = []
        for group in split.coll_groups:
            keys = set()
            for j in group:
                a = dyn_by_node.get(j) if nodes is None else None
                k = a.get("key") if a else split.coll_keys[j]
                if type(k) is not int:
                    raise ProtocolError("a collective's key must be an int")
                keys.add(k)
            if len(keys) != 1:
                raise ProtocolError("the parts of one collective must share one key")
            devs = [split.node_dev[j] for j in sorted(group, key=lambda j: split.coll_rank[j])]
            missing = [d for d in devs if d not in self.coll_ranks]
            if missing:
                raise ServiceUnavailable(f"the collectives service is not running for {', '.join(missing)} "
                                         f"(it runs under mpiexec: `mpiexec -n N tensorwire collectives ...`; "
                                         f"LocalCluster starts it for 2+ devices when mpi4py is installed)")
            out.append((keys.pop(), devs))
        return out

    def _announce_collectives(self, s: Session, colls: list[tuple[int, list[str]]]) -> dict:
        """Give each collective of the batch a global key and announce it, in order, to its ranks.

        Every rank hears of collectives in the dispatcher's one order, so all ranks run them in the
        same order whichever worker gets its input ready first. Returns ``{client key: global key}``.
        """
        mapping, direct = {}, []
        for key, devs in colls:
            gk = self.next_coll
            self.next_coll += 1
            mapping[key] = gk
            via = self._direct_transport(devs)
            self.coll_pending[gk] = {"all": set(devs), "devices": set(devs), "session": s.sid, "direct": via}
            if via:
                direct.append(gk)
            for d in devs:
                self._to_service(self.coll_ranks[d], {"t": "coll_announce", "key": gk, "devices": devs})
        return mapping, direct

    def _direct_transport(self, devs: list[str]) -> str | None:
        """The transport that moves a collective between device buffers directly (``"nccl"``): the one every
        device's worker registered (``info.collectives``) when every rank serving them has it too
        (``info.transports``); None: the workers stage their parts in shared memory for MPI."""
        names = set()
        for d in devs:
            w, rank = self.workers.get(d), self.coll_ranks.get(d)
            name = w.info.get("collectives") if w is not None else None
            have = rank.info.get("transports") if rank is not None else None
            if not isinstance(name, str) or not isinstance(have, list) or name not in have:
                return None
            names.add(name)
        return names.pop() if len(names) == 1 else None

    # -- stats and forwarding --------------------------------------------------------------------
    def _gather(self, kind: str, s: Session | None, cq, devices, msg: dict, data: dict | None = None) -> Gather:
        """Send ``msg`` (numbered) to the workers of ``devices`` and collect their answers (see :meth:`_gathered`)
        into ``data``; a worker lost meanwhile is not waited for."""
        q = self.next_gather
        self.next_gather += 1
        g = self.gathers[q] = Gather(kind, s.sid if s is not None else None, cq, set(devices), dict(data or {}))
        g.data["sent"] = {}
        for dev in devices:
            g.data["sent"][dev] = time.monotonic_ns()
            self._to_service(self.workers[dev], {**msg, "q": q})
        if not g.expect:
            self._finish_gather(q)
        return g

    def _gathered(self, svc: ServiceInfo, t: str, h: dict) -> None:
        """A worker's answer to a gathered request: a ``stats`` (its sessions, memory and load) or a ``profile``
        (its spans, with its clock's readings at receipt and answer, for the offset)."""
        q = h.get("q")
        g = self.gathers.get(q) if type(q) is int else None
        if g is None or svc.kind != "worker" or svc.name not in g.expect or t != ("profile" if g.kind == "profile"
                                                                                   else "stats"):
            return
        if t == "stats":
            sessions, memory, load = h.get("sessions"), h.get("memory"), h.get("load")
            g.data.setdefault("devices", {})[svc.name] = sessions if isinstance(sessions, dict) else {}
            g.data.setdefault("memory", {})[svc.name] = memory = memory if isinstance(memory, dict) else {}
            if isinstance(load, dict):
                self.telemetry.load[svc.name] = {**load, "memory": memory, "at": time.monotonic()}
        else:
            self._profile_part(g, svc, h)
        g.expect.discard(svc.name)
        if not g.expect:
            self._finish_gather(q)

    def _finish_gather(self, q) -> None:
        g = self.gathers.pop(q, None)
        if g is None:
            return
        s = self.sessions.get(g.sid) if g.sid is not None else None
        if s is None:  # the dispatcher's own poll, or a session gone meanwhile
            return
        if g.kind == "stats":
            self._finish_stats(s, g)
        elif g.kind == "profile":
            self._to_client(s.ident, {"t": "profile", "q": g.cq, "t_recv": g.data["t_recv"],
                                      "processes": g.data["processes"], "t_send": time.monotonic_ns()})

    def _stats(self, s: Session, h: dict) -> None:
        self._gather("stats", s, h.get("q"), list(self.workers), {"t": "stats"})

    def _finish_stats(self, s: Session, g: Gather) -> None:
        """Answer a stats request: a session sees its own buffers only; an admin session sees every session. Every
        session sees each device's load (queue, sessions, memory, recent throughput) and the services."""
        me = s.sid.hex()
        per_device = g.data.get("devices", {})
        if s.admin:
            devices, sessions = per_device, [sid.hex() for sid in self.sessions]
        else:
            devices = {d: ({me: per[me]} if me in per else {}) for d, per in per_device.items()}
            sessions = [me]
        now = time.monotonic()
        rates = self.telemetry.rates(now)
        load = {d: {**{k: v for k, v in ld.items() if k != "at"}, **rates.get(d, {})}
                for d, ld in self.telemetry.load.items() if d in self.workers}
        services = [{"name": n, "kind": v.kind, "pid": v.info.get("pid"), "heartbeat_age_s": now - v.last_seen,
                     **({"device": v.info["device"]} if "device" in v.info else {})}
                    for n, v in sorted(self.named.items())]
        self._to_client(s.ident, {"t": "stats", "q": g.cq, "devices": devices, "memory": g.data.get("memory", {}),
                                  "session": me, "sessions": sessions, "admin": s.admin,
                                  "services": sorted(self.named), "service_info": services, "load": load,
                                  "live_sessions": len(self.sessions), "hub_url": self.hub_url,
                                  "uptime_s": time.time() - self.started, "workers": self._device_list()})

    def _profile_collect(self, s: Session, h: dict) -> None:
        """The profiler's collection: this dispatcher's spans of the session and, gathered from every worker the
        session touched, theirs, each worker's clock offset estimated from this exchange (NTP style)."""
        t_recv = time.monotonic_ns()
        spans, s.spans = s.spans or [], None
        dropped, s.spans_dropped = s.spans_dropped, 0
        asked = h.get("devices")  # the devices the client used on direct channels, which it did not see
        used = s.touched | ({d for d in asked if isinstance(d, str)} if isinstance(asked, list) else set())
        devices = [d for d in sorted(used) if d in self.workers]
        me = {"name": "dispatcher", "pid": os.getpid(), "offset_ns": 0, "rtt_ns": 0, "spans": spans, "dropped": dropped}
        self._gather("profile", s, h.get("q"), devices, {"t": "profile_collect", "s": s.sid},
                     {"t_recv": t_recv, "processes": [me]})

    def _profile_part(self, g: Gather, svc: ServiceInfo, h: dict) -> None:
        """One worker's spans: its clock's offset from this one is ``((t_recv - sent) + (t_send - received)) / 2``,
        within half the round trip less the worker's own time (``rtt_ns``)."""
        received = time.monotonic_ns()
        sent = g.data["sent"].get(svc.name)
        t1, t2, spans = h.get("t_recv"), h.get("t_send"), h.get("spans")
        if type(t1) is not int or type(t2) is not int or not isinstance(spans, list) or sent is None:
            log.warning("worker %s sent a malformed profile", svc.name)
            return
        dropped = h.get("dropped")
        g.data["processes"].append({
            "name": f"worker {svc.name}", "pid": svc.info.get("pid"), "offset_ns": ((t1 - sent) + (t2 - received)) // 2,
            "rtt_ns": (received - sent) - (t2 - t1), "spans": spans[:MAX_SPANS],
            "dropped": dropped if type(dropped) is int else 0})

    def _forward(self, s: Session, h: dict, frames) -> None:
        name = h.get("service")
        svc = self.named.get(name) if isinstance(name, str) else None
        if svc is None:
            self._to_client(s.ident, {"t": "service_reply", "q": h.get("q"), "error": error_to_wire(
                ServiceUnavailable(f"the {str(name)[:100]} service is not running (registered: "
                                   f"{', '.join(sorted(self.named)) or 'none'})"))})
            return
        fq = self.next_fwd
        self.next_fwd += 1
        self.forwards[fq] = (s.sid, h.get("q"), name)
        request = {k: v for k, v in h.items() if k != "k"}  # the session's key stays with the dispatcher
        self._to_service(svc, {**request, "t": "request", "q": fq, "s": s.sid.hex()}, frames)


def _is_int_list(x) -> bool:
    """A list of ints (bools are not ids)."""
    return type(x) is list and (not x or set(map(type, x)) == _INT)


def _wire_error(err, keep=("node", "origin")) -> dict:
    """A service's error as it may go to a client: a string code and message (and the ids in ``keep``), nothing
    else; anything malformed becomes a ProtocolError."""
    if isinstance(err, dict) and isinstance(err.get("code"), str) and isinstance(err.get("message"), str):
        return {"code": err["code"], "message": err["message"],
                **{k: err[k] for k in keep if type(err.get(k)) is int}}
    return ProtocolError("a service sent a malformed error").to_wire()


def _input_failed(ext: list[int], failed_ext: dict) -> TensorwireError:
    """The error of a batch with an input that failed before reaching a worker: a lost input is lost again
    (``WorkerLost``, naming its device); any other failure becomes ``DependencyFailed`` naming it."""
    k, err = next(iter(failed_ext.items()))
    if err.get("code") == WorkerLost.code:
        return WorkerLost(f"input {ext[k]} was lost: {err.get('message')}", device=err.get("device"))
    return DependencyFailed(f"input {ext[k]} failed earlier ({err.get('code')}: {err.get('message')})")


def _device_sort_key(name: str):
    kind, _, idx = name.partition(":")
    return (kind != "cpu", kind, int(idx) if idx.isdigit() else 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tensorwire dispatcher", description="Run the dispatcher.")
    p.add_argument("--address", default=os.environ.get("TENSORWIRE_BIND", "tcp://127.0.0.1:5555"),
                   help="client address to bind (port 0 picks a free port)")
    p.add_argument("--service-address", default="tcp://127.0.0.1:5556",
                   help="address services (workers, autograd, collectives) connect to")
    p.add_argument("--token-file", default=None,
                   help="file holding the token clients must present (default $TENSORWIRE_TOKEN; none: any client "
                        "that reaches the socket may open a session)")
    p.add_argument("--admin-token-file", default=None,
                   help="file holding the admin token: sessions opened with it see every session in stats "
                        "(default $TENSORWIRE_ADMIN_TOKEN)")
    p.add_argument("--service-token-file", default=None,
                   help="file holding the credential services register with, created with a fresh token if "
                        "missing (default $TENSORWIRE_SERVICE_TOKEN, else KEYS/service.token)")
    p.add_argument("--keys", default=None,
                   help="CURVE keys directory from `tensorwire keys` (default $TENSORWIRE_KEYS): encrypts both "
                        "sockets and authorises client and service keys separately")
    p.add_argument("--insecure", action="store_true",
                   help="listen on a non-loopback address without CURVE (tokens and tensors travel in clear)")
    p.add_argument("--hub-url", default=os.environ.get("TENSORWIRE_HUB_URL"), help="model hub URL for sessions")
    add_metrics_args(p)
    args = p.parse_args(argv)
    configure_logging()
    keys = keys_dir(args.keys)
    if args.service_token_file and not os.path.exists(args.service_token_file):
        write_token_file(args.service_token_file, new_token())
    load_plugin_ops()  # custom ops of installed plugins, so batches using them validate
    tune_gc()
    d = Dispatcher(args.address, args.service_address, service_token=service_token(args.service_token_file, keys),
                   token=resolve_token(CLIENT_TOKEN_ENV, args.token_file),
                   admin_token=resolve_token(ADMIN_TOKEN_ENV, args.admin_token_file), keys=keys,
                   insecure=args.insecure, hub_url=args.hub_url)
    if args.metrics_port is not None:
        d.serve_metrics(args.metrics_port, args.metrics_host)
    profiled("dispatcher", d.serve, stop_event_on_signals())
    return 0
