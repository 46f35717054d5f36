"""The dashboard server against a running cluster: what the stats answer carries for it, who may see what beyond
loopback, the live feed's pace, and the trace export (HTTP only; the browser test is test_dashboard_browser.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from .conftest import TOKEN, run_batches, wait_for


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


def _get(url: str, cookie: str | None = None, host: str | None = None):
    """``(status, headers, body)`` of a GET (redirects are not followed)."""
    req = urllib.request.Request(url, headers={**({"Cookie": cookie} if cookie else {}),
                                               **({"Host": host} if host else {})})
    try:
        with urllib.request.build_opener(_NoRedirect).open(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_stats_carry_each_workers_recent_batches_to_the_admin_and_a_sessions_own_to_it(dash_cluster, two_sessions):
    import tensorwire as tw

    a, b = two_sessions
    run_batches(a, ["cpu:0"])
    run_batches(b, ["cpu:0"])
    admin = tw.Session(dash_cluster.address, dash_cluster.admin_token)
    try:
        recent = admin.cluster_status()["load"]["cpu:0"]["recent"]
        assert {a.session_id, b.session_id} <= {r[1] for r in recent}
        st = admin.cluster_status()
        assert st["heartbeat_age_s"]["cpu:0"] < 10 and st["collectives"] == []
        assert st["load"]["cpu:0"]["compiles"] >= 1 and st["load"]["cpu:0"]["plan_cache"]["plans"] >= 1
    finally:
        admin.close()
    mine = a.cluster_status()["load"]["cpu:0"]["recent"]
    assert mine and {r[1] for r in mine} == {a.session_id}


def test_loopback_dashboard_is_the_admin_view_for_loopback_hosts_only(dash_cluster):
    url = dash_cluster.dashboard_url
    assert url.startswith("http://127.0.0.1:")

    def first_view():  # the dashboard's first gather may still be on its way on a loaded machine
        status, _, body = _get(url + "/api/view")
        if status != 200:
            return status, None
        view = json.loads(body)["view"]
        return (status, view) if view else None

    status, view = wait_for(first_view) or (None, None)
    assert status == 200 and view["viewer"]["admin"] is True
    status, _, _ = _get(url + "/api/view", host="dashboard.attacker.example")  # DNS rebinding
    assert status == 400


def test_the_hubs_downloads_show(dash_cluster):
    from tensorwire.protocol.hub.client import push_files

    push_files("dash/tiny", {"w.bin": b"x" * 4096}, endpoint=dash_cluster.hub_url, token=dash_cluster.hub_token)
    with urllib.request.urlopen(f"{dash_cluster.hub_url}/dash/tiny/resolve/main/w.bin", timeout=10) as r:
        assert len(r.read()) == 4096

    def pulled():
        hub = json.loads(_get(dash_cluster.dashboard_url + "/api/view")[2])["view"]["hub"]
        return hub if hub and hub.get("downloads", 0) >= 1 and hub.get("pulls") else None

    hub = wait_for(pulled)
    assert hub, "the dashboard never saw the hub's download"
    assert hub["ok"] and hub["metrics"] == "ok" and hub["pulls"][-1]["bytes"] >= 4096


def test_the_live_feed_comes_at_least_once_a_second(dash_cluster):
    with urllib.request.urlopen(dash_cluster.dashboard_url + "/events", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        stamps = []
        t0 = time.monotonic()
        while len(stamps) < 4 and time.monotonic() - t0 < 15:
            line = r.readline()
            if line.startswith(b"data: "):
                msg = json.loads(line[6:])
                stamps.append(msg["view"]["at"])
                assert "<svg" in msg["svg"]["task-chart"]
    assert len(stamps) == 4
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert max(gaps) < 1.6, gaps  # polled every second (a little slack for a loaded machine)


@pytest.fixture(scope="module")
def remote_dashboard(dash_cluster, tmp_path_factory):
    """``tensorwire dashboard`` bound beyond loopback (0.0.0.0), reached here over loopback; stopped when the module
    ends (the cluster is the folder's)."""
    from tensorwire.cluster import _cli
    from tensorwire.protocol.credentials import write_token_file

    d = tmp_path_factory.mktemp("tokens")
    admin_file = write_token_file(d / "admin.token", dash_cluster.admin_token)
    client_file = write_token_file(d / "client.token", TOKEN)
    svc = dash_cluster.start_service("dashboard-any", _cli(
        "dashboard", "--address", dash_cluster.address, "--host", "0.0.0.0", "--port", "0",
        "--admin-token-file", str(admin_file), "--token-file", str(client_file)))
    yield svc.info["url"].replace("0.0.0.0", "127.0.0.1")
    svc.stop()


def test_beyond_loopback_every_viewer_presents_the_admin_token_or_a_session_link(dash_cluster, remote_dashboard,
                                                                                   two_sessions):
    from tensorwire.dashboard import session_link

    a, b = two_sessions
    run_batches(a, ["cpu:0"])
    run_batches(b, ["cpu:1"])
    url = remote_dashboard
    for path in ("/", "/api/view", "/events", "/trace.json"):
        assert _get(url + path)[0] == 401, path
    assert _get(url + "/?token=" + TOKEN)[0] == 401  # the client token is not the admin's
    assert _get(url + f"/?session={a.session_id}&key=0123")[0] == 401
    status, headers, _ = _get(url + "/?token=" + urllib.request.quote(dash_cluster.admin_token))
    assert status == 303 and headers["Location"] == "/"
    admin_cookie = headers["Set-Cookie"].split(";")[0]
    view = wait_for(lambda: _view_with_tasks(url, admin_cookie, {a.session_id, b.session_id}))
    assert view and view["viewer"]["admin"]
    status, headers, _ = _get(session_link(url, a.session_id, TOKEN))
    assert status == 303
    a_cookie = headers["Set-Cookie"].split(";")[0]
    view = wait_for(lambda: _view_with_tasks(url, a_cookie, {a.session_id}))
    assert view, "session A's view never showed its batch"
    assert {s["session"] for s in view["sessions"]} == {a.session_id}
    assert {t["session"] for t in view["tasks"]} == {a.session_id}
    status, headers, body = _get(url + "/trace.json", a_cookie)
    doc = json.loads(body)
    assert status == 200 and "attachment" in headers["Content-Disposition"]
    assert {e["args"]["session"] for e in doc["traceEvents"] if e["ph"] == "X"} == {a.session_id}


def _view_with_tasks(url: str, cookie: str, sessions: set) -> dict | None:
    status, _, body = _get(url + "/api/view", cookie)
    view = json.loads(body)["view"] if status == 200 else None
    return view if view and sessions <= {t["session"] for t in view["tasks"]} else None


def test_the_command_refuses_to_start_without_the_admin_token(dash_cluster):
    env = {k: v for k, v in os.environ.items() if k != "TENSORWIRE_ADMIN_TOKEN"}
    r = subprocess.run([sys.executable, "-m", "tensorwire.cli", "dashboard", "--address", dash_cluster.address,
                        "--port", "0"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1 and "Unauthorized" in r.stderr and "--admin-token-file" in r.stderr


def test_up_with_dashboard_lists_its_address_and_serves_it():
    pytest.importorskip("uvicorn", reason="the dashboard needs uvicorn: pip install 'tensorwire[dashboard]'")
    import re
    import selectors
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "tensorwire.cli", "up", "--devices", "cpu:0", "--port", "0",
                             "--dashboard"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        out, deadline = "", time.monotonic() + 120
        while "Ctrl-C" not in out and time.monotonic() < deadline:
            if sel.select(timeout=deadline - time.monotonic()):
                chunk = os.read(proc.stdout.fileno(), 4096).decode()
                if not chunk:
                    break
                out += chunk
        sel.close()
        m = re.search(r"^    dashboard +(http://127\.0\.0\.1:\d+) ", out, re.M)
        assert m, out
        view = wait_for(lambda: json.loads(_get(m.group(1) + "/api/view")[2])["view"])
        assert [d["device"] for d in view["devices"]] == ["cpu:0"] and view["viewer"]["admin"]
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode == 0 and "stopped" in rest, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
