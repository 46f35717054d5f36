"""Scheduling: which slots of a fragment become buffers, and which are computed inside their consumers' kernels.

* Elementwise ops and sources (``full``, ``arange``, random) inline into their single consumer.
* Movement chains over buffers are views and inline into every consumer (index arithmetic, no copy).
* A reduction inlines its elementwise prologue into its loop, and into its consumer (the epilogue) when that
  consumer reads each result once and is not itself a reduction.
* Row kernels (``Options.row_fusion``): an elementwise buffer reading reductions over its own rows broadcast back
  (softmax, layer_norm) takes those reductions in; it computes them per row before walking the row.
* Index ops, scans and matmul are kernels of their own; their inputs may be inlined (matmul takes views only).
  Ops the device runs itself (``Options.host_ops``) and the worker's own ops read buffers.
* Kept values that feed one elementwise kernel of their own shape (``Options.multi_output``): that kernel computes
  and stores them too, so it has several outputs (an optimizer's update: the new moments and the new parameter in
  one pass, not three kernels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .elementwise import RULES, SOURCES
from .kernels import STORE_KERNELS, VALUE_KERNELS
from .reduce import REDUCE, reduce_axes
from .views import MOVEMENT


@dataclass
class Options:
    """What the target device wants from the lowering."""

    host_ops: frozenset = frozenset()  # ops the device runs itself (BLAS matmul)
    host_views: bool = False           # the host makes views (numpy): movement chains feeding host steps
    acc64: bool = False                # float32 sums accumulate in float64 (cheap on CPUs)...
    acc_block: int = 0                 # ...> 0: in float32 over blocks this long, the blocks' sums in float64
    split_min: int = 16384             # reductions this long over few outputs split in two stages...
    split_outputs: int = 16            # ...when they have fewer outputs than this
    chunk: int = 4096                  # elements per first-stage work item
    max_chunks: int = 64
    row_fusion: bool = False           # row reductions broadcast back over their rows fuse into one kernel a row
    tile: int = 0                      # > 0: matmul as work groups of tile x tile items sharing operand slabs
    group: int = 0                     # > 0: long reductions as work groups of this many items (a tree at the end)
    vector: int = 0                    # > 0: contiguous float32 loops as vectors of this many lanes (vectorize.py)
    lane_bytes: int = 0                # > 0: an elementwise item computes this many bytes of its output (lanes.py)
    multi_output: bool = False         # kept values computed and stored by the elementwise kernel they feed
    #: the strides, dims and broadcast divisors of elementwise index arithmetic (``gid % C`` for a bias, a permute's
    #: strides) as size parameters: a real division unless the runtime writes the size back in (the CPU does while
    #: a structure keeps it: ``CRuntime.specialise``)
    size_strides: bool = False
    #: coordinates the index arithmetic divides out become loops (the CPU): an elementwise kernel whose element index
    #: is divided by a size d (a per-channel broadcast's ``(i // HW) % C``) runs one item per d elements, its inner
    #: loop a unit-stride walk; a reduction over several runs of axes (batch norm's dims (0, 2, 3)) loops over the
    #: outer runs and reduces the innermost run in a unit-stride loop. No division is left in an inner loop.
    nest: bool = False


def _inline_inputs(op: str, opts: Options) -> str:
    """How a consumer takes its inputs: "expr" (any inlined expression), "view" (views of buffers), "buffer"."""
    if op in opts.host_ops or op not in KNOWN_OPS:
        return "buffer"
    if op == "matmul":
        return "view"
    return "expr"


def schedule(steps: list, keep: set, opts: Options) -> tuple[dict, set, set, RowGroups, set]:
    """``(producer of each slot, the slots that are buffers, the buffers the host makes as views, the row kernels,
    the buffers their consumer's kernel stores)``."""
    prod = {s.out: s for s in steps if s.out >= 0}
    consumers: dict[int, list] = {}
    for s in steps:
        for x in dict.fromkeys(s.ins):
            consumers.setdefault(x, []).append(s)
    inline: set[int] = set()
    # single-consumer expressions, in reverse: a reduce's epilogue check reads the decisions downstream
    for st in reversed(steps):
        o, cons = st.out, consumers.get(st.out, [])
        if o < 0 or o in keep or st.op not in KNOWN_OPS or st.op in opts.host_ops or len(cons) != 1:
            continue
        if _inline_inputs(cons[0].op, opts) != "expr":
            continue
        if st.op in REDUCE:
            if _epilogue_ok(o, consumers, prod, inline):
                inline.add(o)
        elif st.op in RULES or st.op in SOURCES or st.op in MOVEMENT or st.op == "cat":
            inline.add(o)
    # movement chains over buffers are views: they inline into every consumer that is not a host step
    pure: set[int] = set()
    for st in steps:
        o = st.out
        if o < 0 or st.op not in MOVEMENT or (st.ins[0] in inline and st.ins[0] not in pure):
            continue
        pure.add(o)
        cons = consumers.get(o, [])
        if o not in keep and cons and all(_inline_inputs(c.op, opts) != "buffer" for c in cons):
            inline.add(o)
    # a host step reads buffers; on a host that views memory (numpy), views feeding it are made there
    host_views: set[int] = set()
    if opts.host_views:
        def mark(slot):
            if slot in pure and slot not in host_views:
                host_views.add(slot)
                inline.discard(slot)
                mark(prod[slot].ins[0])
        for st in steps:
            if st.op in opts.host_ops or st.op not in KNOWN_OPS:
                for x in st.ins:
                    mark(x)
        for o in keep:
            mark(o)
    rows = _row_groups(steps, prod, consumers, inline, keep, opts) if opts.row_fusion else RowGroups()
    buffers = {x for x in consumers if x not in prod} | {o for o in prod if o not in inline}
    carried = _carried(steps, consumers, inline, keep, host_views, rows) if opts.multi_output else set()
    return prod, buffers, host_views, rows, carried


def _same_shape_read(c, slot) -> bool:
    """Whether elementwise step ``c`` reads ``slot`` element for element (no broadcast): at its own index."""
    shape = tuple(c.shape)
    return c.op in RULES and all(tuple(m[0]) == shape for x, m in zip(c.ins, c.in_meta) if x == slot)


def _carried(steps, consumers, inline: set, keep: set, host_views: set, rows: RowGroups) -> set[int]:
    """The kept elementwise buffers whose only reader is an elementwise kernel of their shape (directly or through
    values inlined into it), reading them at its own index: that kernel computes and stores them as well."""
    kernel_of: dict[int, int] = {}  # slot -> the plain elementwise kernel computing it at that kernel's index
    carried: set[int] = set()
    for st in reversed(steps):  # a slot's reader decides first
        o = st.out
        if o < 0 or st.op not in RULES or o in rows.roots or o in host_views or math.prod(st.shape) == 0:
            continue
        cons = consumers.get(o, [])
        at = kernel_of.get(cons[0].out) if len(cons) == 1 and _same_shape_read(cons[0], o) else None
        if o in inline:
            if at is not None:
                kernel_of[o] = at
        elif o in keep and at is not None:
            carried.add(o)
            kernel_of[o] = at
        else:
            kernel_of[o] = o
    return carried


@dataclass
class RowGroups:
    """Kernels that run a row per work item: ``roots`` (slot -> row length) and the row reductions they compute
    before walking their row (softmax: the max, then the sum of exponentials, then the row itself)."""

    roots: dict = field(default_factory=dict)
    reduces: set = field(default_factory=set)


def _is_row_reduce(st, shape) -> bool:
    nd = len(shape)
    return (st.op in REDUCE and tuple(st.in_meta[0][0]) == shape and reduce_axes(st) == (nd - 1,)
            and tuple(st.shape) == shape[:-1] + (1,))


def _row_groups(steps, prod, consumers, inline: set, keep: set, opts: Options) -> RowGroups:
    """Find elementwise buffers whose expression reads reductions over their own rows (broadcast back): the
    reductions, and the elementwise values between them that nothing outside reads, join the row kernel (adds to
    ``inline``). A value read twice in the row is recomputed, not stored: the row is in cache."""
    groups = RowGroups()
    claimed: set[int] = set()
    for st in reversed(steps):  # the last elementwise buffer first: it takes in the longest chain of its row
        root = st.out
        shape = tuple(st.shape)
        if root < 0 or root in inline or root in claimed or st.op not in RULES or len(shape) < 1 or shape[-1] < 2:
            continue
        rows = math.prod(shape) // shape[-1]
        if shape[-1] >= opts.split_min and rows < opts.split_outputs:
            continue  # a long row over few rows splits its reductions instead
        reds, ews, seen = set(), set(), set()
        stack = list(st.ins)
        while stack:
            x = stack.pop()
            if x in seen or x not in prod:
                continue
            seen.add(x)
            p = prod[x]
            if x in inline:
                stack.extend(p.ins)
            elif x in keep or x in claimed:
                continue
            elif _is_row_reduce(p, shape):
                reds.add(x)
                stack.extend(p.ins)
            elif p.op in RULES and tuple(p.shape) == shape:
                ews.add(x)
                stack.extend(p.ins)
        members = reds | ews
        inside = {root} | members | (seen & inline)
        changed = True
        while changed:  # every reader of a member, directly or through inlined values, must be in the row kernel
            bad = {x for x in inside - {root} if any(c.out not in inside for c in consumers.get(x, []))}
            inside -= bad
            changed = bool(bad)
        members &= inside
        if not members & reds:
            continue
        inline |= members
        claimed |= members | {root}
        groups.roots[root] = shape[-1]
        groups.reduces |= members & reds
    return groups


def _epilogue_ok(slot, consumers, prod, inline) -> bool:
    """A reduce's result may be computed inside its consumer's kernel: each result read once, by a kernel that
    is not itself a reduction (its loop would recompute ours per element)."""
    n = math.prod(prod[slot].shape)
    cur = slot
    while True:
        cons = consumers.get(cur, [])
        if len(cons) != 1:
            return False
        c = cons[0]
        if c.op in REDUCE or not (c.op in RULES or c.op in ("reshape", "copy", "permute", "expand")):
            return False
        if math.prod(c.shape) != n:
            return False
        if c.out not in inline:
            return True
        cur = c.out


#: every op a kernel can compute (the rest run as host steps: the device's own kernels or the worker's ops)
KNOWN_OPS: frozenset[str] = (frozenset(RULES) | frozenset(SOURCES) | MOVEMENT | REDUCE | frozenset(VALUE_KERNELS)
                             | frozenset(STORE_KERNELS))
