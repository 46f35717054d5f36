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


def device_value(t):
    """A new tensor of ``t``'s value that only the device has (a clone, recorded now, that the client neither holds
    nor knows): what the tests that need a device's value start from, since a clone of a value the client holds is
    the client's too (``known_values.HELD_OPS``)."""
    s = t._s
    c = t.clone()
    if c._id in s._lazy:
        s._materialize(c._id)
    s._known.forget({c._id})
    return c
