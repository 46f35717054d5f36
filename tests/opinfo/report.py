"""``python -m tests.opinfo.report``: run torch's op_db against tensorwire and print the counts.

Every public float32 entry with all its samples by default (``--limit N``: the first N samples an entry; ``--dtype
int64``: another dtype; ``--list wrong``: name each entry with that status and its first such sample; ``--not-yet``:
print the test's ``NOT_YET`` set for the current results; ``--grad``: the gradient check, over the entries with
autograd that pass forward). Starts its own local cluster. Needs torch and
expecttest.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def run(dtype_name: str = "float32", limit: int | None = None, only: list[str] | None = None,
        grad: bool = False) -> list:
    """Every public entry's :class:`~tests.opinfo.harness.EntryResult` at ``dtype_name`` on a fresh local cluster.

    ``grad``: the gradient check (:mod:`.gradients`) instead, over the entries whose OpInfo supports autograd and
    that pass forward with every sample (forward runs first)."""
    import torch

    import tensorwire as tw

    from . import gradients, harness

    dtype = getattr(torch, dtype_name)
    entries = harness.public_entries(dtype)
    if only:
        entries = [op for op in entries if harness.entry_name(op) in only]
    if grad:
        entries = [op for op in entries if gradients.differentiable(op)]
    with tw.LocalCluster(devices=["cpu:0"]) as cluster:
        s = tw.connect(cluster.address)
        try:
            if not grad:
                return [harness.run_entry(op, dtype, limit) for op in entries]
            passing = [op for op in entries if harness.run_entry(op, dtype, limit).status == "ok"]
            return [gradients.run_grad_entry(op, dtype, limit) for op in passing]
        finally:
            s.close()
            tw.set_session(None)


def counts_table(results: list) -> str:
    """The entries and samples by status, as a markdown table."""
    from .harness import STATUSES

    entries = Counter(r.status for r in results)
    samples = Counter(o.status for r in results for o in r.outcomes)
    n, m = len(results), sum(samples.values())
    rows = ["| status | entries | share | samples |", "|---|---|---|---|"]
    for s in STATUSES:
        rows.append(f"| {s} | {entries[s]} | {100 * entries[s] / max(n, 1):.0f}% | {samples[s]} |")
    rows.append(f"| total | {n} | | {m} |")
    return "\n".join(rows)


def not_yet_source(results: list) -> str:
    """The body of the test's ``NOT_YET`` set: the entries that are not ok, by status, packed into lines."""
    lines = []
    for status in ("missing", "unsupported", "error"):
        names = [f'"{r.entry}",' for r in sorted(results, key=lambda r: r.entry) if r.status == status]
        if not names:
            continue
        lines.append(f"    # {status} ({len(names)})")
        line = "   "
        for n in names:
            if len(line) + 1 + len(n) > 118:
                lines.append(line)
                line = "   "
            line += " " + n
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description="torch's op_db against tensorwire: counts by status")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--limit", type=int, default=None, help="samples per entry (default: all)")
    p.add_argument("--list", action="append", default=[], help="list the entries with this status")
    p.add_argument("--only", action="append", default=None, help="run this entry only (repeatable)")
    p.add_argument("--not-yet", action="store_true", help="print the NOT_YET set for these results")
    p.add_argument("--grad", action="store_true",
                   help="gradients against torch's (entries with autograd that pass forward)")
    args = p.parse_args()
    t0 = time.perf_counter()
    results = run(args.dtype, args.limit, args.only, args.grad)
    took = time.perf_counter() - t0
    for status in args.list:
        for r in results:
            if r.status == status:
                print(f"{r.entry} [{r.target}]: {r.reason()}")
    if args.not_yet:
        print(not_yet_source(results))
    what = "gradients of the public" if args.grad else "public"
    print(f"torch op_db, {what} {args.dtype} entries, {'all' if args.limit is None else args.limit} samples each "
          f"({took:.0f} s):")
    print(counts_table(results))
    if args.grad:
        from .gradients import NONE_NOTE

        n = sum(1 for r in results for o in r.outcomes if o.detail.startswith(NONE_NOTE))
        print(f"samples that match with a None gradient on one side and zeros on the other: {n}")


if __name__ == "__main__":
    main()
