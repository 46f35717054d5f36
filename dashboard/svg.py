"""The dashboard's charts as SVG text, drawn on the server from a shaped view (:func:`.shaping.shape`): no script
library, nothing fetched by the browser. Every value put in the markup is escaped."""

from __future__ import annotations

from html import escape

from tensorwire.status import human_bytes

W = 720  # the width every chart is drawn at (the page scales it) ...
WIDE = 1400  # ... but the task stream, which spans the page
LABEL = 110  # the left column of device and session names
HEALTH_COLORS = {"ok": "#2e9d4a", "late": "#d89614", "silent": "#c8382d", "unknown": "#8a8a8a"}


def _svg(h: int, body: list[str], label: str, cls: str, w: int = W) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {cls}" viewBox="0 0 {w} {h}" width="{w}" '
            f'height="{h}" role="img" aria-label="{escape(label)}">' + "".join(body) + "</svg>")


def _text(x: float, y: float, s: str, anchor: str = "start", cls: str = "lbl") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{cls}">{escape(str(s))}</text>'


def _rect(x, y, w, h, fill: str, title: str = "", cls: str = "", **data) -> str:
    attrs = (f' class="{cls}"' if cls else "") + "".join(f' data-{k}="{escape(str(v))}"' for k, v in data.items())
    t = f"<title>{escape(title)}</title>" if title else ""
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}" fill="{escape(fill)}"{attrs}>'
            f"{t}</rect>")


def _empty(msg: str, cls: str) -> str:
    return _svg(30, [_text(W / 2, 20, msg, "middle", "muted")], msg, cls)


def memory(devices: list[dict]) -> str:
    """Per device, nested bars: reserved, allocated and held by sessions' tensors (used), on a scale of the device's
    memory; a dashed line at the per-session quota."""
    if not devices:
        return _empty("no workers registered", "memory")
    row, body = 34, []
    for i, d in enumerate(devices):
        vals = [v for v in (d.get("total"), d.get("reserved"), d.get("allocated"), d.get("used"), d.get("quota"))
                if isinstance(v, (int, float))]
        top = max(vals + [1])
        scale = (W - LABEL - 10) / top
        y = i * row + 6
        body.append(_text(4, y + 15, d["device"]))
        body.append(_rect(LABEL, y, top * scale, 20, "#e4e7ec", f"total {human_bytes(d.get('total'))}"))
        for key, color in (("reserved", "#b5c7e6"), ("allocated", "#6d93d1"), ("used", "#2a4f9a")):
            v = d.get(key)
            if isinstance(v, (int, float)) and v > 0:
                body.append(_rect(LABEL, y + (0 if key == "reserved" else 3 if key == "allocated" else 6),
                                  v * scale, 20 - (0 if key == "reserved" else 6 if key == "allocated" else 12),
                                  color, f"{key} {human_bytes(v)}", device=d["device"], kind=key))
        q = d.get("quota")
        if isinstance(q, (int, float)) and q > 0:
            x = LABEL + q * scale
            body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y - 2}" y2="{y + 22}" class="quota">'
                        f"<title>quota per session {escape(human_bytes(q))}</title></line>")
        body.append(_text(W - 6, y + 15, f"{human_bytes(d.get('used'))} used / {human_bytes(d.get('total'))}",
                          "end", "val"))
    return _svg(len(devices) * row + 6, body, "device memory", "memory")


def heartbeats(devices: list[dict], services: list[dict], silent_s: float = 10.0) -> str:
    """Seconds since each worker and service was last heard, coloured by health."""
    rows = [(f"worker {d['device']}", d.get("heartbeat_age_s"), d.get("health", "unknown")) for d in devices]
    rows += [(s["name"], s.get("heartbeat_age_s"), s.get("health", "unknown")) for s in services]
    if not rows:
        return _empty("nothing registered", "heartbeats")
    row, body = 22, []
    scale = (W - LABEL - 90) / silent_s
    for i, (name, age, h) in enumerate(rows):
        y = i * row + 4
        body.append(_text(4, y + 13, name[:16]))
        a = age if isinstance(age, (int, float)) else 0.0
        body.append(_rect(LABEL, y, max(2.0, min(a, silent_s) * scale), 16, HEALTH_COLORS.get(h, "#888"),
                          f"{name}: heard {a:.1f} s ago", health=h))
        body.append(_text(W - 6, y + 13, f"{h}, {a:.1f} s ago" if isinstance(age, (int, float)) else h, "end", "val"))
    return _svg(len(rows) * row + 4, body, "heartbeats", "heartbeats")


def task_stream(tasks: list[dict], devices: list[str], now: float, window_s: float = 30.0, w: int = WIDE) -> str:
    """The last ``window_s`` seconds: a lane per device, each batch a bar from its start to its end, coloured by its
    session (at least a pixel wide, so short batches show)."""
    lanes = list(devices) + sorted({t["device"] for t in tasks} - set(devices))
    if not lanes:
        return _empty("no devices", "tasks")
    row, axis = 26, 18
    span = w - LABEL - 10
    t0 = now - window_s
    body = []
    for i, d in enumerate(lanes):
        y = i * row + 4
        body.append(_text(4, y + 15, d))
        body.append(_rect(LABEL, y, span, 20, "#f2f4f7"))
    index = {d: i for i, d in enumerate(lanes)}
    for t in tasks:
        end = t["start"] + t["dur"]
        if end < t0:
            continue
        x0 = LABEL + max(0.0, t["start"] - t0) / window_s * span
        x1 = LABEL + min(window_s, end - t0) / window_s * span
        y = index[t["device"]] * row + 4
        body.append(_rect(x0, y + 2, max(1.5, x1 - x0), 16, t["color"],
                          f"session {t['session']} · batch {t['n']} · {t['dur'] * 1e3:.2f} ms · {t['steps']} steps",
                          session=t["session"], device=t["device"], cls="task"))
    y = len(lanes) * row + 4
    for k in range(0, int(window_s) + 1, 5 if window_s <= 30 else 10):
        x = LABEL + (window_s - k) / window_s * span
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="4" y2="{y}" class="grid"/>')
        body.append(_text(x, y + 13, f"-{k}s" if k else "now", "middle", "axis"))
    return _svg(y + axis, body, "task stream", "tasks", w)


def lines(series: dict[str, list[tuple[float, float]]], now: float, window_s: float, unit: str, cls: str,
          colors: dict[str, str] | None = None, fmt=lambda v: f"{v:.1f}") -> str:
    """A line per named series of ``(time, value)`` points over the last ``window_s`` seconds, with its latest
    value in the legend."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return _empty(f"no {unit} yet", cls)
    h, top_pad, bottom = 120, 8, 18
    top = max([v for _, v in pts] + [1e-9]) * 1.1
    span = W - LABEL - 10
    body = [f'<line x1="{LABEL}" x2="{W - 10}" y1="{h - bottom}" y2="{h - bottom}" class="grid"/>',
            _text(LABEL - 4, top_pad + 8, fmt(top), "end", "axis"), _text(LABEL - 4, h - bottom, "0", "end", "axis")]
    palette = ["#2a4f9a", "#c8382d", "#2e9d4a", "#d89614", "#7b3fa0", "#168a8a"]
    for i, (name, s) in enumerate(sorted(series.items())):
        color = (colors or {}).get(name) or palette[i % len(palette)]
        xy = [(LABEL + max(0.0, t - (now - window_s)) / window_s * span,
               h - bottom - v / top * (h - bottom - top_pad)) for t, v in s]
        if len(xy) == 1:
            xy.append((xy[0][0] + 1, xy[0][1]))
        body.append(f'<polyline fill="none" stroke="{escape(color)}" stroke-width="2" '
                    f'points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in xy)}"/>')
        latest = s[-1][1] if s else 0.0
        body.append(_rect(LABEL + 8, 10 + i * 16, 10, 10, color))
        body.append(_text(LABEL + 22, 19 + i * 16, f"{name[:10]} {fmt(latest)}", cls="legend"))
    body.append(_text(W - 10, h - 4, unit, "end", "axis"))
    return _svg(h, body, unit, cls)


def bars(rows: list[tuple[str, float, str, str]], cls: str, label: str, empty: str) -> str:
    """Horizontal bars ``(name, value, colour, text)`` on one scale."""
    if not rows:
        return _empty(empty, cls)
    row, body = 22, []
    top = max([v for _, v, _, _ in rows] + [1])
    scale = (W - LABEL - 320) / top
    for i, (name, v, color, text) in enumerate(rows):
        y = i * row + 4
        body.append(_text(4, y + 13, name[:16]))
        body.append(_rect(LABEL, y, max(2.0, v * scale), 16, color, f"{name}: {text}"))
        body.append(_text(W - 6, y + 13, text, "end", "val"))
    return _svg(len(rows) * row + 4, body, label, cls)


def charts(view: dict, window_s: float = 30.0) -> dict[str, str]:
    """Every chart of the page for a shaped view, by the id of the element it goes in."""
    now = view["at"]
    devices = view["devices"]
    history = view["history"]
    tput: dict[str, list] = {}
    used: dict[str, list] = {}
    comp: dict[str, list] = {}
    for h in history:
        for d, f in h["devices"].items():
            tput.setdefault(d, []).append((h["at"], f.get("batches_per_s") or 0.0))
            used.setdefault(d, []).append((h["at"], f.get("used") or 0))
            comp.setdefault(d, []).append((h["at"], f.get("compiles") or 0))
    sessions = [(s["session"][:8], s["bytes"], s["color"],
                 f"{human_bytes(s['bytes'])} · {s['queued']} queued · {s['running']} running")
                for s in view["sessions"]]
    cache = [(d["device"], (d["plan_cache"] or {}).get("bytes", 0), "#7b3fa0",
              f"{d['compiles']} compiles ({d['compile_s']:.2f} s) · {d['plan_cache'].get('plans', 0)} plans, "
              f"{human_bytes(d['plan_cache'].get('bytes'))} of {human_bytes(d['plan_cache'].get('max_bytes'))}")
             for d in devices if d.get("plan_cache")]
    colls = [(f"#{c['key']}", len(c["devices"]) - len(c["waiting"]), "#168a8a",
              f"{len(c['devices']) - len(c['waiting'])}/{len(c['devices'])} ranks in · session {c['session'][:8]}")
             for c in view["collectives"]]
    hub = view.get("hub") or {}
    pulls = [(h["at"], h.get("downloads", 0)) for h in hub.get("pulls", [])]
    return {
        "memory-chart": memory(devices),
        "heartbeat-chart": heartbeats(devices, view["services"]),
        "task-chart": task_stream(view["tasks"], [d["device"] for d in devices], now, window_s),
        "throughput-chart": lines(tput, now, 60.0, "batches/s", "throughput"),
        "used-chart": lines(used, now, 60.0, "bytes held", "used", fmt=human_bytes),
        "session-chart": bars(sessions, "sessions", "bytes held per session", "no sessions"),
        "compile-chart": bars(cache, "compiles", "plan cache", "no plan cache reported"),
        "compile-lines": lines(comp, now, 60.0, "plans compiled", "compile-lines", fmt=lambda v: f"{v:.0f}"),
        "collective-chart": bars(colls, "collectives", "collectives in flight", "no collectives in flight"),
        "hub-chart": (lines({"downloads": pulls}, now, 60.0, "hub downloads", "hub", fmt=lambda v: f"{v:.0f}")
                      if hub.get("metrics") == "ok" else
                      _empty(f"hub downloads: {hub.get('metrics')}" if hub else "no hub configured", "hub")),
    }
