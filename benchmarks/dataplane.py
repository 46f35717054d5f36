"""Issue 30's benchmarks: the data plane. Single-device work on a direct channel against the relay through the
dispatcher, the one-op round trip against a raw pyzmq echo, and the dispatcher's CPU time per step on each path."""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import tensorwire as tw
from tensorwire.backends.idle_spin import spin_from_env
from tensorwire.channels import wait_alone
from tensorwire.protocol.service import spare_core
from tensorwire.session import CLIENT_SPIN_S

from .core import Echo
from .harness import Result, adam_step, interleaved
from .training import THREADS, _data, _models

_TICK = os.sysconf("SC_CLK_TCK")

#: the echo of ``core.ECHO``, but waiting as a worker does: after each answer it polls without blocking for up to
#: the worker's bound, under the worker's rule (``backends.idle_spin.IdleSpin``), before it blocks in ``recv``
SPINNING_ECHO = r"""
import sys, zmq
from tensorwire.backends.idle_spin import IdleSpin
from tensorwire.protocol.wire import EVENTS, POLLIN
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
s.setsockopt(zmq.MAXMSGSIZE, -1)
s.bind(sys.argv[1])
spin = IdleSpin(float(sys.argv[2]))
print(sys.argv[1], flush=True)
while True:
    spin.wait(lambda _t: s.getsockopt(EVENTS) & POLLIN)  # (the worker's spin: its socket's ZMQ_EVENTS alone)
    m = s.recv_multipart(copy=False)
    spin.worked()
    if m[1].bytes == b"stop":
        break
    s.send_multipart(m, copy=False)
"""


class SpinningEcho(Echo):
    """The raw pyzmq echo with both sides waiting as ours do (the same bounds): the echo process spins after each
    answer as a worker does (``TENSORWIRE_WORKER_SPIN_US``), the caller spins for the answer as a client does
    (``TENSORWIRE_CLIENT_SPIN_MS``). ``Echo`` blocks on both sides."""

    def __init__(self, address: str, spin_s: float | None = None):
        super().__init__(address, SPINNING_ECHO, (repr(spin_from_env() if spin_s is None else spin_s),))

    def roundtrip(self, payload) -> None:
        self.sock.send(payload, copy=len(payload) < 65536)
        got = None
        if spare_core(time.monotonic()):  # (the client's rule and wait: Session._wait, channels.wait_alone)
            got = wait_alone(self.sock, CLIENT_SPIN_S, _nothing_else)
        if type(got) is not list:  # (the spin saw it, or nobody spins: read it)
            self.sock.recv(copy=False)


#: a raw Unix-socket echo: what the same-host lane (``protocol/lane.py``) costs at least
UNIX_ECHO = r"""
import os, socket, sys
path = os.path.join(sys.argv[1], "unix-echo.sock")
lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
lst.bind(path)
lst.listen(1)
print(path, flush=True)
c, _ = lst.accept()
while True:
    m = c.recv(65536)
    if not m or m == b"stop":
        break
    c.sendall(m)
"""


class UnixEcho:
    """A raw echo over a Unix stream socket in another process, both sides blocking in ``recv``: the peer of the
    lane's rows (16-byte messages, read whole by one ``recv`` each)."""

    def __init__(self, folder: str):
        self.proc = subprocess.Popen([sys.executable, "-c", UNIX_ECHO, folder], stdout=subprocess.PIPE)
        path = self.proc.stdout.readline().decode().strip()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)

    def roundtrip(self, payload) -> None:
        self.sock.sendall(payload)
        got = 0
        while got < len(payload):  # (bounded by the payload: each recv brings at least a byte)
            got += len(self.sock.recv(65536))

    def close(self) -> None:
        self.sock.sendall(b"stop")
        self.proc.wait(10)
        self.sock.close()


def _nothing_else() -> bool:
    return False


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _on_lane(address: str) -> bool:
    """Whether a session's channel to cpu:0 runs on the same-host lane."""
    s = _session(address, True)
    with tw.use_session(s):
        (tw.ones(1) + 1).numpy()
        on = bool(s.cluster_status()["data_plane"]["cpu:0"].get("lane"))
    s.close()
    return on


def _session(address: str, direct: bool) -> tw.Session:
    s = tw.Session(address)
    s._plane.enabled = direct  # (per session: both paths measured side by side in one run)
    return s


def _roundtrip(address: str, echoes: list[Echo], direct: bool, rounds: int = 9) -> tuple[float, list[float]]:
    """Median seconds of ``(x + 1).numpy()`` on one path and of each echo's 16-byte round trip, in alternating
    rounds of 300 (so machine noise hits all alike)."""
    s = _session(address, direct)
    payload = b"x" * 16
    with tw.use_session(s):
        x = tw.ones(4)
        fns = [lambda: (x + 1).numpy()] + [lambda e=e: e.roundtrip(payload) for e in echoes]
        for _ in range(300):
            for fn in fns:
                fn()
        times: list[list[float]] = [[] for _ in fns]
        for _ in range(rounds):
            for fn, t in zip(fns, times):
                t0 = time.perf_counter()
                for _ in range(300):
                    fn()
                t.append((time.perf_counter() - t0) / 300)
        path = s.cluster_status()["data_plane"]["cpu:0"]["path"]
    s.close()
    assert path == ("direct" if direct else "relay"), path
    ours, *peers = (statistics.median(t) for t in times)
    return ours, peers


def bench_roundtrip(address: str, echo: Echo, ipc_echo: Echo, ipc_spinning: Echo | None = None,
                    unix_echo: UnixEcho | None = None) -> list[Result]:
    """``(x + 1).numpy()`` on a direct channel (a unix socket on a local cluster), and through the relay (TCP to
    the dispatcher), each against a raw DEALER/ROUTER echo between two processes on the same transport. The target
    row's echo blocks on both sides (raw pyzmq's ``recv``), while our client and worker busy-wait briefly while a
    core is spare; ``ipc_spinning`` (a ``SpinningEcho``) is the echo waiting as ours do, for the row beside it."""
    ours, peers = _roundtrip(address, [ipc_echo] + ([ipc_spinning] if ipc_spinning else []), True)
    r = ours / peers[0]
    load = os.getloadavg()[0]
    lane = "on the same-host lane (protocol/lane.py)" if _on_lane(address) else "on its ZeroMQ socket"
    out = [Result("one-op round trip `(x + 1).numpy()` on a direct channel vs raw pyzmq DEALER/ROUTER echo of 16 B "
                  "between two processes, both on a unix socket", ours * 1e6, peers[0] * 1e6, "us", r, "<= 2.0x",
                  r <= 2.0, f"the echo blocks in recv on both sides; ours spin while a core is spare (client "
                  f"{CLIENT_SPIN_S * 1e3:g} ms, worker {spin_from_env() * 1e6:g} us); 1-minute load {load:.2f} on "
                  f"{os.cpu_count()} cores{'' if spare_core(time.monotonic()) else ' (no core spare: nobody spins)'}; "
                  f"the channel ran {lane}")]
    if ipc_spinning is not None:
        out.append(Result("the same direct round trip vs the echo waiting as ours do (both sides spin with the same "
                          "bounds and rule), unix socket", ours * 1e6, peers[1] * 1e6, "us", ours / peers[1],
                          "report", True))
    if unix_echo is not None:
        ours, peers = _roundtrip(address, [unix_echo], True)
        out.append(Result(f"the same direct round trip ({lane}) vs a raw Unix-socket echo, both sides blocking",
                          ours * 1e6, peers[0] * 1e6, "us", ours / peers[0], "report", True))
    ours, peers = _roundtrip(address, [echo], True)
    out.append(Result("the same direct round trip vs the echo on TCP loopback", ours * 1e6, peers[0] * 1e6, "us",
                      ours / peers[0], "report", True))
    ours, peers = _roundtrip(address, [echo], False)
    out.append(Result("the same round trip through the dispatcher (the relay, TCP) vs the TCP echo", ours * 1e6,
                      peers[0] * 1e6, "us", ours / peers[0], "report", True,
                      "issue 30 measured 4.5-5.7x before the change"))
    return out


def worker_part(messages: int = 2000, rounds: int = 5) -> tuple[float, float]:
    """Thread CPU seconds per one-op replay message of a worker's part, in this process: ``DirectChannel.receive``
    -> ``Executor.replay_now`` -> the answer sent, for the message ``(x + 1).numpy()`` sends (a DEALER as the
    client), best of ``rounds`` of ``messages``; and the same for a raw ROUTER that reads that message and answers it
    with a header of the same size (the floor: what zmq and msgpack alone cost)."""
    import msgpack
    import zmq

    from tensorwire.backends.cpu import NumpyBackend
    from tensorwire.backends.direct import DirectChannel
    from tensorwire.backends.worker import Executor
    from tensorwire.protocol.capability import channel_key, issue
    from tensorwire.protocol.wire import pack_header, unpack_header

    ctx = zmq.Context.instance()
    folder = tempfile.mkdtemp(prefix="tw-worker-part-")
    ex = Executor(NumpyBackend().open(0), "cpu:0", lambda h, f: None)
    ch = DirectChannel(ctx, "cpu:0", "bench-instance", f"ipc://{folder}/w.sock")
    ch.epoch = "epoch"
    ex.channel = ch
    cap = issue(channel_key("bench-instance"), b"bench-01", "cpu:0", "epoch", time.time() + 3600)
    raw = ctx.socket(zmq.ROUTER)
    raw.bind(f"ipc://{folder}/raw.sock")
    clients = []
    for address in (ch.address, f"ipc://{folder}/raw.sock"):
        cli = ctx.socket(zmq.DEALER)
        cli.setsockopt(zmq.LINGER, 0)
        cli.connect(address)
        clients.append(cli)
    cli, raw_cli = clients
    packer = msgpack.Packer(use_bin_type=True)

    def ask(h: dict, *frames) -> dict:
        cli.send_multipart([packer.pack({**h, "cap": cap}), *frames])
        assert ch.sock.poll(5000)
        ch.receive(ex)
        ex.run_ready()
        assert cli.poll(5000)
        return unpack_header(cli.recv_multipart()[0])

    def replay(k: int) -> bytes:
        return packer.pack({"ext": [1, 2], "outs": [k], "fetch": [k], "dyn": [], "plan": 2, "t": "run",
                            "release": [k - 1], "shm": 1 << 20, "q": k, "cap": cap})

    def ours(k0: int) -> float:
        cpu = 0.0
        for k in range(k0, k0 + messages):
            cli.send(replay(k))
            ch.sock.poll(5000)
            c0 = time.thread_time()
            ch.receive(ex)
            cpu += time.thread_time() - c0
            cli.poll(5000)
            cli.recv(copy=False)
        return cpu / messages

    answer = None

    def floor(k0: int) -> float:
        cpu = 0.0
        for k in range(k0, k0 + messages):
            raw_cli.send(replay(k))
            raw.poll(5000)
            c0 = time.thread_time()
            route, h = raw.recv_multipart(copy=False)
            q = unpack_header(h.bytes)["q"]
            raw.send_multipart([route, pack_header({**answer, "q": q})], copy=True)
            cpu += time.thread_time() - c0
            raw_cli.poll(5000)
            raw_cli.recv(copy=False)
        return cpu / messages

    try:
        one = np.float32(1).tobytes()
        assert ask({"t": "run", "q": 1, "ext": [], "outs": [1, 2], "devs": ["cpu:0"], "sync": True,
                    "nodes": [["const", [], {"shape": [4], "dtype": "float32", "frame": 0}, 0],
                              ["const", [], {"shape": [], "dtype": "float32", "frame": 1}, 0]]},
                   np.ones(4, np.float32).tobytes(), one)["t"] == "done"
        answer = ask({"t": "run", "q": 2, "ext": [1, 2], "outs": [3], "plan": 2, "devs": ["cpu:0"], "dyn": [],
                      "nodes": [["add", [-2, -1], {}, 0]], "fetch": [3], "shm": 1 << 20})
        assert answer["t"] == "done" and not answer["errors"], answer
        k = 10
        ours(k)
        floor(k)
        k += messages
        best_ours = best_floor = float("inf")
        for _ in range(rounds):
            best_ours = min(best_ours, ours(k))
            best_floor = min(best_floor, floor(k))
            k += messages
    finally:
        for sock in (*clients, raw):
            sock.close(0)
        ch.close()
        ex.close()
        shutil.rmtree(folder, ignore_errors=True)
    return best_ours, best_floor


def bench_worker_part() -> Result:
    """The worker's part of a one-op round trip, in one process, against zmq and msgpack alone."""
    ours, floor = worker_part()
    return Result("a worker's part of a one-op replay (direct socket -> executor -> answer), thread CPU per message, "
                  "vs a raw ROUTER reading that message and answering it", ours * 1e6, floor * 1e6, "us",
                  ours / floor, "report", True, f"best of 5 x 2000 messages in one process (a DEALER as the client); "
                  f"1-minute load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


def _step_cpu(address: str, dispatcher_pid: int, direct: bool, steps: int) -> tuple[float, float]:
    """(dispatcher CPU seconds, wall seconds) per compiled digits MLP step, loss read every step, on one path."""
    x, y = _data(np.random.default_rng(0), False)
    s = _session(address, direct)
    with tw.use_session(s):
        mm, _ = _models(False)
        xs, ys = tw.tensor(x), tw.tensor(y)
        opt = tw.optim.Adam(mm.parameters(), lr=1e-3)

        @tw.compile
        def step(xb, yb):
            return adam_step(tw.nn.functional, mm, opt, xb, yb)

        for _ in range(30):
            step(xs, ys).item()
        c0, t0 = _cpu_s(dispatcher_pid), os.times().elapsed
        for _ in range(steps):
            step(xs, ys).item()
        out = ((_cpu_s(dispatcher_pid) - c0) / steps, (os.times().elapsed - t0) / steps)
    s.close()
    return out


def bench_dispatcher_cpu(address: str, dispatcher_pid: int, steps: int = 400) -> list[Result]:
    """The dispatcher's CPU time per compiled digits MLP step (loss read every step) on each path."""
    (cd, td), (cr, tr) = (_step_cpu(address, dispatcher_pid, d, steps) for d in (True, False))
    return [Result("the dispatcher's CPU time per compiled MLP step (loss read every step), direct channel vs relay",
                   cd * 1e6, cr * 1e6, "us", cd / max(cr, 1e-9), "report", True,
                   f"the goal is none; /proc ticks ({1e6 / _TICK:.0f} us) over {steps} steps; a step took "
                   f"{td * 1e3:.2f} ms direct, {tr * 1e3:.2f} ms relayed")]


def bench_step_vs_torch(address: str, k: int) -> Result | None:
    """The compiled digits MLP step on a direct channel, loss read every ``k`` steps, vs PyTorch eager."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    from .compile import bench_step

    s = _session(address, True)
    with tw.use_session(s):
        r = bench_step(k)
    s.close()
    r.name += " (direct channel)"
    return r


def bench_bulk(address: str, mib: int = 256) -> Result:
    """256 MiB up and down on a direct channel (through shared memory: client and worker share this host) against a
    numpy copy of the same buffer in this process, as throughputs (bytes moved per second)."""
    a = np.random.default_rng(0).standard_normal(mib * (1 << 20) // 4).astype(np.float32)
    s = _session(address, True)
    dst = np.empty_like(a)

    def ours():
        s.fetch(s.const(a, "cpu:0", borrowed=True))

    def peer():
        np.copyto(dst, a)

    ours()
    peer()
    shm = s._plane.channels["cpu:0"].shm is not None
    t_ours, t_peer = interleaved(ours, peer, rounds=5)
    s.close()
    ours_gbs, peer_gbs = 2 * a.nbytes / t_ours / 1e9, a.nbytes / t_peer / 1e9  # (ours moves it twice: up and down)
    r = ours_gbs / peer_gbs
    return Result(f"upload + download of {mib} MiB float32 on a local cluster vs a numpy copy of the buffer "
                  "(throughput)", ours_gbs, peer_gbs, "GB/s", r, ">= 0.5x", r >= 0.5,
                  "through shared memory: one copy each way" if shm else "shared memory was not available: frames")


def bench_move(address: str, mib: int = 256) -> Result:
    """``x.to("cpu:1")`` of 256 MiB from ``cpu:0`` (worker to worker, through shared memory on one host) against a
    numpy copy of the same buffer in this process."""
    a = np.random.default_rng(0).standard_normal(mib * (1 << 20) // 4).astype(np.float32)
    s = _session(address, True)
    dst = np.empty_like(a)
    with tw.use_session(s):
        box = {"x": tw.from_numpy(a)}

        def ours():
            box["y"] = box["x"].to("cpu:1")  # (the previous copy dies here: its file goes back to cpu:0's pool)
            tw.synchronize()

        def peer():
            np.copyto(dst, a)

        for _ in range(3):
            ours()
            peer()
        t_ours, t_peer = interleaved(ours, peer, rounds=5)
        np.testing.assert_array_equal(box["y"][:1000].numpy(), a[:1000])
        box.clear()
    s.close()
    r = t_peer / t_ours
    return Result(f"`x.to(\"cpu:1\")` of {mib} MiB float32 from cpu:0 vs a numpy copy of the buffer (throughput)",
                  a.nbytes / t_ours / 1e9, a.nbytes / t_peer / 1e9, "GB/s", r, ">= 0.5x", r >= 0.5,
                  "worker to worker through a file of the source's pool: one copy, nothing through the dispatcher")


def run_all() -> list[Result]:
    results = []
    echo = Echo()
    folder = tempfile.mkdtemp(prefix="tw-echo-")
    ipc_echo = Echo(f"ipc://{folder}/echo.sock")
    ipc_spinning = SpinningEcho(f"ipc://{folder}/spinning.sock")
    unix_echo = UnixEcho(folder)
    try:
        results.append(bench_worker_part())
        with tw.LocalCluster(devices=["cpu:0"], worker_threads=THREADS) as c:  # (as the compile group's)
            results.extend(bench_roundtrip(c.address, echo, ipc_echo, ipc_spinning, unix_echo))
            results.extend(bench_dispatcher_cpu(c.address, c.services["dispatcher"].proc.pid))
            for k in (1, 10):
                r = bench_step_vs_torch(c.address, k)
                if r is not None:
                    results.append(r)
            results.append(bench_bulk(c.address))
        with tw.LocalCluster(devices=["cpu:0", "cpu:1"], autograd=False, collectives=False) as c:
            results.append(bench_move(c.address))
    finally:
        echo.close()
        ipc_echo.close()
        ipc_spinning.close()
        unix_echo.close()
        shutil.rmtree(folder, ignore_errors=True)
    return results
