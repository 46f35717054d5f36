"""Gathered requests: a question sent to several workers whose answers are collected into one (``stats``,
``profile_collect``, the metrics poll)."""

from __future__ import annotations

import logging
import os
import time

from .state import (
    MAX_SPANS,
    Gather,
    ServiceInfo,
    Session,
)

log = logging.getLogger("tensorwire.dispatcher")


class Gathers:
    """Ask several workers, answer once."""

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

    def _gathered(self, svc: ServiceInfo, h: dict, frames=()) -> None:
        """A worker's answer to a gathered request: a ``stats`` (its sessions, memory and load) or a ``profile``
        (its spans, with its clock's readings at receipt and answer, for the offset)."""
        t = h["t"]
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
                # (fresher than the last heartbeat's: what status and the metrics read next)
                self.telemetry.note_direct(svc.name, load.get("direct"))
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

    def _stats(self, s: Session, h: dict, frames=()) -> None:
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
        if not s.admin:  # the task stream (the dashboard's): this session's batches only
            for ld in load.values():
                if isinstance(ld.get("recent"), list):
                    ld["recent"] = [r for r in ld["recent"] if isinstance(r, list) and len(r) > 1 and r[1] == me]
        collectives = [{"key": k, "session": p["session"].hex(), "devices": sorted(p["all"]),
                        "waiting": sorted(p["devices"])}
                       for k, p in list(self.coll_pending.items())[:256] if s.admin or p["session"] == s.sid]
        services = [{"name": n, "kind": v.kind, "pid": v.info.get("pid"), "heartbeat_age_s": now - v.last_seen,
                     **({"device": v.info["device"]} if "device" in v.info else {})}
                    for n, v in sorted(self.named.items())]
        self._to_client(s.ident, {"t": "stats", "q": g.cq, "devices": devices, "memory": g.data.get("memory", {}),
                                  "session": me, "sessions": sessions, "admin": s.admin,
                                  "services": sorted(self.named), "service_info": services, "load": load,
                                  "live_sessions": len(self.sessions), "hub_url": self.hub_url,
                                  "uptime_s": time.time() - self.started, "workers": self._device_list(),
                                  "heartbeat_age_s": {d: now - w.last_seen for d, w in self.workers.items()},
                                  "collectives": collectives})

    def _profile_collect(self, s: Session, h: dict, frames=()) -> None:
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
