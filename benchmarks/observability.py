"""Issue 18's observability figures: what the profiler costs off and on.

The code path before the profiler existed is not available to run beside it, so the rows are:

- the profiler's off-path check measured on its own: the one ``session._prof is not None`` test each shipped batch
  pays (ops pay nothing: the profiler swaps timed methods in on the session instance only while it is open), per
  batch, against an empty loop of the same length (the peer);
- a loop of small ops with the profiler compiled in but off, against the same loop with a profile open (the peer):
  how much a profile slows a program down, and, read the other way, that the off path carries none of that work.
"""

from __future__ import annotations

import timeit

import tensorwire as tw

from .harness import Result, interleaved

N_OPS = 2000


def bench_off_check() -> Result:
    """Nanoseconds per batch of the check ``_send_batch`` runs (the attribute load and ``is not None``)."""
    s = type("S", (), {"_prof": None})()  # an object with the session's attribute, as the session has it
    n = 2_000_000
    check = min(timeit.repeat("s._prof is not None", globals={"s": s}, number=n, repeat=5)) / n
    empty = min(timeit.repeat("pass", number=n, repeat=5)) / n
    return Result(
        "profiler off: the per-batch check (`session._prof is not None`) vs an empty statement",
        check * 1e9,
        empty * 1e9,
        "ns",
        check / max(empty, 1e-12),
        "report",
        True,
        "paid once per shipped batch, never per op; a batch's round trip is ~100 us: < 0.1%",
    )


def bench_off_vs_on(n: int = N_OPS) -> Result:
    x = tw.ones(4)

    def loop():
        y = x
        for _ in range(n):
            y = y + 1
        y.numpy()

    def profiled():
        with tw.profiler.profile():
            loop()

    loop()  # the plan compiled on the worker, for both
    profiled()
    off, on = interleaved(loop, profiled, rounds=5)
    r = off / on
    return Result(
        f"{n:,} recorded ops then numpy(): profiler off vs a profile open around the same loop (time)",
        off / n * 1e6,
        on / n * 1e6,
        "us/op",
        r,
        "< 1x (off is cheaper)",
        r < 1,
        "on: a span per op on the client, per kernel on the worker, collected at the end",
    )


def run_all() -> list[Result]:
    results = [bench_off_check()]
    with tw.LocalCluster(devices=["cpu:0"]) as c:
        s = tw.connect(c.address)
        results.append(bench_off_vs_on())
        s.close()
    return results
