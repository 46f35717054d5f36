"""The dispatcher: a broker in the manner of ZeroMQ's Majordomo pattern.

Two ROUTER sockets: one for clients, one for services (device workers, autograd, collectives).
Services register by name and exchange heartbeats; the dispatcher notices a dead one and tells the
sessions it affected. Every client message is checked (protocol version, credentials, structure,
handle ownership) before anything runs; a bad message gets a ``ProtocolError`` reply and the
dispatcher goes on serving everyone else.

Handles are namespaced by session: the dispatcher maps (session, client id) to the device that
holds it, and workers keep each session's buffers apart, so one session can never name another's
tensor.
"""

from __future__ import annotations

import argparse
import hmac
import logging
import os
import time
from dataclasses import dataclass, field

import zmq

from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol.errors import (
    DependencyFailed,
    NotFound,
    ProtocolError,
    ServiceUnavailable,
    TensorwireError,
    Unauthorized,
    WorkerLost,
    error_to_wire,
)
from tensorwire.protocol.service import (
    HEARTBEAT_S,
    LIVENESS,
    announce_ready,
    profiled,
    stop_event_on_signals,
    tune_gc,
)
from tensorwire.protocol.wire import MAX_MESSAGE, pack_header, send_parts, unpack_header

from .plans import Split, split_batch

log = logging.getLogger("tensorwire.dispatcher")
MAX_PLANS = 4096
SESSION_IDLE_S = float(os.environ.get("TENSORWIRE_SESSION_IDLE_S", "3600"))


@dataclass
class ServiceInfo:
    ident: bytes
    kind: str  # "worker", "autograd", "collectives", ...
    name: str  # device name for workers, service name otherwise
    info: dict
    last_seen: float
    plans: set = field(default_factory=set)  # (session, plan) pairs this worker has compiled


@dataclass
class Pending:
    expect: set
    values: list = field(default_factory=list)
    frames: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    fetch_errors: list = field(default_factory=list)


@dataclass
class Session:
    sid: bytes
    client: str
    handles: dict = field(default_factory=dict)  # client id -> device
    failed: dict = field(default_factory=dict)  # client id -> wire error (never reached a worker)
    plans: dict = field(default_factory=dict)  # plan no -> Split
    pending: dict = field(default_factory=dict)  # seq -> Pending
    errors: list = field(default_factory=list)
    touched: set = field(default_factory=set)  # devices holding state of this session
    last_seen: float = 0.0


_INT = {int}


class Dispatcher:
    """The broker process. ``serve()`` runs until ``stop`` is set."""

    def __init__(self, client_addr: str, service_addr: str, *, token: str | None = None,
                 hub_url: str | None = None, ctx: zmq.Context | None = None):
        self.ctx = ctx or zmq.Context.instance()
        self.clients = self.ctx.socket(zmq.ROUTER)
        self.services = self.ctx.socket(zmq.ROUTER)
        for s in (self.clients, self.services):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
            s.setsockopt(zmq.ROUTER_HANDOVER, 1)
            try:  # a dead peer is noticed at once where libzmq has this (draft) option; heartbeats otherwise
                s.setsockopt(zmq.ROUTER_NOTIFY, zmq.NOTIFY_DISCONNECT)
            except (zmq.ZMQError, AttributeError):
                pass
        self.client_addr = self._bind(self.clients, client_addr)
        self.service_addr = self._bind(self.services, service_addr)
        self.token = token
        self.hub_url = hub_url
        self.sessions: dict[bytes, Session] = {}
        self.svc_by_ident: dict[bytes, ServiceInfo] = {}
        self.workers: dict[str, ServiceInfo] = {}  # device -> worker
        self.named: dict[str, ServiceInfo] = {}  # service name -> service (autograd, collectives)
        self.xroutes: dict[int, tuple[bytes, str, str]] = {}  # transfer key -> (session, src, dst)
        self.next_x = 1
        self.stats_waits: dict[int, dict] = {}
        self.next_stats = 1
        self.forwards: dict[int, tuple] = {}  # service request id -> (session, client seq, service name)
        self.coll_ranks: dict[str, ServiceInfo] = {}  # device -> the collectives rank serving it
        self.coll_pending: dict[int, dict] = {}  # collective key -> {"all": devices, "devices": still waiting}
        self.next_coll = 1
        self.next_fwd = 1
        self.started = time.time()

    @staticmethod
    def _bind(sock: zmq.Socket, addr: str) -> str:
        if addr.endswith(":0"):
            port = sock.bind_to_random_port(addr[: addr.rindex(":")])
            return f"{addr[: addr.rindex(':')]}:{port}"
        sock.bind(addr)
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
            announce_ready("dispatcher", address=self.client_addr, service_address=self.service_addr,
                           pid=os.getpid())
        next_hb = time.monotonic() + HEARTBEAT_S
        while not stop.is_set():
            events = dict(poller.poll(int(HEARTBEAT_S * 1000)))
            if self.services in events:
                self._drain(self.services, self._on_service)
            if self.clients in events:
                self._drain(self.clients, self._on_client)
            now = time.monotonic()
            if now >= next_hb:
                next_hb = now + HEARTBEAT_S
                self._heartbeat(now)
        self.clients.close(0)
        self.services.close(0)

    def _drain(self, sock, handler) -> None:
        for _ in range(256):  # bounded, so neither socket starves the other
            if not sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:  # cheaper than catching zmq.Again
                return
            msg = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            if len(msg) < 2:
                continue
            if len(msg) == 2 and not msg[1].bytes:  # the peer disconnected (ROUTER_NOTIFY)
                self._disconnected(sock, msg[0].bytes)
                continue
            try:
                handler(msg[0].bytes, msg[1], msg[2:])
            except Exception as e:  # nothing a peer sends may stop the dispatcher
                log.exception("error handling a message")
                if handler == self._on_client:
                    self._to_client(msg[0].bytes, {"t": "error", "error": error_to_wire(e)})

    def _disconnected(self, sock, ident: bytes) -> None:
        if sock is self.services:
            svc = self.svc_by_ident.get(ident)
            if svc is not None:
                self._service_lost(svc, "disconnected (its process died or closed the connection)")
        else:
            s = self.sessions.get(ident)
            if s is not None:  # a client that vanished: free everything it held
                self._close_session(s)

    def _heartbeat(self, now: float) -> None:
        for svc in list(self.svc_by_ident.values()):
            if now - svc.last_seen > HEARTBEAT_S * LIVENESS:
                self._service_lost(svc, "stopped sending heartbeats")
            else:
                self._to_service(svc, {"t": "hb"})
        wall = time.time()
        for _sid, s in list(self.sessions.items()):
            if wall - s.last_seen > SESSION_IDLE_S:
                self._close_session(s)

    # -- services ----------------------------------------------------------------------------
    def _on_service(self, ident: bytes, hframe, frames) -> None:
        h = unpack_header(hframe.bytes)
        t = h["t"]
        svc = self.svc_by_ident.get(ident)
        if svc is not None:
            svc.last_seen = time.monotonic()
        if t == "hb":
            of = h.get("of")
            if of is not None:  # a service's heartbeat thread, on a socket of its own
                w = (self.workers.get(of) or self.named.get(of)) if isinstance(of, str) else None
                if w is not None and w.info.get("pid") == h.get("pid"):
                    w.last_seen = time.monotonic()
            elif svc is None:  # a service we forgot (dispatcher restarted): ask it to register
                self.services.send_multipart([ident, pack_header({"t": "hb"})])
            return
        if t == "register":
            self._register(ident, h)
            return
        if svc is None:
            return
        if t == "done":
            self._worker_done(svc, h, frames)
        elif t == "xfer":
            route = self.xroutes.pop(h.get("x"), None)
            if route is not None:
                dst = self.workers.get(route[2])
                if dst is not None:
                    self._to_service(dst, h, frames)
        elif t == "coll_ready":  # a worker's input is in shared memory
            pend = self.coll_pending.get(h.get("key"))
            if pend is None:
                return
            if svc.name not in self.coll_ranks:
                self._coll_failed(h.get("key"), f"no collectives rank serves {svc.name}")
                return
            pend.setdefault("ready", {})[svc.name] = h
            if len(pend["ready"]) == len(pend["all"]):
                # every part is ready: release the ranks together, so none spins in MPI waiting for a peer
                for dev, msg in pend["ready"].items():
                    self._to_service(self.coll_ranks[dev], msg)
        elif t == "coll_done":  # a rank finished (or failed) its part: tell its worker
            pending = self.coll_pending.get(h.get("key"))
            dev = h.get("device")
            w = self.workers.get(dev) if isinstance(dev, str) else None
            if w is not None:
                self._to_service(w, {"t": "coll_done", "key": h.get("key"), **({"err": h["err"]} if h.get("err")
                                                                                else {})})
            if pending is not None:
                pending["devices"].discard(dev)
                if not pending["devices"]:
                    del self.coll_pending[h.get("key")]
        elif t == "stats":
            w = self.stats_waits.get(h.get("q"))
            if w is not None:
                w["devices"][h.get("device")] = h.get("sessions", {})
                w["memory"][h.get("device")] = h.get("memory") or {}
                w["expect"].discard(svc.name)
                if not w["expect"]:
                    self._finish_stats(h.get("q"))
        elif t == "reply":  # a named service answering a forwarded request
            fwd = self.forwards.pop(h.get("q"), None)
            if fwd is not None:
                sid, cq, _ = fwd
                self._to_client(sid, {**h, "t": "service_reply", "q": cq}, frames)

    def _register(self, ident: bytes, h: dict) -> None:
        if h.get("v") != PROTOCOL_VERSION:
            self.services.send_multipart([ident, pack_header(
                {"t": "refused", "message": f"protocol version {h.get('v')} != {PROTOCOL_VERSION}"})])
            return
        if self.token and not hmac.compare_digest(str(h.get("token") or ""), self.token):
            self.services.send_multipart([ident, pack_header({"t": "refused", "message": "bad token"})])
            return
        kind = str(h.get("service", ""))
        name = str(h.get("device") if kind == "worker" else h.get("name", kind))
        old = self.workers.get(name) if kind == "worker" else self.named.get(name)
        if old is not None and old.ident != ident:
            self._service_lost(old, "was replaced by a new registration")
        info = dict(h.get("info") or {})
        info["pid"] = h.get("pid")
        svc = ServiceInfo(ident, kind, name, info, time.monotonic())
        self.svc_by_ident[ident] = svc
        if kind == "worker":
            self.workers[name] = svc
        else:
            self.named[name] = svc
            if kind == "collectives" and isinstance(info.get("device"), str):
                self.coll_ranks[info["device"]] = svc
        self.services.send_multipart([ident, pack_header({"t": "registered", "name": name})])
        log.info("registered %s %s", kind, name)

    def _service_lost(self, svc: ServiceInfo, why: str) -> None:
        self.svc_by_ident.pop(svc.ident, None)
        if svc.kind == "worker":
            if self.workers.get(svc.name) is svc:
                del self.workers[svc.name]
            err = error_to_wire(WorkerLost(f"the worker for {svc.name} {why}; tensors on {svc.name} are lost"))
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
            for q, w in list(self.stats_waits.items()):
                if svc.name in w["expect"]:
                    w["expect"].discard(svc.name)
                    if not w["expect"]:
                        self._finish_stats(q)
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
                    self._to_client(sid, {"t": "service_reply", "q": cq, "error": error_to_wire(
                        ServiceUnavailable(f"the {svc.name} service {why}"))})
        log.warning("%s %s %s", svc.kind, svc.name, why)

    def _coll_failed(self, gk, why: str) -> None:
        """Answer every worker still waiting on collective ``gk`` with an error (never leave one hanging)."""
        pend = self.coll_pending.pop(gk, None)
        if pend is None:
            return
        err = error_to_wire(ServiceUnavailable(f"collective failed: {why}"))
        for dev in pend["devices"]:
            w = self.workers.get(dev)
            if w is not None:
                self._to_service(w, {"t": "coll_done", "key": gk, "err": err})

    def _worker_done(self, svc: ServiceInfo, h: dict, frames) -> None:
        s = self.sessions.get(h.get("s"))
        if s is None:
            return
        q = h.get("q")
        p = s.pending.get(q)
        if p is None:
            return
        base = len(p.frames)
        for v in h.get("values") or ():
            p.values.append([v[0], v[1], v[2], v[3] + base])
        p.frames.extend(frames)
        p.errors.extend(h.get("errors") or ())
        p.fetch_errors.extend(h.get("fetch_errors") or ())
        p.expect.discard(svc.name)
        self._maybe_reply(s, q)

    def _maybe_reply(self, s: Session, q) -> None:
        p = s.pending.get(q)
        if p is None or p.expect:
            return
        del s.pending[q]
        self._to_client(s.sid, {"t": "result", "q": q, "values": p.values, "errors": p.errors,
                                "fetch_errors": p.fetch_errors}, p.frames)

    # -- clients -----------------------------------------------------------------------------
    def _on_client(self, ident: bytes, hframe, frames) -> None:
        try:
            h = unpack_header(hframe.bytes)
        except ProtocolError as e:
            self._to_client(ident, {"t": "error", "error": e.to_wire()})
            return
        t = h["t"]
        if t == "hello":
            self._hello(ident, h)
            return
        if t == "ping":
            self._to_client(ident, {"t": "pong", "q": h.get("q")})
            return
        s = self.sessions.get(ident)
        if s is None:
            self._to_client(ident, {"t": "error", "q": h.get("q"), "error": error_to_wire(
                Unauthorized("no session: send 'hello' with the protocol version and credentials first"))})
            return
        s.last_seen = time.time()
        if t == "batch":
            self._batch(s, h, frames)
        elif t == "close":
            self._close_session(s)
            if h.get("q") is not None:
                self._to_client(ident, {"t": "closed", "q": h.get("q")})
        elif t == "devices":
            self._to_client(ident, {"t": "devices", "q": h.get("q"), "devices": self._device_list()})
        elif t == "stats":
            self._stats(s, h)
        elif t == "service":
            self._forward(s, h, frames)
        else:
            self._to_client(ident, {"t": "error", "q": h.get("q"),
                                    "error": ProtocolError(f"unknown message type {t!r}").to_wire()})

    def _device_list(self) -> list[dict]:
        return [{"device": d, **{k: v for k, v in w.info.items() if k != "device"}}
                for d, w in sorted(self.workers.items(), key=lambda kv: _device_sort_key(kv[0]))]

    def _hello(self, ident: bytes, h: dict) -> None:
        if h.get("v") != PROTOCOL_VERSION:
            self._to_client(ident, {"t": "error", "error": ProtocolError(
                f"protocol version mismatch: client speaks {h.get('v')!r}, dispatcher speaks "
                f"{PROTOCOL_VERSION}; install matching tensorwire versions").to_wire()})
            return
        if self.token and not hmac.compare_digest(str(h.get("token") or ""), self.token):
            self._to_client(ident, {"t": "error", "error": Unauthorized(
                "the dispatcher refused the credentials (pass token= to tw.connect or set TENSORWIRE_TOKEN)"
            ).to_wire()})
            return
        old = self.sessions.get(ident)
        if old is not None:
            self._close_session(old)
        self.sessions[ident] = Session(ident, str(h.get("client", ""))[:200], last_seen=time.time())
        self._to_client(ident, {"t": "welcome", "session": ident.hex(), "devices": self._device_list(),
                                "hub_url": self.hub_url, "services": sorted(self.named)})

    def _close_session(self, s: Session) -> None:
        self.sessions.pop(s.sid, None)
        for w in self.workers.values():
            self._to_service(w, {"t": "drop_session", "s": s.sid})
            w.plans = {p for p in w.plans if p[0] != s.sid}

    def _fail_batch(self, s: Session, outs, err: dict) -> None:
        for i in outs or ():
            if isinstance(i, int):
                s.failed[i] = err
        s.errors.append(err)

    def _batch(self, s: Session, h: dict, frames) -> None:
        q = h.get("q")
        try:
            self._run_batch(s, h, frames)
        except TensorwireError as e:
            err = e.to_wire()
            self._fail_batch(s, h.get("outs"), err)
            if h.get("sync") or h.get("fetch"):
                fe = [{**err, "fetched": i} for i in (h.get("fetch") or ()) if isinstance(i, int)]
                errs, s.errors = s.errors, []
                self._to_client(s.sid, {"t": "result", "q": q, "values": [], "errors": errs, "fetch_errors": fe})

    def _run_batch(self, s: Session, h: dict, frames) -> None:
        q = h.get("q")
        ext = h.get("ext") or []
        outs = h.get("outs") or []
        fetch = h.get("fetch") or []
        release = h.get("release") or []
        plan_no = h.get("plan")
        for name, lst in (("ext", ext), ("outs", outs), ("fetch", fetch), ("release", release)):
            if type(lst) is not list or (lst and set(map(type, lst)) != _INT):  # bools are not ids either
                raise ProtocolError(f"batch '{name}' must be a list of ints")
        for p in h.get("drop_plans") or ():
            s.plans.pop(p, None)
        # every external input must be a live handle of this session
        handles = s.handles
        ext_dev = [handles.get(i) for i in ext]
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
            split = split_batch(nodes, h.get("devs") or [], [d or "" for d in ext_dev], self.workers)
            if plan_no is not None:
                if not isinstance(plan_no, int):
                    raise ProtocolError("'plan' must be an int")
                if len(s.plans) >= MAX_PLANS:
                    s.plans.pop(next(iter(s.plans)))
                s.plans[plan_no] = split
        elif plan_no is not None:
            split = s.plans.get(plan_no)
            if split is None:
                raise NotFound(f"plan {plan_no} is not known to the dispatcher (send the full batch)")
            if ext_dev != split.ext_dev:
                for k, d in enumerate(ext_dev):
                    if d is not None and d != split.ext_dev[k]:
                        raise ProtocolError(f"plan {plan_no} replayed with input {ext[k]} on {d}, "
                                            f"expected {split.ext_dev[k]}")
        else:
            split = Split({}, [], [], 0, [], 0)
        if len(outs) != split.n_nodes or len(ext) != len(split.ext_dev):
            raise ProtocolError(f"batch has {split.n_nodes} nodes and {len(split.ext_dev)} inputs but "
                                f"{len(outs)} output ids and {len(ext)} input ids")
        if not handles.keys().isdisjoint(outs):
            raise ProtocolError("an output id is already a live handle of this session")
        if failed_ext:  # an input failed before reaching any worker: the whole batch fails with it
            k, err = next(iter(failed_ext.items()))
            raise DependencyFailed(f"input {ext[k]} failed earlier ({err.get('code')}: {err.get('message')})")
        dyn = h.get("dyn") or []
        if not isinstance(dyn, list):
            raise ProtocolError("'dyn' must be a list")
        dyn_by_node: dict[int, dict] = {}
        for item in dyn:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int)
                    and isinstance(item[1], dict)):
                raise ProtocolError("'dyn' entries must be [node, attrs]")
            dyn_by_node[item[0]] = item[1]
        # --- everything validated: commit state and send ---
        handles.update(zip(outs, split.node_dev))
        if s.failed:
            for i in outs:
                s.failed.pop(i, None)
            for i in release:
                s.failed.pop(i, None)
        by_dev_release: dict[str, list[int]] = {}
        for i in release:
            d = handles.pop(i, None)
            if d is not None:
                by_dev_release.setdefault(d, []).append(i)
        by_dev_fetch: dict[str, list[int]] = {}
        fetch_errors = []
        for i in fetch:
            d = s.handles.get(i)
            if d is None:
                err = s.failed.get(i) or NotFound(f"handle {i} does not exist in this session").to_wire()
                fetch_errors.append({**err, "fetched": i})
            else:
                by_dev_fetch.setdefault(d, []).append(i)
        reply_devs = set(by_dev_fetch)
        if h.get("sync"):
            reply_devs |= s.touched & set(self.workers)
        coll_map = self._announce_collectives(s, split, nodes, dyn_by_node) if split.coll_groups else None
        xbase = self.next_x
        self.next_x += split.n_xfer
        for k, (src, dst) in enumerate(split.xfer_route):
            self.xroutes[xbase + k] = (s.sid, src, dst)
        devs = set(split.frags) | set(by_dev_release) | reply_devs
        for dev in devs:
            w = self.workers.get(dev)
            if w is None:
                continue
            frag = split.frags.get(dev)
            msg = {"t": "run", "s": s.sid, "q": q, "x": xbase, "reply": dev in reply_devs,
                   "fetch": by_dev_fetch.get(dev, []), "release": by_dev_release.get(dev, [])}
            if coll_map:
                msg["coll"] = coll_map
            if frag is not None:
                if frag.whole:  # the batch runs on this one device, in order: ids pass through as they are
                    msg["ext"], msg["outs"] = ext, outs
                else:
                    msg["ext"] = [ext[k] for k in frag.ext]
                    msg["outs"] = [outs[j] if j is not None else None for j in frag.node_of]
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
            p.errors.extend(s.errors)
            s.errors = []
            p.fetch_errors.extend(fetch_errors)
            s.pending[q] = p
            self._maybe_reply(s, q)

    def _announce_collectives(self, s: Session, split: Split, nodes, dyn_by_node: dict) -> dict:
        """Give each collective of the batch a global key and announce it, in order, to its ranks.

        Every rank hears of collectives in the dispatcher's one order, so all ranks run them in the
        same order whichever worker gets its input ready first. Returns ``{client key: global key}``.
        """
        mapping = {}
        for group in split.coll_groups:
            keys = set()
            for j in group:
                a = dyn_by_node.get(j) if nodes is None else None
                keys.add((a or {}).get("key") if a else split.coll_keys[j])
            if len(keys) != 1:
                raise ProtocolError("the parts of one collective must share one key")
            devs = [split.node_dev[j] for j in sorted(group, key=lambda j: split.coll_rank[j])]
            missing = [d for d in devs if d not in self.coll_ranks]
            if missing:
                raise ServiceUnavailable(f"the collectives service is not running for {', '.join(missing)} "
                                         f"(it runs under mpiexec: `mpiexec -n N tensorwire collectives ...`; "
                                         f"LocalCluster starts it for 2+ devices when mpi4py is installed)")
            gk = self.next_coll
            self.next_coll += 1
            mapping[keys.pop()] = gk
            self.coll_pending[gk] = {"all": set(devs), "devices": set(devs), "session": s.sid}
            for d in devs:
                self._to_service(self.coll_ranks[d], {"t": "coll_announce", "key": gk, "devices": devs})
        return mapping

    # -- stats and forwarding --------------------------------------------------------------------
    def _stats(self, s: Session, h: dict) -> None:
        q = self.next_stats
        self.next_stats += 1
        self.stats_waits[q] = {"client": s.sid, "cq": h.get("q"), "expect": set(self.workers), "devices": {},
                               "memory": {}, "me": s.sid.hex()}
        for w in self.workers.values():
            self._to_service(w, {"t": "stats", "q": q})
        if not self.workers:
            self._finish_stats(q)

    def _finish_stats(self, q) -> None:
        w = self.stats_waits.pop(q, None)
        if w is None:
            return
        self._to_client(w["client"], {"t": "stats", "q": w["cq"], "devices": w["devices"], "memory": w["memory"],
                                      "session": w["me"],
                                      "sessions": [sid.hex() for sid in self.sessions],
                                      "services": sorted(self.named), "uptime_s": time.time() - self.started,
                                      "workers": self._device_list()})

    def _forward(self, s: Session, h: dict, frames) -> None:
        name = h.get("service")
        svc = self.named.get(name) if isinstance(name, str) else None
        if svc is None:
            self._to_client(s.sid, {"t": "service_reply", "q": h.get("q"), "error": error_to_wire(
                ServiceUnavailable(f"the {name} service is not running (registered: "
                                   f"{', '.join(sorted(self.named)) or 'none'})"))})
            return
        fq = self.next_fwd
        self.next_fwd += 1
        self.forwards[fq] = (s.sid, h.get("q"), name)
        self._to_service(svc, {**h, "t": "request", "q": fq, "s": s.sid.hex()}, frames)


def _device_sort_key(name: str):
    kind, _, idx = name.partition(":")
    return (kind != "cpu", kind, int(idx) if idx.isdigit() else 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tensorwire dispatcher", description="Run the dispatcher.")
    p.add_argument("--address", default=os.environ.get("TENSORWIRE_BIND", "tcp://127.0.0.1:5555"),
                   help="client address to bind (port 0 picks a free port)")
    p.add_argument("--service-address", default="tcp://127.0.0.1:5556",
                   help="address services (workers, autograd, collectives) connect to")
    p.add_argument("--token", default=os.environ.get("TENSORWIRE_TOKEN"), help="credential clients must present")
    p.add_argument("--hub-url", default=os.environ.get("TENSORWIRE_HUB_URL"), help="model hub URL for sessions")
    args = p.parse_args(argv)
    logging.basicConfig(level=os.environ.get("TENSORWIRE_LOG", "WARNING"))
    from tensorwire.backends import load_ops

    load_ops()  # custom ops of installed plugins, so batches using them validate
    tune_gc()
    d = Dispatcher(args.address, args.service_address, token=args.token, hub_url=args.hub_url)
    profiled("dispatcher", d.serve, stop_event_on_signals())
    return 0
