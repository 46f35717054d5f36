"""The dashboard's data shaping, charts, trace export and viewer gate, on plain data (no cluster, no browser)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tensorwire.dashboard.auth import Gate, Viewer, is_loopback, session_key, session_link
from tensorwire.dashboard.shaping import health, session_color, shape, trace
from tensorwire.dashboard.source import Snapshot, TaskStream
from tensorwire.dashboard.svg import charts, task_stream

A, B, ME = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "dddddddddddddddd"
SVG = "{http://www.w3.org/2000/svg}"


def _status() -> dict:
    """A ``stats`` answer as an admin session gets it (dispatcher/gathers.py), with two client sessions."""
    rec0 = [[1, A, 2.0, 0.01, 3], [2, B, 1.0, 0.02, 5]]
    return {
        "session": ME, "sessions": [A, B, ME], "admin": True, "live_sessions": 3, "uptime_s": 12.0,
        "workers": [{"device": "cpu:0", "name": "C <kernels>", "memory_bytes": 1 << 30},
                    {"device": "cpu:1", "name": "C kernels", "memory_bytes": 1 << 30}],
        "devices": {"cpu:0": {A: {"buffers": 2, "bytes": 4096, "queued": 1, "running": 1},
                              B: {"buffers": 1, "bytes": 1024, "queued": 0, "running": 0}},
                    "cpu:1": {B: {"buffers": 3, "bytes": 8192, "queued": 2, "running": 0}}},
        "load": {"cpu:0": {"queued": 2, "sessions": 2, "used_bytes": 5120, "session_limit": 1 << 29,
                           "memory": {"allocated_bytes": 6000, "reserved_bytes": 9000}, "recent": rec0,
                           "compiles": 4, "compile_s": 0.5, "plan_cache": {"plans": 2, "bytes": 100, "max_bytes": 1000},
                           "batches_per_s": 3.0},
                 "cpu:1": {"queued": 2, "sessions": 1, "used_bytes": 8192, "recent": [[7, B, 0.5, 0.1, 1]]}},
        "heartbeat_age_s": {"cpu:0": 0.2, "cpu:1": 4.0},
        "service_info": [{"name": "autograd", "kind": "autograd", "pid": 1, "heartbeat_age_s": 30.0}],
        "collectives": [{"key": 1, "session": A, "devices": ["cpu:0", "cpu:1"], "waiting": ["cpu:1"]},
                        {"key": 2, "session": B, "devices": ["cpu:0", "cpu:1"], "waiting": []}],
    }


def _snapshot(now: float = 1000.0) -> Snapshot:
    st = _status()
    stream = TaskStream()
    for d, ld in st["load"].items():
        stream.add(d, ld["recent"], now)
    return Snapshot(st, now, list(stream.tasks), [(now - 1, {"cpu:0": {"used": 10, "batches_per_s": 1.0}}),
                                                  (now, {"cpu:0": {"used": 20, "batches_per_s": 2.0}})], None)


def test_task_stream_places_each_batch_once_and_follows_a_restarted_worker():
    s = TaskStream(window_s=60)
    s.add("cpu:0", [[1, A, 2.0, 0.5, 3], [2, B, 1.0, 0.1, 1]], at=100.0)
    s.add("cpu:0", [[1, A, 3.0, 0.5, 3], [2, B, 2.0, 0.1, 1], [3, A, 0.5, 0.1, 1]], at=101.0)
    assert [(t.n, t.session, t.start) for t in s.tasks] == [(1, A, 98.0), (2, B, 99.0), (3, A, 100.5)]
    s.add("cpu:0", [[1, B, 0.2, 0.1, 1]], at=102.0)  # the worker restarted: its numbers start again
    assert [t.n for t in s.tasks][-1] == 1 and s.tasks[-1].session == B
    s.prune(200.0)
    assert not s.tasks


def test_admin_sees_every_session_and_a_session_only_its_own():
    snap = _snapshot()
    admin = shape(snap, Viewer(True), "secret", "http://127.0.0.1:1")
    assert [s["session"] for s in admin["sessions"]] == [A, B]  # (the dashboard's own session is left out)
    assert {t["session"] for t in admin["tasks"]} == {A, B}
    assert {c["session"] for c in admin["collectives"]} == {A, B}
    assert admin["sessions"][0]["link"].endswith(f"session={A}&key={session_key('secret', A)}")
    mine = shape(snap, Viewer(False, A))
    assert [s["session"] for s in mine["sessions"]] == [A]
    assert mine["sessions"][0]["bytes"] == 4096 and mine["sessions"][0]["queued"] == 1
    assert {t["session"] for t in mine["tasks"]} == {A} and len(mine["tasks"]) == 1
    assert [c["key"] for c in mine["collectives"]] == [1]
    assert "link" not in mine["sessions"][0]
    dev = {d["device"]: d for d in admin["devices"]}
    assert dev["cpu:0"]["allocated"] == 6000 and dev["cpu:0"]["quota"] == 1 << 29 and dev["cpu:0"]["total"] == 1 << 30
    assert (dev["cpu:0"]["health"], dev["cpu:1"]["health"], admin["services"][0]["health"]) == ("ok", "late", "silent")


def test_charts_are_svg_and_show_only_what_the_viewer_may_see():
    snap = _snapshot()
    for viewer, want in ((Viewer(True), {A, B}), (Viewer(False, B), {B})):
        svg = charts(shape(snap, viewer))
        for text in svg.values():
            ET.fromstring(text)  # every chart is well-formed SVG
        root = ET.fromstring(svg["task-chart"])
        seen = {r.get("data-session") for r in root.iter(f"{SVG}rect") if r.get("class") == "task"}
        assert seen == want
        assert "C <kernels>" not in "".join(svg.values())  # names are escaped
    mem = ET.fromstring(charts(shape(snap, Viewer(True)))["memory-chart"])
    assert [ln.get("class") for ln in mem.iter(f"{SVG}line")] == ["quota"]  # cpu:0 has a quota, cpu:1 none
    kinds = {r.get("data-kind") for r in mem.iter(f"{SVG}rect") if r.get("data-device") == "cpu:0"}
    assert kinds == {"used", "allocated", "reserved"}


def test_task_bars_sit_where_their_batches_ran():
    tasks = [{"device": "cpu:0", "n": 1, "session": A, "color": session_color(A), "start": 990.0, "dur": 5.0,
              "steps": 1}, {"device": "cpu:0", "n": 2, "session": A, "color": "red", "start": 900.0, "dur": 1.0,
                            "steps": 1}]
    root = ET.fromstring(task_stream(tasks, ["cpu:0"], now=1000.0, window_s=20.0))
    bars = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "task"]
    assert len(bars) == 1  # the batch that ended before the window is not drawn
    x, w = float(bars[0].get("x")), float(bars[0].get("width"))
    from tensorwire.dashboard.svg import LABEL, WIDE
    span = WIDE - LABEL - 10
    assert x == pytest.approx(LABEL + 0.5 * span, abs=0.1) and w == pytest.approx(0.25 * span, abs=0.1)


def test_trace_is_chrome_trace_json_with_a_track_per_device_and_session():
    view = shape(_snapshot(), Viewer(True))
    doc = json.loads(json.dumps(trace(view)))
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 3 and all(e["name"] == "worker::batch" and e["dur"] > 0 for e in spans)
    procs = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert procs == {"worker cpu:0", "worker cpu:1"}
    threads = {(e["pid"], e["args"]["name"]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert len(threads) == 3  # (cpu:0, A), (cpu:0, B), (cpu:1, B)
    assert min(e["ts"] for e in spans) == 0
    mine = trace(shape(_snapshot(), Viewer(False, A)))
    assert {e["args"]["session"] for e in mine["traceEvents"] if e["ph"] == "X"} == {A}


def test_gate_admits_the_admin_token_and_session_links_only():
    g = Gate("admin-tok", "client-tok", loopback=False)
    assert g.default() is None  # beyond loopback nothing is open
    assert g.login("admin-tok", None, None) == Viewer(True)
    assert g.login("client-tok", None, None) is None
    assert g.login(None, A, session_key("client-tok", A)) == Viewer(False, A)
    assert g.login(None, A, session_key("client-tok", B)) is None
    assert g.login(None, A, session_key("admin-tok", A)) is None
    assert g.login(None, A, None) is None  # beyond loopback a session needs its key
    assert session_link("http://h:1/", A, "client-tok") == f"http://h:1/?session={A}&key={session_key('client-tok', A)}"
    c = g.cookie(Viewer(False, A))
    assert g.from_cookie(c) == Viewer(False, A)
    assert g.from_cookie(c.replace(A, B)) is None  # a cookie cannot be edited into another session's
    assert g.from_cookie("admin.0000") is None
    assert Gate("admin-tok", "client-tok", loopback=True).default() == Viewer(True)
    assert Gate("admin-tok", None, loopback=False).login(None, A, session_key("admin-tok", A)) == Viewer(False, A)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("0.0.0.0")
    assert health(None) == "unknown"


def test_sessions_seen_one_after_another_get_distinct_colours():
    hues = [session_color(f"{i:016x}", i) for i in range(8)]
    assert len(set(hues)) == 8
    snap = _snapshot()
    snap.colors = {A: 0, B: 1}
    view = shape(snap, Viewer(True))
    by = {s["session"]: s["color"] for s in view["sessions"]}
    assert by == {A: session_color(A, 0), B: session_color(B, 1)} and by[A] != by[B]
    assert {t["color"] for t in view["tasks"] if t["session"] == A} == {by[A]}
