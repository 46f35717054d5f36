"""The broker's part of the dispatcher (ZeroMQ's Majordomo pattern): its two sockets and main loop, services'
registration, heartbeats and liveness, and the service socket's handler table (``protocol.messages.SERVICE``)."""

from __future__ import annotations

import hmac
import logging
import os
import time

import zmq

from tensorwire.protocol import PROTOCOL_VERSION
from tensorwire.protocol.addresses import is_address_in_use, port_in_use
from tensorwire.protocol.errors import (
    ConfigurationError,
    DeviceError,
    ProtocolError,
    ServiceUnavailable,
    TensorwireError,
    Unauthorized,
    WorkerLost,
    error_to_wire,
)
from tensorwire.protocol.messages import SERVICE, check
from tensorwire.protocol.metrics import serve_metrics
from tensorwire.protocol.service import (
    HEARTBEAT_S,
    LIVENESS,
    announce_ready,
)
from tensorwire.protocol.wire import pack_header, send_parts, unpack_header

from .liveness import CLIENT_SLICE_S, drain_fully
from .state import (
    NAME_RE,
    ServiceInfo,
)
from .telemetry import POLL_S, DispatcherCollector

log = logging.getLogger("tensorwire.dispatcher")
_MALFORMED = "malformed message: the dispatcher could not process it (see its log)"
#: what each kind of ``protocol.messages.SERVICE`` does, once its sender is known to be a registered service
#: (``hb`` and ``register`` come from anyone with the service credential: ``_on_service`` takes them itself)
SERVICE_HANDLERS = {
    "bye": "_bye",
    "done": "_worker_done",
    "xfer": "_relay_xfer",
    "xfer_got": "_xfer_got",
    "coll_ready": "_coll_ready",
    "coll_abort": "_coll_abort",
    "coll_done": "_coll_done",
    "progress": "_progress",
    "need_plan": "_resend_plan",
    "stats": "_gathered",
    "profile": "_gathered",
    "reply": "_service_reply",
}


class Broker:
    """Sockets, the loop, and the services: who is registered, who is alive, and what each service message does."""

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

    def _to_client(self, ident: bytes, header: dict, frames=()) -> None:
        """Answer a client, within the bounds of ``dispatcher/answers.py`` (a dropped answer becomes a typed error)."""
        self.answers.send(ident, header, frames)

    def _to_service(self, svc: ServiceInfo, header: dict, frames=()) -> None:
        send_parts(self.services, [svc.ident, pack_header(header), *frames])

    def serve(self, stop, ready_line: bool = True) -> None:
        poller = zmq.Poller()
        poller.register(self.clients, zmq.POLLIN)
        poller.register(self.services, zmq.POLLIN)
        if hasattr(stop, "fileno"):  # (a StopEvent: a stop ends the wait at once)
            poller.register(stop, zmq.POLLIN)
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
            if not self.clients.getsockopt(zmq.EVENTS) & zmq.POLLIN:  # every client message sent so far is read
                self.caught_up = time.time()
            now = time.monotonic()
            if now >= next_hb:
                next_hb = now + HEARTBEAT_S
                drain_fully(lambda sock: self._drain(sock, self._on_service), self.services)
                self._heartbeat(time.monotonic())
                self.answers.tick()
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
        for s in self.leases.expired(self.sessions, self.caught_up):  # its client died or was cut off
            log.warning("session %s expired: no message from its client for %gs", s.sid.hex(), self.leases.lease_s)
            self.leases.note_expired(s.sid)
            self._close_session(s, "expired")
            if not any(o.ident == s.ident for o in self.sessions.values()):  # its unread answers go too
                self.answers.release(s.ident, s.conn)

    def _on_service(self, ident: bytes, hframe, frames) -> None:
        """One message on the service socket: heartbeats and registrations from anyone who holds the service
        credential, everything else from registered services only, each kind to its handler (``SERVICE_HANDLERS``)."""
        try:
            h = unpack_header(hframe.bytes)
            t = check(SERVICE, h)
        except ProtocolError as e:
            log.warning("dropping a malformed service message: %s", e.message)
            return
        svc = self.svc_by_ident.get(ident)
        if svc is not None:
            svc.last_seen = time.monotonic()
        if t == "hb":
            self._service_heartbeat(ident, svc, h)
        elif t == "register":
            self._register(ident, h)
        elif svc is not None:  # only registered services may say anything else
            getattr(self, SERVICE_HANDLERS[t])(svc, h, frames)

    def _service_heartbeat(self, ident: bytes, svc: ServiceInfo | None, h: dict) -> None:
        of = h.get("of")
        if of is not None:  # a service's heartbeat thread, on a socket of its own, signed with its instance
            w = self.workers.get(of) or self.named.get(of)
            i = h.get("i")
            if w is not None and isinstance(i, str) and hmac.compare_digest(i.encode(), w.instance.encode()):
                w.last_seen = time.monotonic()
                direct = h.get("direct")
                if isinstance(direct, list):  # (a worker's totals of its direct-channel work: status's throughput)
                    self.telemetry.note_direct(of, direct)
                busy = h.get("busy")
                if isinstance(busy, list):  # a worker's progress per session (what a waiting client's ping sees)
                    w.busy = {r[0]: r[1:4] for r in busy[:256] if isinstance(r, list) and len(r) == 4
                              and isinstance(r[0], bytes) and type(r[1]) is int}
        elif svc is None:  # a service we forgot (dispatcher restarted): ask it to register
            self.services.send_multipart([ident, pack_header({"t": "hb"})])

    def _bye(self, svc: ServiceInfo, h: dict, frames) -> None:
        """A service stopping cleanly: its name is free for a successor at once."""
        self._service_lost(svc, "stopped")

    def _service_reply(self, svc: ServiceInfo, h: dict, frames) -> None:
        """A named service answering a forwarded request: back to the session that asked."""
        q = h.get("q")
        fwd = self.forwards.get(q) if type(q) is int else None
        if fwd is not None and fwd[2] == svc.name:
            del self.forwards[q]
            s = self.sessions.get(fwd[0])
            if s is not None:
                self._to_client(s.ident, {**h, "t": "service_reply", "q": fwd[1]}, frames)

    def _refuse(self, ident: bytes, err: TensorwireError, retry: bool = False) -> None:
        self.services.send_multipart([ident, pack_header({"t": "refused", "error": err.to_wire(),
                                                          "message": err.message, "retry": retry})])

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
        if not (isinstance(kind, str) and NAME_RE.fullmatch(kind) and isinstance(name, str) and NAME_RE.fullmatch(name)
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
