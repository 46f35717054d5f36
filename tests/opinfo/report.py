"""``python -m tests.opinfo.report``: run torch's op_db against tensorwire and print the counts.

Every public float32 entry with all its samples by default (``--limit N``: the first N samples an entry; ``--dtype
int64``: another dtype; ``--list wrong``: name each entry with that status and its first such sample; ``--not-yet``:
print the test's ``NOT_YET`` set for the current results). Starts its own local cluster. Needs torch and
expecttest.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def run(dtype_name: str = "float32", limit: int | None = None, only: list[str] | None = None) -> list:
    """Every public entry's :class:`~tests.opinfo.harness.EntryResult` at ``dtype_name`` on a fresh local cluster."""
    import torch

    import tensorwire as tw

    from . import harness

    entries = harness.public_entries(getattr(torch, dtype_name))
    if only:
        entries = [op for op in entries if harness.entry_name(op) in only]
    with tw.LocalCluster(devices=["cpu:0"]) as cluster:
        s = tw.connect(cluster.address)
        try:
            return [harness.run_entry(op, getattr(torch, dtype_name), limit) for op in entries]
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
    args = p.parse_args()
    t0 = time.perf_counter()
    results = run(args.dtype, args.limit, args.only)
    took = time.perf_counter() - t0
    for status in args.list:
        for r in results:
            if r.status == status:
                print(f"{r.entry} [{r.target}]: {r.reason()}")
    if args.not_yet:
        print(not_yet_source(results))
    print(f"torch op_db, public {args.dtype} entries, {'all' if args.limit is None else args.limit} samples each "
          f"({took:.0f} s):")
    print(counts_table(results))


if __name__ == "__main__":
    main()
