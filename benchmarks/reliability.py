"""Issue 16's fairness figures: a victim session's small-op latency next to a noisy neighbour on the same worker.

The peer is the same victim with the neighbour idle (same cluster, same session, measured in the same run), so the
ratio reads "how much slower a tiny op gets while someone else misbehaves". Two neighbours:

- one running a single long op (``ones(1).expand(n).sum()``, sized to ~10 s on this machine), and
- one holding its whole memory quota and asking for more in a loop (each ask refused with ``QuotaExceeded``).
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

import tensorwire as tw

from .harness import Result

LONG_OP_S = float(os.environ.get("TW_BENCH_LONG_OP_S", "10"))
QUOTA = "256MiB"


def _victim_latencies(victim: tw.Session, seconds: float, keep_going=lambda: True) -> list[float]:
    """Seconds per ``(x + 1).numpy()`` on a 4-element tensor, for ``seconds`` or while ``keep_going()``."""
    x = tw.ones(4, session=victim)
    (x + 1).numpy()
    lat = []
    end = time.perf_counter() + seconds
    for _ in range(10_000_000):
        if time.perf_counter() >= end or not keep_going():
            break
        t0 = time.perf_counter()
        (x + 1).numpy()
        lat.append(time.perf_counter() - t0)
    return lat


def _pct(lat: list[float], q: float) -> float:
    return float(np.percentile(lat, q)) * 1e3


def _long_op_size(s: tw.Session) -> int:
    n0 = 1 << 28
    t0 = time.perf_counter()
    tw.ones(1, session=s).expand(n0).sum().item()
    took = max(time.perf_counter() - t0, 1e-3)
    return int(min(1 << 42, n0 * LONG_OP_S / took))


def bench_long_op_neighbour(c: tw.LocalCluster) -> list[Result]:
    noisy, victim = tw.Session(c.address), tw.Session(c.address)
    try:
        alone = _victim_latencies(victim, 3.0)
        n = _long_op_size(noisy)
        took: dict = {}

        def long():
            t0 = time.perf_counter()
            tw.ones(1, session=noisy).expand(n).sum().item()
            took["s"] = time.perf_counter() - t0

        th = threading.Thread(target=long, daemon=True)
        th.start()
        busy = _victim_latencies(victim, 600.0, th.is_alive)
        th.join()
    finally:
        noisy.close()
        victim.close()
    note = (
        f"neighbour's op ran {took.get('s', 0):.1f} s; victim p50 {_pct(busy, 50):.2f} ms vs "
        f"{_pct(alone, 50):.2f} ms alone, max {max(busy) * 1e3:.1f} ms; {len(busy)} ops"
    )
    return [
        Result(
            "victim's small op p99 while another session runs a ~10 s op, vs alone (latency)",
            _pct(busy, 99),
            _pct(alone, 99),
            "ms",
            _pct(busy, 99) / _pct(alone, 99),
            "report",
            True,
            note,
        ),
        Result(
            "victim's small op p50 while another session runs a ~10 s op, vs alone (latency)",
            _pct(busy, 50),
            _pct(alone, 50),
            "ms",
            _pct(busy, 50) / _pct(alone, 50),
            "<= 3x",
            _pct(busy, 50) <= 3 * _pct(alone, 50),
        ),
    ]


def bench_quota_neighbour(c: tw.LocalCluster) -> list[Result]:
    hog, victim = tw.Session(c.address), tw.Session(c.address)
    stop = threading.Event()
    refused = [0]
    try:
        alone = _victim_latencies(victim, 3.0)
        held = [tw.randn(16 << 20, session=hog) for _ in range(3)]  # 3 x 64 MiB of its 256 MiB
        hog.synchronize()

        def ask_more():
            for _ in range(1_000_000):
                if stop.is_set():
                    return
                try:
                    tw.randn(32 << 20, session=hog).sum().item()  # 128 MiB more: refused
                except tw.QuotaExceeded:
                    refused[0] += 1

        th = threading.Thread(target=ask_more, daemon=True)
        th.start()
        busy = _victim_latencies(victim, 5.0)
        stop.set()
        th.join(30)
        del held
    finally:
        hog.close()
        victim.close()
    note = (
        f"the neighbour holds 192 MiB of its {QUOTA} and was refused {refused[0]} times meanwhile; victim p50 "
        f"{_pct(busy, 50):.2f} ms vs {_pct(alone, 50):.2f} ms alone"
    )
    return [
        Result(
            f"victim's small op p99 while another session holds its quota ({QUOTA}) and asks for more, vs "
            f"alone (latency)",
            _pct(busy, 99),
            _pct(alone, 99),
            "ms",
            _pct(busy, 99) / _pct(alone, 99),
            "report",
            True,
            note,
        )
    ]


def run_all() -> list[Result]:
    with tw.LocalCluster(devices=["cpu:0"], autograd=False, session_memory=QUOTA) as c:
        out = bench_long_op_neighbour(c)
        out += bench_quota_neighbour(c)
    return out


if __name__ == "__main__":
    from .harness import table

    print(table(run_all()))
