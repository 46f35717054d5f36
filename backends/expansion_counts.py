"""How big a fragment's expansion with one set of native composites is, read off its plan made with another set.

A compiling device decides how to run a new fragment (compile it before its first run, compile it in the background
once it is hot, or keep interpreting it) from the size of its expansion with the composites it *compiles*
(``backend.native``), while the plan that runs first is expanded with the composites its numpy kernels run whole
(``Device.native_for``). Expanding the fragment twice made a compiling CPU plan every new fragment at ~2.7x the
numpy backend's cost (a char-level transformer step of 480 nodes: 11.6 ms against 4.3 ms of CPU time), which a
program whose shapes change every step pays every step (issue 37: the compiler must never make a program slower).

So ``executor.compile_plan`` plans once, with the set that runs, and asks :func:`counts_as` for the other set's
size: a node whose expansion met no composite the two sets treat differently expands alike in both (its steps are
counted from the plan); any other node is expanded alone with the other set, counting only, and the count is kept
for the next fragment with the same op, input metas and attributes (a model's parameters, layers and optimizer
updates repeat).
"""

from __future__ import annotations

import math

from tensorwire.protocol.graph import ExpandingBuilder, Value, attrs_key

#: counts kept: (op, native set, input metas, attributes key) -> (steps, elements, bytes)
_COUNTS: dict = {}
MAX_COUNTS = 8192


class StepCounts:
    """An expansion's size without its steps: ``len()`` is its step count, ``elements`` the elements its steps make
    (what ``Device.hot_runs``/``compiles_when_hot`` weigh), ``nbytes`` their bytes."""

    __slots__ = ("n", "elements", "nbytes")

    def __init__(self, n: int, elements: int, nbytes: int):
        self.n, self.elements, self.nbytes = n, elements, nbytes

    def __len__(self) -> int:
        return self.n


def _size(shape, dtype) -> tuple[int, int]:
    n = math.prod(shape)
    return n, n * (dtype.itemsize if dtype is not None else 8)


def counts_as(native: frozenset, other: frozenset, plan, nodes: list, ext_metas: list, met: list) -> StepCounts | None:
    """The size of ``nodes``' expansion with ``native``, from ``plan``, their expansion with ``other``; ``met[j]``:
    the composites node j's expansion met. None when a node cannot be counted alone (then expand the fragment)."""
    differ = native ^ other
    odd = [j for j, m in enumerate(met) if m and not differ.isdisjoint(m)]  # (nodes that expand differently)
    skip = frozenset(odd)
    steps = plan.program.steps
    n, elements, nbytes = len(steps), 0, 0
    prod = math.prod
    for st in steps:
        if skip and st.origin in skip:
            n -= 1
            continue
        e = prod(st.shape)
        elements += e
        nbytes += e * (st.dtype.itemsize if st.dtype is not None else 8)
    for j in odd:
        c = _node_counts(native, nodes[j], plan, ext_metas)
        if c is None:
            return None
        n += c[0]
        elements += c[1]
        nbytes += c[2]
    return StepCounts(n, elements, nbytes)


def _node_counts(native: frozenset, node: list, plan, ext_metas: list) -> tuple[int, int, int] | None:
    """(steps, elements, bytes) of one node expanded alone with ``native`` (kept in :data:`_COUNTS`)."""
    op, refs, attrs = node[0], node[1], node[2] or {}
    metas = []
    for r in refs:
        m = ext_metas[-r - 1] if r < 0 else plan.node_meta[r]
        if not isinstance(m, tuple):  # a failed input (the plan then is not one the device tiers anyway)
            return None
        metas.append((tuple(m[0]), m[1]))
    try:
        key = (op, native, tuple(metas), attrs_key(op, attrs))
        c = _COUNTS.get(key)
    except TypeError:  # unhashable attributes (a peer's junk): the plan would have failed the node
        return None
    if c is not None:
        return c
    g = ExpandingBuilder(native)
    try:
        g.op(op, *[Value(s, d, -k - 1) for k, (s, d) in enumerate(metas)], **attrs)
    except Exception:  # noqa: BLE001 - the plan made it, so this does not happen; be safe: expand the fragment
        return None
    n = elements = nbytes = 0
    for _, _, _, shape, dtype, _ in g.nodes:
        e, b = _size(shape, dtype)
        n += 1
        elements += e
        nbytes += b
    if len(_COUNTS) >= MAX_COUNTS:
        _COUNTS.clear()
    c = _COUNTS[key] = (n, elements, nbytes)
    return c
