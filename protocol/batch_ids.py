"""A batch's output ids and its temporaries, as the wire carries them.

A batch names each node's output id. Eager batches list them (``"outs": [id, ...]``). A replayed compiled graph
(``tensorwire.jit``) reserves one block of ids, so it may send the first instead (``"out_first": id``: node ``j``
is ``id + j``), and name the nodes whose values only the batch itself reads (``"temps": [[lo, hi], ...]``, node
index ranges, ``hi`` excluded, increasing and disjoint). A temporary gets no handle on the dispatcher and no entry
on the worker: its buffer is freed once consumed, as the buffer of an output released in the same batch would be,
but without the ids travelling and being registered and dropped one by one (a 10,000-op loop replayed sent
20,000 ids a call before; now two numbers). Its id still names it in errors.
"""

from __future__ import annotations

from .errors import ProtocolError

_INT = {int}

def is_int_list(x) -> bool:
    """A list of ints (bools are not ids). (``issuperset`` takes the types as they come, where ``set(...) ==`` first
    builds a set of them: ~10-40% less a list, the short lists of a direct batch's ids the most.)"""
    return type(x) is list and _INT.issuperset(map(type, x))


def temp_ranges(nodes) -> list[list[int]]:
    """The ``temps`` field for the node indices ``nodes`` (ascending)."""
    out: list[list[int]] = []
    for j in nodes:
        if out and out[-1][1] == j:
            out[-1][1] = j + 1
        else:
            out.append([j, j + 1])
    return out


def check_temps(temps, n: int) -> list[list[int]]:
    """``temps`` validated against a batch of ``n`` nodes (ProtocolError when malformed); ``[]`` when absent."""
    if temps is None:
        return []
    if type(temps) is not list or len(temps) > n:
        raise ProtocolError("batch 'temps' must be a list of [first, end) node ranges")
    prev = 0
    for r in temps:
        if not (type(r) is list and len(r) == 2 and type(r[0]) is int and type(r[1]) is int
                and prev <= r[0] < r[1] <= n):
            raise ProtocolError(f"batch 'temps' must hold increasing, disjoint [first, end) ranges of node indices "
                                f"below {n}")
        prev = r[1]
    return temps


def kept_nodes(n: int, temps: list[list[int]]) -> list[int]:
    """The node indices of a batch of ``n`` nodes that are not temporaries (``temps`` as checked above)."""
    if not temps:
        return list(range(n))
    out: list[int] = []
    lo = 0
    for a, b in temps:
        out.extend(range(lo, a))
        lo = b
    out.extend(range(lo, n))
    return out


def out_ids(h: dict, n: int | None):
    """The batch's output ids: its ``outs`` list, or the block from ``out_first`` for ``n`` nodes (a ``range``).
    ``n`` None: not known (the batch names no plan); then only ``outs`` counts."""
    first = h.get("out_first")
    if first is None or n is None:
        return h.get("outs") or []
    if type(first) is not int or "outs" in h:
        raise ProtocolError("batch 'out_first' must be an int, and comes instead of 'outs'")
    return range(first, first + n)


__all__ = ["check_temps", "is_int_list", "kept_nodes", "out_ids", "temp_ranges"]
