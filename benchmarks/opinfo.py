"""``python -m benchmarks --only opinfo``: torch's operator database (op_db) against tensorwire (issue 33).

Not a timing: how much of PyTorch's public operator surface gives torch's answers. Every public entry of
``torch.testing._internal.common_methods_invocations.op_db`` at float32, int64 and bool, with all its samples, run by
``tests/opinfo/harness.py`` on a fresh local cluster; one row a dtype: the entries whose every sample matches torch
(ours) out of the entries (the peer, torch itself, passes them all). The target is no silent error: not one sample
with a value, shape or dtype that differs from torch's. The counts table by status is printed first. Needs torch
and expecttest (no row without them).
"""

from __future__ import annotations

import sys
from collections import Counter

from .harness import Result

DTYPES = ("float32", "int64", "bool")


def _row(dtype: str, results: list) -> Result:
    entries = Counter(r.status for r in results)
    samples = Counter(o.status for r in results for o in r.outcomes)
    n, ok = len(results), entries["ok"]
    counts = ", ".join(f"{s} {entries[s]}" for s in ("ok", "missing", "unsupported", "error", "wrong"))
    return Result(f"op_db public {dtype} entries matching torch on every sample", ok, n, "entries", ok / max(n, 1),
                  "0 wrong", entries["wrong"] == 0,
                  f"entries: {counts}; samples: {sum(samples.values())}, of which {samples['wrong']} wrong")


def run_all() -> list[Result]:
    try:
        import expecttest  # noqa: F401  (torch's op_db imports it)
        import torch  # noqa: F401
    except ImportError as e:
        print(f"opinfo: skipped (no row): {e} (pip install torch expecttest)", file=sys.stderr)
        return []
    from tests.opinfo.report import counts_table, run

    rows = []
    for dtype in DTYPES:
        results = run(dtype)
        print(f"op_db, public {dtype} entries, all samples:\n{counts_table(results)}\n")
        rows.append(_row(dtype, results))
    return rows
