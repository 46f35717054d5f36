"""Counting a session's calls of one of its methods while a block runs: ops at ``record``, round trips at ``_flush``,
answers waited for at ``_wait``."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def counted(session, method: str):
    """Counts the calls of ``session.<method>`` while the block runs (``n[0]``; ``ops``: each call's first
    argument)."""
    n, ops = [0], []
    orig = getattr(session, method)

    def wrapper(*a, **k):
        n[0] += 1
        ops.append(a[0] if a else None)
        return orig(*a, **k)

    setattr(session, method, wrapper)
    try:
        yield n, ops
    finally:
        delattr(session, method)
