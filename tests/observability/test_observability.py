"""Issue 18, observability: the profiler, the Prometheus metrics, `tensorwire status`, the logs and start-up progress.

One cluster for the module (cpu:0 and cpu:1, the hub, autograd, collectives where MPI is installed), started with
metrics on, info logs, every batch counted as slow (threshold 0 ms) and progress lines captured.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.nn.functional as F
from tensorwire.protocol.logs import level_from_env
from tests._processes import wait_for as _wait_for

#: spans of one batch in different processes are compared after the offset correction with this much slack (the
#: estimate's error is at most half a round trip; on one host the true offset is 0 and round trips are ~0.1-0.5 ms)
NEST_TOLERANCE_US = 2000.0


@pytest.fixture(scope="module")
def obs_cluster(tmp_path_factory):
    err = io.StringIO()
    env = {"TENSORWIRE_LOG": "info", "TENSORWIRE_SLOW_BATCH_MS": "0"}
    with contextlib.redirect_stderr(err):
        c = tw.LocalCluster(devices=["cpu:0", "cpu:1"], hub_root=tmp_path_factory.mktemp("hub"), metrics=True,
                            progress=True, extra_env=env)
    c.progress_text = err.getvalue()
    with c:
        yield c


@pytest.fixture(scope="module")
def sess(obs_cluster):
    s = tw.Session(obs_cluster.address)
    with tw.use_session(s):
        yield s
    s.close()


def _scrape(url: str) -> dict[str, float]:
    """``{'name{labels}': value}`` of a Prometheus text page."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out




# -- the profiler -------------------------------------------------------------------------------------------------
def test_profiled_training_step_spans_every_process_nested(sess, tmp_path):
    tw.manual_seed(0)
    model = tw.nn.Sequential(tw.nn.Linear(12, 24), tw.nn.ReLU(), tw.nn.Linear(24, 3))  # new graph: autograd is asked
    opt = tw.optim.Adam(model.parameters(), lr=1e-2)
    x = tw.randn(16, 12)
    y = tw.randint(0, 3, (16,))
    with tw.profiler.profile(record_shapes=True) as prof:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        tw.synchronize()  # the step's backward and update go out as one answered batch
        value = loss.item()
    assert np.isfinite(value)
    events = prof.events()
    procs = {e.process for e in events}
    assert {"client", "worker cpu:0", "autograd"} <= procs, procs
    # the batch that fetched the loss: client round trip > dispatcher batch (when it went through the dispatcher; on
    # a direct channel there is none) > worker batch > its kernels
    by = {}
    for e in events:
        if "batch" in e.args:
            by.setdefault((e.name, e.args["batch"]), []).append(e)
    fetched = [b for (name, b) in by if name == "client::batch" and ("worker::batch", b) in by]
    assert fetched, sorted(by)
    checked = 0
    tol = NEST_TOLERANCE_US

    def slack(e) -> float:  # (the slack, plus the bound of e's clock offset's error: half its estimate's round trip)
        return NEST_TOLERANCE_US + prof.clock_offsets.get(e.process, {}).get("rtt_us", 0.0) / 2

    for b in fetched:
        (client,) = by[("client::batch", b)]
        (disp,) = by.get(("dispatcher::batch", b)) or (client,)
        assert client.ts_us - slack(disp) <= disp.ts_us and disp.end_us <= client.end_us + slack(disp), (client, disp)
        for work in by[("worker::batch", b)]:
            t = slack(work) + (slack(disp) if disp is not client else 0.0)
            assert disp.ts_us - t <= work.ts_us and work.end_us <= disp.end_us + t, (disp, work, prof.clock_offsets)
            if work.args.get("plan") is None:  # a fetch or sync with no ops (the profile's closing synchronize)
                continue
            kernels = [e for e in events if e.is_device and e.process == work.process
                       and work.ts_us <= e.ts_us and e.end_us <= work.end_us]
            assert kernels, f"no kernel span inside {work}"
            checked += 1
    assert checked, "no answered batch ran ops"
    # autograd's span lies within the client's request to it
    (req,) = [e for e in events if e.name == "client::autograd.backward"]
    (served,) = [e for e in events if e.name == "autograd::backward"]
    assert req.ts_us - tol <= served.ts_us and served.end_us <= req.end_us + tol
    # on one host the true offset is 0: the estimate is within half a round trip of it (plus scheduling noise)
    for name, off in prof.clock_offsets.items():
        assert abs(off["offset_us"]) <= off["rtt_us"] / 2 + 1000, (name, off)
    # the table and the trace
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=8)
    assert "Self CPU" in table and "# of Calls" in table
    assert len(table.splitlines()) == 8 + 6
    avgs = {a.key: a for a in prof.key_averages()}
    assert avgs["linear"].count == 2 and avgs["linear"].cpu_time_total > 0  # recorded twice on the client...
    assert avgs["linear"].device_time_total > 0  # ...and run on the worker
    with pytest.raises(ValueError, match="sort_by"):
        prof.key_averages().table(sort_by="nonsense")
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(names) == len(set(names.values()))  # (a process with no span, the dispatcher here, is named too)
    assert procs <= {n.split(" (pid")[0] for n in names.values()}, (procs, names)
    assert any(n.startswith("worker cpu:0") for n in names.values())
    spans = [e for e in trace if e["ph"] == "X"]
    assert len(spans) == len(events)
    assert all(isinstance(e["ts"], float | int) and e["dur"] >= 0 and e["pid"] in names for e in spans)
    flows = [e for e in trace if e["ph"] in ("s", "f")]
    assert flows and len(flows) % 2 == 0


def test_profiler_off_restores_the_session(sess):
    with tw.profiler.profile() as prof:
        (tw.ones(3) + 1).numpy()
    assert sess._prof is None
    assert not {"record", "const", "_send_batch", "_wait", "service_request"} & set(vars(sess))
    assert any(e.process == "worker cpu:0" for e in prof.events())
    # nothing is kept for a session that is not profiling: a later profile holds only its own batches
    (tw.ones(3) * 2).numpy()
    with tw.profiler.profile() as prof2:
        (tw.ones(2) - 1).numpy()
    assert {e.args.get("batch") for e in prof2.events() if "batch" in e.args} == {1, 2}
    with tw.profiler.profile(), pytest.raises(RuntimeError, match="already"):
        tw.profiler.profile().__enter__()


def test_the_profiler_passes_every_argument_of_what_it_times(sess):
    # its wrappers take what the session's functions take, however they are called: element writes upload with
    # const's keywords, autograd records positionally, a flush hands its encoding to _send_batch
    x = tw.zeros(4) * 1  # (an op's result: a value on the device, whose element writes are a run; a zeros the client
    w = tw.ones(4, requires_grad=True)  # holds would be written on the client: Session.holds)
    with tw.profiler.profile() as prof:
        x[1] = 2.0
        x[3] = 5.0
        loss = (w * x).sum()
        loss.backward()
        assert loss.item() == 7.0
        assert (x.tolist(), w.grad.tolist()) == ([0.0, 2.0, 0.0, 5.0], [0.0, 2.0, 0.0, 5.0])
    names = {e.name for e in prof.events()}
    assert {"index_put", "mul", "transfer::upload", "client::ship"} <= names


def test_malformed_profile_flag_is_refused_and_the_dispatcher_carries_on(sess):
    with sess._lock:
        h, _ = sess._request({"t": "batch", "ext": [], "outs": [], "fetch": [], "release": [], "sync": True,
                              "prof": "not a number"})
    assert h["errors"] and h["errors"][0]["code"] == "ProtocolError"
    assert (tw.arange(3.0) * 2).tolist() == [0.0, 2.0, 4.0]


# -- metrics --------------------------------------------------------------------------------------------------------
def test_dispatcher_metrics_move_with_work(obs_cluster, sess):
    url = obs_cluster.metrics_urls["dispatcher"]
    assert url.startswith("http://127.0.0.1:")
    before = _scrape(url)
    x = tw.randn(64, 64, device="cpu:1")
    for _ in range(5):  # the first batch holds randn too; from the third on, the same structure is replayed
        (x @ x).sum().item()
    with pytest.raises(IndexError):
        tw.arange(5, device="cpu:1").gather(0, tw.tensor([9], device="cpu:1")).numpy()
    key = 'tensorwire_batches_total{device="cpu:1"}'
    # (the work went on a direct channel: the dispatcher counts it from cpu:1's load, which it polls every 2 s)
    after = _wait_for(lambda: (m := _scrape(url)).get(key, 0) >= before.get(key, 0) + 6
                      and m.get('tensorwire_errors_total{code="IndexError"}', 0) >= 1 and m)
    assert after, "the batches run on cpu:1 never showed in the dispatcher's metrics"
    assert after[key] >= before.get(key, 0) + 6
    assert after['tensorwire_ops_total{device="cpu:1"}'] > before.get('tensorwire_ops_total{device="cpu:1"}', 0)
    assert after['tensorwire_bytes_total{device="cpu:1",direction="out"}'] >= 4 * 4
    assert after['tensorwire_plan_cache_total{result="hit"}'] >= before['tensorwire_plan_cache_total{result="hit"}'] + 3
    assert after['tensorwire_errors_total{code="IndexError"}'] >= 1
    assert after["tensorwire_sessions"] >= 1 and after["tensorwire_sessions_opened_total"] >= 1
    assert after['tensorwire_worker_up{device="cpu:0"}'] == 1 and after['tensorwire_worker_up{device="cpu:1"}'] == 1
    assert after['tensorwire_service_up{service="autograd"}'] == 1
    # the workers' load arrives with the dispatcher's poll (every 2 s): queue depth and memory per device
    keep = x  # noqa: F841 - 16 KiB held on cpu:1
    loaded = _wait_for(lambda: (m := _scrape(url)).get('tensorwire_device_memory_bytes{device="cpu:1",kind="used"}',
                                                       0) >= 64 * 64 * 4 and m)
    assert loaded, "no memory figure for cpu:1"
    assert loaded['tensorwire_queue_depth{device="cpu:1"}'] >= 0
    assert loaded['tensorwire_device_memory_bytes{device="cpu:1",kind="session_limit"}'] > 0


def test_hub_metrics_count_requests_and_bytes(obs_cluster):
    url = obs_cluster.metrics_urls["hub"]
    root = json.loads(urllib.request.urlopen(obs_cluster.hub_url + "/", timeout=10).read())
    assert root["service"] == "tensorwire-hub"
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(obs_cluster.hub_url + "/nobody/nothing/resolve/main/x.bin", timeout=10)
    # a request is counted once its response is written, so the client can see the answer a moment before the count
    ok = 'tensorwire_hub_requests_total{method="GET",route="other",status="200"}'
    not_found = 'tensorwire_hub_requests_total{method="GET",route="resolve",status="404"}'
    m = _wait_for(lambda: (m := _scrape(url)).get(ok, 0) >= 1 and m.get(not_found, 0) >= 1 and m)
    assert m, f"the hub never counted both requests: {_scrape(url)}"
    assert m['tensorwire_hub_bytes_sent_total{route="other"}'] > 0
    assert m['tensorwire_hub_request_seconds_count{route="resolve"}'] >= 1


# -- status ---------------------------------------------------------------------------------------------------------
def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorwire.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_status_json_text_and_watch(obs_cluster, sess):
    x = tw.ones(256, device="cpu:0")
    (x + 1).numpy()
    r = _cli("status", "--address", obs_cluster.address, "--json")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["hub"] == {"url": obs_cluster.hub_url, "ok": True, "detail": "reachable"}
    names = {s["name"] for s in st["service_info"]}
    assert "autograd" in names
    if "collectives" in obs_cluster.services:
        assert {"collectives@cpu:0", "collectives@cpu:1"} <= names
    load = st["load"]["cpu:0"]
    assert load["sessions"] >= 1 and load["used_bytes"] >= 256 * 4 and load["session_limit"] > 0
    assert load["queued"] >= 0 and load["batches_per_s"] > 0 and load["ops_per_s"] > 0
    assert st["live_sessions"] >= 2  # this test's session and the status command's own
    text = _cli("status", "--address", obs_cluster.address)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert re.search(r"^cpu:0 .*C kernels|^cpu:0 .*numpy", out, re.M) and re.search(r"^cpu:1 ", out, re.M)
    assert "autograd" in out and f"hub: {obs_cluster.hub_url}  reachable" in out and "queue" in out
    watch = _cli("status", "--address", obs_cluster.address, "--watch", "0.1", "--count", "3", "--json")
    assert watch.returncode == 0, watch.stderr
    assert len([json.loads(line) for line in watch.stdout.splitlines()]) == 3


def test_status_watch_stops_cleanly_on_ctrl_c(obs_cluster):
    # Ctrl-C's default action in the child, whatever this process inherited: a shell without job control starts
    # background commands with SIGINT ignored, and Python then installs no KeyboardInterrupt handler
    proc = subprocess.Popen([sys.executable, "-m", "tensorwire.cli", "status", "--address", obs_cluster.address,
                             "--watch", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=60), "status --watch printed nothing"
        assert b"dispatcher" in os.read(proc.stdout.fileno(), 65536)
        sel.close()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert b"Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- logs and progress ----------------------------------------------------------------------------------------------
def test_log_level_switch_parses_documented_values():
    assert level_from_env("info") == (logging.INFO, None)
    assert level_from_env("DEBUG") == (logging.DEBUG, None)
    assert level_from_env("") == (logging.WARNING, None)
    level, problem = level_from_env("loud")
    assert level == logging.WARNING and "TENSORWIRE_LOG" in problem and "info" in problem


def test_info_logs_name_sessions_plans_and_slow_batches(obs_cluster):
    s = tw.Session(obs_cluster.address)
    sid = s.session_id
    with tw.use_session(s):
        (tw.arange(7.0, device="cpu:0") * 3).numpy()
    s.close()
    disp = obs_cluster.log_dir / "dispatcher.log"
    worker = obs_cluster.log_dir / "cpu-0.log"
    assert _wait_for(lambda: f"session {sid} closed by its client" in disp.read_text()), disp.read_text()[-2000:]
    text = disp.read_text()
    assert f"session {sid} opened by python pid {os.getpid()}" in text
    assert "registered worker cpu:0" in text and " INFO tensorwire.dispatcher[" in text
    wtext = worker.read_text()
    assert re.search(rf"plan \d+ of session {sid} compiled: \d+ nodes", wtext), wtext[-2000:]
    assert "slow batch on cpu:0" in wtext  # (the module's threshold is 0 ms: every batch counts)


def test_start_up_progress_names_each_service(obs_cluster):
    lines = obs_cluster.progress_text.splitlines()
    for name in ("hub", "dispatcher", "cpu:0", "cpu:1", "autograd"):
        assert any(re.match(rf"tensorwire: {re.escape(name)}\s+ready", ln) for ln in lines), lines
    assert any(obs_cluster.address in ln for ln in lines)
