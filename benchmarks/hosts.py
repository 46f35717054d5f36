"""Issue 30's data plane across simulated hosts: 256 MiB up to a worker and back over TCP, between two network
namespaces ("host A": the dispatcher and a CPU worker; "host B": the client), against a raw pyzmq DEALER/ROUTER
echo of the same bytes between the same two namespaces.

The namespaces are joined by veth links to a bridge (``tests/deploy/netns.py``, as the namespace test's), with no
``tc netem``: the row measures our software against raw zmq over the same TCP path, not a network. The direct
channel is encrypted off loopback (CURVE), so the echo runs CURVE too; a plain-TCP echo is reported beside it.
The client's process gets a private shared-memory folder (as on another machine), so its tensors go as frames.
Needs root and ``ip netns``; elsewhere the group prints why and returns no row.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import zmq

from tests.deploy.netns import Hosts, NetnsUnavailable, private_shm_argv

from .harness import Result

HOSTS = {"a": 2, "b": 3}  # host A: dispatcher + worker cpu:0 (and the echo); host B: the client
NET = "10.78.0"  # (the namespace test's is 10.77.0: both may run at once)
MIB = 256
ROUNDS = 5
CLIENT_TIMEOUT_S = 600  # the client's whole run, warm-up included
ECHO_IDLE_S = 900  # the echo exits after this long without a message (it is also killed at the end)

ECHO = r"""
import sys, zmq
ctx = zmq.Context()
curve, plain = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER)
curve.curve_secretkey, curve.curve_publickey, curve.curve_server = sys.argv[2].encode(), sys.argv[3].encode(), True
for s in (curve, plain):
    s.setsockopt(zmq.MAXMSGSIZE, -1)
    s.setsockopt(zmq.LINGER, 0)
curve.bind(f"tcp://{sys.argv[1]}:5570")
plain.bind(f"tcp://{sys.argv[1]}:5571")
print("ready", flush=True)
poller = zmq.Poller()
poller.register(curve, zmq.POLLIN)
poller.register(plain, zmq.POLLIN)
while True:
    ev = dict(poller.poll(float(sys.argv[4]) * 1000))
    if not ev:
        break
    for s in ev:
        m = s.recv_multipart(copy=False)
        if m[1].bytes == b"stop":
            sys.exit(0)
        s.send_multipart(m, copy=False)
"""

CLIENT = r"""
import json, sys, time
import numpy as np, zmq
import tensorwire as tw

cfg = json.loads(sys.argv[1])
a = np.random.default_rng(0).standard_normal(cfg["mib"] * (1 << 20) // 4).astype(np.float32)
s = tw.Session(cfg["address"], cfg["token"], keys=cfg["keys"])
ctx = zmq.Context.instance()

def dealer(address, server_key=None):
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, -1)
    sock.setsockopt(zmq.RCVTIMEO, 120_000)
    if server_key:
        sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
        sock.curve_serverkey = server_key.encode()
    sock.connect(address)
    return sock

curve, plain = dealer(cfg["echo"], cfg["echo_key"]), dealer(cfg["plain"])

def ours():
    return s.fetch(s.const(a, "cpu:0", borrowed=True))

def echo(sock):
    sock.send(a, copy=False)
    return sock.recv(copy=False)

sides = {"ours": ours, "curve": lambda: echo(curve), "plain": lambda: echo(plain)}
assert np.array_equal(ours(), a), "the fetched value differs from the upload"
for fn in sides.values():
    fn()
times = {k: [] for k in sides}
for _ in range(cfg["rounds"]):
    for k, fn in sides.items():
        t0 = time.perf_counter()
        fn()
        times[k].append(time.perf_counter() - t0)
plane = s.cluster_status()["data_plane"]["cpu:0"]
for sock in (curve, plain):
    sock.send(b"stop")
s.close()
print("RESULT " + json.dumps({"times": times, "plane": plane}), flush=True)
"""


def _env(d: Path, keys: Path) -> dict:
    env = {**os.environ, "TENSORWIRE_SHM_DIR": str(d / "shm"), "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "TENSORWIRE_SERVICE_TOKEN": (keys / "service.token").read_text().strip()}
    env.pop("TENSORWIRE_KEYS", None)
    return env


def _start_echo(hosts: Hosts, env: dict) -> tuple[subprocess.Popen, str]:
    """The raw echo in host A (a CURVE ROUTER on 5570, a plain one on 5571); returns it and its public key."""
    public, secret = zmq.curve_keypair()
    proc = subprocess.Popen(hosts.argv("a", [sys.executable, "-c", ECHO, hosts.addr("a"), secret.decode(),
                                             public.decode(), str(ECHO_IDLE_S)]),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    line = proc.stdout.readline()  # (it prints "ready" or exits, closing its output)
    if line.strip() != "ready":
        proc.kill()
        proc.wait(10)
        raise RuntimeError(f"the echo in host A did not start (exit code {proc.poll()})")
    return proc, public.decode()


def _run_client(hosts: Hosts, d: Path, env: dict, cfg: dict) -> dict:
    """The client's measurement in host B, with a shared-memory folder of its own; returns its RESULT."""
    cmd = hosts.argv("b", private_shm_argv(d / "shm", [sys.executable, "-c", CLIENT, json.dumps(cfg)]))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CLIENT_TIMEOUT_S)
    out = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if r.returncode != 0 or not out:
        raise RuntimeError(f"the client in host B failed (exit code {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(out[0][len("RESULT "):])


def _measure(hosts: Hosts, d: Path) -> dict:
    """Start the dispatcher, a worker and the echo in host A, run the client in host B; stop them all."""
    cli = [sys.executable, "-m", "tensorwire.cli"]
    keys = d / "keys"
    made = subprocess.run([*cli, "keys", "--dir", str(keys), "--tokens"], capture_output=True, timeout=120)
    if made.returncode != 0:
        raise RuntimeError(f"tensorwire keys failed: {made.stderr.decode()[-2000:]}")
    (d / "shm").mkdir(mode=0o700)
    env, a = _env(d, keys), hosts.addr("a")
    services, echo = [], None
    try:
        services.append(hosts.service("dispatcher", "a", [
            *cli, "dispatcher", "--address", f"tcp://{a}:5555", "--service-address", f"tcp://{a}:5556", "--keys",
            str(keys), "--token-file", str(keys / "client.token")], d / "dispatcher.log", env))
        services.append(hosts.service("cpu:0", "a", [
            *cli, "worker", "--device", "cpu:0", "--dispatcher", f"tcp://{a}:5556", "--keys", str(keys),
            "--threads", "1", "--direct-address", f"tcp://{a}:5560"], d / "worker.log", env))
        echo, echo_key = _start_echo(hosts, env)
        cfg = {"address": f"tcp://{a}:5555", "token": (keys / "client.token").read_text().strip(),
               "keys": str(keys), "echo": f"tcp://{a}:5570", "plain": f"tcp://{a}:5571", "echo_key": echo_key,
               "mib": MIB, "rounds": ROUNDS}
        return _run_client(hosts, d, env, cfg)
    finally:
        if echo is not None:
            if echo.poll() is None:
                echo.kill()
            echo.wait(10)
        for svc in reversed(services):
            svc.stop()


def bench_bulk_across_hosts() -> list[Result]:
    """256 MiB up to a worker in another namespace and back on the direct channel (TCP, CURVE) vs a raw pyzmq
    DEALER/ROUTER echo of the same bytes between the same namespaces, as throughputs (bytes moved per second)."""
    d = Path(tempfile.mkdtemp(prefix="tw-hosts-"))
    try:
        with Hosts(HOSTS, net=NET) as hosts:
            r = _measure(hosts, d)
    except NetnsUnavailable as e:
        print(f"hosts: skipped (no row): {e}", file=sys.stderr)
        return []
    finally:
        shutil.rmtree(d, ignore_errors=True)
    plane, nbytes = r["plane"], 2 * MIB * (1 << 20)  # (each side moves it twice: up and down)
    if plane.get("path") != "direct" or plane.get("shared_memory") or not plane.get("encrypted"):
        raise RuntimeError(f"the client did not use an encrypted TCP direct channel: {plane}")
    gbs = {k: nbytes / statistics.median(v) / 1e9 for k, v in r["times"].items()}
    best = {k: nbytes / min(v) / 1e9 for k, v in r["times"].items()}
    ratio = gbs["ours"] / gbs["curve"]
    return [Result(f"upload + download of {MIB} MiB float32 to a worker in another network namespace (TCP, CURVE) "
                   "vs a raw pyzmq DEALER/ROUTER CURVE echo of the same bytes between the same namespaces "
                   "(throughput)", gbs["ours"], gbs["curve"], "GB/s", ratio, ">= 0.9x", ratio >= 0.9,
                   f"medians of {ROUNDS} interleaved rounds, in one client process; best {best['ours']:.3g} vs "
                   f"{best['curve']:.3g} GB/s; veth links to a bridge, no netem (our software against raw zmq on "
                   f"the same TCP path); CURVE on both (the direct channel is encrypted off loopback); a plain-TCP "
                   f"echo did {gbs['plain']:.3g} GB/s")]


def run_all() -> list[Result]:
    return bench_bulk_across_hosts()
