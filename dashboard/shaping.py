"""What one viewer sees of a :class:`~tensorwire.dashboard.source.Snapshot` (:func:`shape`), and the task stream as
Chrome trace-event JSON for Perfetto (:func:`trace`). Pure functions of plain data: tested without a cluster."""

from __future__ import annotations

import hashlib

from .auth import Viewer, session_key

#: heartbeat ages (seconds) past which a worker or service shows as late, then as silent
LATE_S, SILENT_S = 3.0, 10.0


def session_color(sid: str, order: int | None = None) -> str:
    """A session's colour, the same on every refresh: the ``order``-th hue by the golden angle (sessions seen one
    after another get distinct colours), or a hue from a hash of its id when it has no order."""
    if order is None:
        order = int(hashlib.sha256(sid.encode()).hexdigest()[:4], 16)
    hue = (order * 137.508 + 210) % 360
    return f"hsl({hue:.0f},65%,{48 + 8 * (order // 3 % 2)}%)"


def health(age) -> str:
    """``ok``, ``late`` or ``silent`` for a heartbeat ``age`` seconds old (``unknown`` without one)."""
    if not isinstance(age, (int, float)):
        return "unknown"
    return "ok" if age < LATE_S else "late" if age < SILENT_S else "silent"


def shape(snap, viewer: Viewer, link_secret: str | None = None, url: str = "") -> dict:
    """The page's data for ``viewer``: devices (state, memory, load, compiles), services, sessions (only the
    viewer's own unless admin), tasks, collectives, the hub and the history. ``link_secret`` (the admin's view
    only): the secret of session links, to list each session's link."""
    st = snap.status or {}
    colors = snap.colors or {}

    def color(sid: str) -> str:
        return session_color(sid, colors.get(sid))
    load = st.get("load") or {}
    per_device = st.get("devices") or {}
    ages = st.get("heartbeat_age_s") or {}
    latest = snap.history[-1][1] if snap.history else {}  # the source's figures of this poll
    devices = []
    for w in st.get("workers") or []:
        d = w["device"]
        ld = load.get(d) or {}
        mem = ld.get("memory") or {}
        devices.append({
            "device": d, "name": w.get("name", ""), "heartbeat_age_s": ages.get(d), "health": health(ages.get(d)),
            "used": ld.get("used_bytes") or 0, "allocated": mem.get("allocated_bytes"),
            "reserved": mem.get("reserved_bytes"), "total": mem.get("total_bytes") or w.get("memory_bytes"),
            "quota": ld.get("session_limit"), "queued": ld.get("queued", 0), "sessions": ld.get("sessions", 0),
            "batches_per_s": (latest.get(d) or {}).get("batches_per_s", ld.get("batches_per_s", 0.0)),
            "compiles": ld.get("compiles", 0),
            "compile_s": ld.get("compile_s", 0.0), "plan_cache": ld.get("plan_cache") or {},
        })
    sessions: dict[str, dict] = {}
    for d, per in per_device.items():
        for sid, v in (per or {}).items():
            if not viewer.may_see(sid) or not isinstance(v, dict):
                continue
            s = sessions.setdefault(sid, {"session": sid, "color": color(sid), "bytes": 0, "buffers": 0,
                                          "queued": 0, "running": 0, "devices": {}})
            s["devices"][d] = v
            for k in ("bytes", "buffers", "queued", "running"):
                s[k] += v.get(k, 0) if isinstance(v.get(k, 0), (int, float)) else 0
    for sid in st.get("sessions") or []:  # sessions that hold nothing yet
        if viewer.may_see(sid) and sid != st.get("session"):
            sessions.setdefault(sid, {"session": sid, "color": color(sid), "bytes": 0, "buffers": 0,
                                      "queued": 0, "running": 0, "devices": {}})
    sessions.pop(st.get("session"), None)  # the dashboard's own session
    if viewer.admin and link_secret:
        for sid, s in sessions.items():
            s["link"] = f"{url.rstrip('/')}/?session={sid}&key={session_key(link_secret, sid)}"
    tasks = [{"device": t.device, "n": t.n, "session": t.session, "color": color(t.session),
              "start": t.start, "dur": t.dur, "steps": t.steps} for t in snap.tasks if viewer.may_see(t.session)]
    collectives = [c for c in st.get("collectives") or [] if viewer.may_see(c.get("session"))]
    services = [{**sv, "health": health(sv.get("heartbeat_age_s"))} for sv in st.get("service_info") or []]
    return {
        "at": snap.at, "viewer": {"admin": viewer.admin, "session": viewer.session, "label": viewer.label},
        "uptime_s": st.get("uptime_s", 0.0), "live_sessions": st.get("live_sessions", 0),
        "devices": devices, "services": services, "sessions": sorted(sessions.values(), key=lambda s: s["session"]),
        "tasks": tasks, "collectives": collectives, "hub": snap.hub, "error": snap.error,
        "history": [{"at": t, "devices": f} for t, f in snap.history],
    }


def trace(view: dict) -> dict:
    """The task stream of a shaped view as Chrome trace-event JSON (Perfetto, ``chrome://tracing``), as the
    profiler's ``export_chrome_trace`` writes it: one process per device, one track per session, each batch a
    complete event (microseconds since the stream's first batch)."""
    tasks = view["tasks"]
    t0 = min((t["start"] for t in tasks), default=0.0)
    events: list[dict] = []
    pids: dict[str, int] = {}
    tids: dict[tuple, int] = {}
    for t in sorted(tasks, key=lambda t: t["start"]):
        pid = pids.get(t["device"])
        if pid is None:
            pid = pids[t["device"]] = len(pids) + 1
            events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 1,
                           "args": {"name": f"worker {t['device']}"}})
        key = (t["device"], t["session"])
        tid = tids.get(key)
        if tid is None:
            tid = tids[key] = len(tids) + 1
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": f"session {t['session']}"}})
        events.append({"name": "worker::batch", "cat": "worker", "ph": "X", "pid": pid, "tid": tid,
                       "ts": round((t["start"] - t0) * 1e6, 3), "dur": round(t["dur"] * 1e6, 3),
                       "args": {"batch": t["n"], "session": t["session"], "steps": t["steps"],
                                "device": t["device"]}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": "tensorwire dashboard task stream", "viewer": view["viewer"]["label"],
                          "start_unix_s": t0}}
