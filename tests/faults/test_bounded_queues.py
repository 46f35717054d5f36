"""Issue 34, finding 5: every queue has a bound and a documented behaviour at the bound (docs/reliability.md).

- A client that asks for many large fetches and never reads them costs the dispatcher (relayed answers) or the
  worker (a direct channel's answers) at most ``TENSORWIRE_ANSWER_BYTES``; the answers past it reach the client
  as ``OutOfMemory`` errors when it reads, and once its lease ends its connection is shut down and what was queued
  for it is freed, while another session works normally.
- Uploads count against the session's quota as they arrive: a session that queues far more uploads than its quota
  is refused with ``QuotaExceeded`` (an ``OutOfMemory``) and the worker never holds them.
- The metrics endpoint closes idle connections after ``TENSORWIRE_METRICS_TIMEOUT`` and keeps at most
  ``TENSORWIRE_METRICS_MAX_CONNECTIONS`` open: 300 idle connections never stop a scrape.

This module's figures are small (set through the environment) so that the attacks take seconds.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import tensorwire as tw

from .conftest import rss_mb, wait_until

MIB = 1 << 20
ANSWER_BYTES = 4 * MIB  # the bound on one connection's unread answers (TENSORWIRE_ANSWER_BYTES)
FETCH_FLOATS = MIB // 4  # each fetched value: 1 MiB
FETCHES = 96  # 96 MiB asked for and never read: 24x the bound
QUOTA = "16MiB"
LEASE_S = 3.0
METRICS_TIMEOUT_S = 1.0
BOUND_S = 30.0

# a client whose connections stop reading: libzmq takes one message and 64 KiB of socket buffer, no more
ATTACKER = r"""
import json, sys, zmq
ctx = zmq.Context.instance()
ctx.setsockopt(zmq.RCVHWM, 1)
ctx.setsockopt(zmq.RCVBUF, 1 << 16)
import tensorwire as tw
s = tw.connect(sys.argv[1])
n, count = int(sys.argv[2]), int(sys.argv[3])
x = tw.ones(n)
x.sum().item()
qs = []
for i in range(count):  # each a fresh value, fetched and released: the answers, not the session, hold the memory
    y = x + float(i)
    with s._lock:
        pending, s._pending = s._pending, []
        s._pending_bytes = 0
        release, s._release = s._release, []
        qs.append(s._send_batch(pending, [y._id], False, release, reply=True))
    del y
print("sent", flush=True)
sys.stdin.readline()
got = []
with s._lock:
    for q in qs:
        try:
            s._wait(q, timeout=30)
            got.append("value")
        except tw.TensorwireError as e:
            got.append(type(e).__name__)
            if not isinstance(e, tw.OutOfMemory):
                break
print(json.dumps(got), flush=True)
"""

# a session that queues uploads behind a slow batch (~27 GFLOP), then syncs
UPLOADER = r"""
import sys, numpy as np, tensorwire as tw
s = tw.connect(sys.argv[1])
count, n = int(sys.argv[2]), int(sys.argv[3])
a = tw.ones(512, 512) / 512.0
y = a
for _ in range(100):
    y = y @ a
s.flush()
xs = []
for i in range(count):
    xs.append(tw.tensor(np.full(n, i, np.float32)))
    s.flush()
try:
    s.synchronize()
    print("no error")
except tw.OutOfMemory as e:
    print(type(e).__name__, "OutOfMemory")
x = (tw.ones(10) * 2).numpy()  # the session goes on
"""


@pytest.fixture(scope="module")
def cluster():
    with tw.LocalCluster(
        devices=["cpu:0"],
        autograd=False,
        collectives=False,
        metrics=True,
        session_memory=QUOTA,
        extra_env={
            "TENSORWIRE_ANSWER_BYTES": str(ANSWER_BYTES),
            "TENSORWIRE_SESSION_LEASE_S": str(LEASE_S),
            "TENSORWIRE_METRICS_TIMEOUT": str(METRICS_TIMEOUT_S),
        },
    ) as c:
        yield c


@pytest.fixture
def victim(cluster):
    sess = tw.Session(cluster.address)
    yield sess
    sess.close()


def _pid(cluster, name: str) -> int:
    return cluster.services[name].proc.pid


def _reset_peak(pid: int) -> float:
    """Reset the process's peak resident memory (VmHWM) to now; returns its resident memory (MiB)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    return rss_mb(pid)


def _peak_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _metric(cluster, sample: str, **labels: str) -> float:
    """The sum of the dispatcher's samples named ``sample`` with ``labels`` (a scrape)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(cluster.metrics_urls["dispatcher"], timeout=10) as r:
        text = r.read().decode()
    return sum(v.value for fam in text_string_to_metric_families(text) for v in fam.samples
               if v.name == sample and labels.items() <= v.labels.items())


def _attacker(cluster, direct: bool, fetches: int = FETCHES) -> subprocess.Popen:
    env = {**os.environ, "TENSORWIRE_DIRECT": "1" if direct else "0",
           "TENSORWIRE_SHM_MIN_BYTES": str(1 << 40)}  # (answers as frames: what a remote client gets)
    p = subprocess.Popen([sys.executable, "-c", ATTACKER, cluster.address, str(FETCH_FLOATS), str(fetches)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    line = p.stdout.readline()  # (bounded: the process exits on any error, closing its stdout)
    assert line.strip() == "sent", f"the attacking client did not start: {line!r}"
    return p


def _read_all(p: subprocess.Popen) -> list[str]:
    """Let the attacker read its answers; what each was (bounded by its own waits)."""
    out, _ = p.communicate("go\n", timeout=BOUND_S + 60)
    return json.loads(out.strip().splitlines()[-1])


def _works(s: tw.Session, k: float) -> None:
    """Another session computes and fetches normally."""
    with tw.use_session(s):
        v = (tw.ones(1000) * k).numpy()
    assert v.shape == (1000,) and float(v[0]) == k


def _out_bytes(cluster) -> float:
    return _metric(cluster, "tensorwire_bytes_total", device="cpu:0", direction="out")


@pytest.mark.parametrize("direct", [False, True], ids=["dispatcher", "direct-channel"])
def test_a_client_that_never_reads_its_fetches_costs_at_most_the_bound(cluster, victim, direct):
    """The attack: 96 fetches of fresh 1 MiB values, never read. The process answering them (the dispatcher when
    relayed, the worker on a direct channel) grows by at most the 4 MiB bound (plus slack for what is in transit);
    the client reads the answers that fit and an OutOfMemory error for each dropped one, never a hang."""
    pid = _pid(cluster, "cpu:0" if direct else "dispatcher")
    _works(victim, 1.0)
    warm = _attacker(cluster, direct, fetches=2)  # (the same work, read: what it costs besides the queue)
    assert _read_all(warm) == ["value", "value"]
    base = _reset_peak(pid)
    out0 = _out_bytes(cluster)
    p = _attacker(cluster, direct)
    try:
        # every answer was made (and sent or dropped) once its bytes left the worker
        wait_until(lambda: _out_bytes(cluster) >= out0 + FETCHES * FETCH_FLOATS * 4, BOUND_S, "the fetches answered")
        _works(victim, 2.0)  # while the attacker's answers are held
        grown = _peak_mb(pid) - base
        assert grown < ANSWER_BYTES / MIB + 20, f"{'worker' if direct else 'dispatcher'} grew by {grown:.0f} MiB"
        print(f"{'worker' if direct else 'dispatcher'} grew by {grown:.1f} MiB for {FETCHES} MiB of unread answers")
        got = _read_all(p)
    finally:
        p.kill()
        p.wait()
    assert got[0] == "value" and "OutOfMemory" in got, got  # the first answers, then typed errors for the dropped
    assert set(got) <= {"value", "OutOfMemory"} and len(got) == FETCHES, got
    if not direct:
        wait_until(lambda: _metric(cluster, "tensorwire_answer_bytes") == 0, BOUND_S, "the answers written")
        assert _metric(cluster, "tensorwire_answers_dropped_total") >= got.count("OutOfMemory")


def test_unread_answers_are_released_when_the_lease_ends(cluster, victim):
    """The attacker stops altogether (SIGSTOP: its connection stays open, its lease is not renewed). When its lease
    ends, the dispatcher shuts the connection down and what was queued for it is freed; another session works
    meanwhile; the attacker, when it runs again, gets a typed error instead of hanging."""
    p = _attacker(cluster, direct=False)
    try:
        wait_until(lambda: _metric(cluster, "tensorwire_answer_bytes") > 0, BOUND_S, "answers held for the attacker")
        os.kill(p.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        sessions = _metric(cluster, "tensorwire_sessions")
        _works(victim, 3.0)
        wait_until(lambda: _metric(cluster, "tensorwire_sessions") < sessions, LEASE_S + BOUND_S, "the lease ended")
        # at the lease's end (3 s, checked each 1 s heartbeat), not when ZeroMQ's own heartbeats would drop the
        # connection (10 s without an answer: measured 11.2 s without the lease's release, 3.4 s with it)
        wait_until(lambda: _metric(cluster, "tensorwire_answer_bytes") == 0, t0 + LEASE_S + 5 - time.monotonic(),
                   "the unread answers freed when the lease ended")
        _works(victim, 4.0)
        os.kill(p.pid, signal.SIGCONT)
        got = _read_all(p)
    finally:
        p.kill()
        p.wait()
    assert got and got[-1] in ("Unauthorized", "OutOfMemory"), got  # (Unauthorized: "this session expired")


def test_uploads_past_the_quota_are_refused_as_they_arrive(cluster, victim):
    """The attack: a slow batch, then 48 batches of 2 MiB uploads queued behind it (96 MiB for a 16 MiB quota).
    The worker counts them as they arrive: past the quota they are dropped at once and their batches fail with
    QuotaExceeded. The worker's memory grows by at most twice the quota (queued uploads, and the buffers the session
    holds once they ran), not by the uploads."""
    pid = _pid(cluster, "cpu:0")
    base = _reset_peak(pid)
    env = {**os.environ, "TENSORWIRE_SHM_MIN_BYTES": str(1 << 40)}  # (uploads as frames: what a remote client sends)
    p = subprocess.run([sys.executable, "-c", UPLOADER, cluster.address, "48", str(2 * MIB // 4)], env=env,
                       capture_output=True, text=True, timeout=BOUND_S + 60)
    got = p.stdout.strip().splitlines()[-1:] if p.returncode == 0 else [p.stderr[-2000:]]
    assert got == ["QuotaExceeded OutOfMemory"], got
    grown = _peak_mb(pid) - base
    assert grown < 2 * 16 + 16, f"the worker grew by {grown:.0f} MiB for a 16 MiB quota"
    print(f"worker grew by {grown:.1f} MiB for 96 MiB of uploads queued under a 16 MiB quota")
    _works(victim, 5.0)  # the worker serves others


def _closed(sock: socket.socket) -> bool:
    r, _, _ = select.select([sock], [], [], 0)
    if not r:
        return False
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


def test_idle_metrics_connections_are_closed_and_never_stop_a_scrape(cluster):
    """The attack: 300 connections to the metrics endpoint that never send a request. A scrape is answered while
    they are open; the dispatcher's threads stay bounded by the connection cap; each is closed after the timeout."""
    pid = _pid(cluster, "dispatcher")
    url = cluster.metrics_urls["dispatcher"]
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(300)]
    try:
        t0 = time.monotonic()
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200 and b"tensorwire_sessions" in r.read()
        assert time.monotonic() - t0 < 5
        with open(f"/proc/{pid}/status") as f:
            threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
        assert threads < 100, f"{threads} threads in the dispatcher"
        wait_until(lambda: all(_closed(s) for s in idle), METRICS_TIMEOUT_S + BOUND_S, "idle connections closed")
    finally:
        for s in idle:
            s.close()
