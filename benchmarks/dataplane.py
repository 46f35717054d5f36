"""Issue 30's benchmarks: the data plane. Single-device work on a direct channel against the relay through the
dispatcher, the one-op round trip against a raw pyzmq echo, and the dispatcher's CPU time per step on each path."""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

import tensorwire as tw

from .core import Echo
from .harness import Result, adam_step, interleaved
from .training import THREADS, _data, _models

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _session(address: str, direct: bool) -> tw.Session:
    s = tw.Session(address)
    s._plane.enabled = direct  # (per session: both paths measured side by side in one run)
    return s


def _roundtrip(address: str, echo: Echo, direct: bool) -> tuple[float, float]:
    s = _session(address, direct)
    payload = b"x" * 16
    with tw.use_session(s):
        x = tw.ones(4)
        for _ in range(300):
            (x + 1).numpy()
            echo.roundtrip(payload)
        ours, peer = interleaved(lambda: (x + 1).numpy(), lambda: echo.roundtrip(payload), rounds=9, number=300)
        path = s.cluster_status()["data_plane"]["cpu:0"]["path"]
    s.close()
    assert path == ("direct" if direct else "relay"), path
    return ours, peer


def bench_roundtrip(address: str, echo: Echo, ipc_echo: Echo) -> list[Result]:
    """``(x + 1).numpy()`` on a direct channel (a unix socket on a local cluster), and through the relay (TCP to
    the dispatcher), each against a raw DEALER/ROUTER echo between two processes on the same transport."""
    ours, peer = _roundtrip(address, ipc_echo, True)
    r = ours / peer
    out = [Result("one-op round trip `(x + 1).numpy()` on a direct channel vs raw pyzmq DEALER/ROUTER echo of 16 B "
                  "between two processes, both on a unix socket", ours * 1e6, peer * 1e6, "us", r, "<= 2.0x",
                  r <= 2.0)]
    ours, peer = _roundtrip(address, echo, True)
    out.append(Result("the same direct round trip vs the echo on TCP loopback", ours * 1e6, peer * 1e6, "us",
                      ours / peer, "report", True))
    ours, peer = _roundtrip(address, echo, False)
    out.append(Result("the same round trip through the dispatcher (the relay, TCP) vs the TCP echo", ours * 1e6,
                      peer * 1e6, "us", ours / peer, "report", True, "issue 30 measured 4.5-5.7x before the change"))
    return out


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
    try:
        with tw.LocalCluster(devices=["cpu:0"], worker_threads=THREADS) as c:  # (as the compile group's)
            results.extend(bench_roundtrip(c.address, echo, ipc_echo))
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
        shutil.rmtree(folder, ignore_errors=True)
    return results
