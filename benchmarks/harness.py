"""Timing helpers and the result table."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


@dataclass
class Result:
    """One benchmark: our time (or throughput) against the peer's, and the target ratio."""

    name: str
    ours: float
    peer: float
    unit: str
    ratio: float  # ours relative to peer, oriented so that the target reads naturally
    target: str
    ok: bool
    note: str = ""


def best_of(fn, repeat: int = 5, number: int = 1) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` rounds of ``number`` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


#: how long a training benchmark warms up: a worker compiles a plan that ran 100 times on a background thread
#: (backends/hot.py), as torch.compile compiles during its warm-up; the measurement starts after that
WARM_S = 3.0


def warm_up(ours, peer, calls: int, seconds: float = WARM_S) -> None:
    """Alternate ``ours`` and ``peer`` for at least ``calls`` calls each and at least ``seconds``."""
    end = time.perf_counter() + seconds
    for i in range(1 << 30):  # bounded by the time
        if i >= calls and time.perf_counter() >= end:
            return
        ours()
        peer()


def interleaved(ours, peer, rounds: int = 7, number: int = 1) -> tuple[float, float]:
    """Alternate ours/peer rounds (so machine noise hits both alike); median seconds per call each."""
    a, b = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(number):
            ours()
        a.append((time.perf_counter() - t0) / number)
        t0 = time.perf_counter()
        for _ in range(number):
            peer()
        b.append((time.perf_counter() - t0) / number)
    return statistics.median(a), statistics.median(b)


def adam_step(functional, model, opt, x, y):
    """One training step of ``model`` on ``(x, y)`` (forward, cross-entropy, ``zero_grad``, backward, ``opt.step()``)
    with ``functional`` (``tw.nn.functional`` or ``torch.nn.functional``); returns the loss. The training
    benchmarks run the same step on both sides."""
    loss = functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def every(step, k: int):
    """``k`` calls of ``step`` reading the last one's loss back (``.item()``), as a loop that logs it every k."""
    def run():
        for _ in range(k - 1):
            step()
        step().item()
    return run


def table(results: list[Result]) -> str:
    lines = ["| benchmark | tensorwire | peer | ratio | target | met |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.name} | {r.ours:.4g} {r.unit} | {r.peer:.4g} {r.unit} | {r.ratio:.2f}x | {r.target} | "
                     f"{'yes' if r.ok else 'no'} |")
    notes = [f"- {r.name}: {r.note}" for r in results if r.note]
    return "\n".join(lines + ([""] + notes if notes else []))
