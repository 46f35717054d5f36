"""Reductions: accumulator dtypes, initial values, and the loops that accumulate (split in two stages when long).

Float max/min keep a NaN flag beside a plain max so both reductions vectorise; float32 sums accumulate in float64
where the device says it is cheap (``Options.acc64``), in float32 blocks of ``Options.acc_block`` elements whose
sums are added in float64 where the device asks for it (the C target: the block loop vectorises at float32
width). With ``Options.vector`` a float32 reduction loop over contiguous elements runs on vectors (a vector
accumulator, its lanes combined at the end, a scalar tail).
"""

from __future__ import annotations

import math

import numpy as np

from tensorwire.protocol import dtypes as D

from . import ir
from .ir import INDEX, X, alu, cast, const, iconst, var, where
from .vectorize import vectorize
from .views import Idx

REDUCE = frozenset({"sum", "prod", "amax", "amin"})


def reduce_axes(st) -> tuple[int, ...]:
    nd = len(st.in_meta[0][0])
    d = st.attrs.get("dims")
    if d is None:
        return tuple(range(nd))
    if not nd:
        return ()
    return tuple(sorted({x % nd for x in ([d] if isinstance(d, int) else d)}))


def _acc_dtype(kb, st) -> D.DType:
    dt = st.dtype
    if st.op in ("sum", "prod"):
        if dt in D.HALF:
            return D.float64 if kb.lw.opts.acc64 else D.float32
        if dt is D.float32 and kb.lw.opts.acc64:
            return D.float64
        return dt
    return D.float32 if dt in D.HALF else dt


def _init(op: str, dt: D.DType) -> X:
    if op == "sum":
        return const(0, dt)
    if op == "prod":
        return const(1, dt)
    big = op == "amin"
    if dt is D.bool_:
        return const(big, dt)
    if dt.is_floating_point:
        return const(float("inf") if big else float("-inf"), dt)
    info = np.iinfo(dt.np)
    return const(info.max if big else info.min, dt)


def combine(op: str, acc: X, x: X) -> X:
    dt = acc.dtype
    if op == "sum":
        return alu("lor", D.bool_, acc, x) if dt is D.bool_ else alu("add", dt, acc, x)
    if op == "prod":
        return alu("land", D.bool_, acc, x) if dt is D.bool_ else alu("mul", dt, acc, x)
    if dt is D.bool_:
        return alu("lor" if op == "amax" else "land", dt, acc, x)
    cmp = "gt" if op == "amax" else "lt"
    if dt.is_floating_point:  # NaN wins (and stays)
        return where(alu("lor", D.bool_, ir.fn("isnan", D.bool_, x), alu(cmp, D.bool_, x, acc)), x, acc)
    return alu("max" if op == "amax" else "min", dt, acc, x)


def _rows(st, axes) -> bool:
    """Whether reduction ``st`` over ``axes`` reduces whole rows of its contiguous input (all axes, or the
    trailing ones): its input is read at ``output * length + r``, so the length may be a size parameter."""
    nd = len(st.in_meta[0][0])
    return axes == tuple(range(nd - len(axes), nd))


def _reduce_in_idx(st, axes, out_idx: Idx, r: X, red_shape, length: X | None = None, kept: X | None = None) -> Idx:
    """The input position for output position ``out_idx`` and flat reduced position ``r`` (``length``: the
    reduced length as an expression, where it is a size parameter; ``kept``: the same of the kept length, the
    stride of a reduction over leading axes)."""
    in_shape = tuple(st.in_meta[0][0])
    nd = len(in_shape)
    kept_axes = [a for a in range(nd) if a not in axes]
    R = math.prod(red_shape) if length is None else length
    if not kept_axes:
        return Idx(in_shape, flat=r, size=out_idx.size)
    if _rows(st, axes):  # trailing axes: rows
        return Idx(in_shape, flat=out_idx.flat * R + r, size=out_idx.size)
    if axes == tuple(range(len(axes))):  # leading axes: columns
        stride = math.prod(in_shape[a] for a in kept_axes) if kept is None else kept
        return Idx(in_shape, flat=r * stride + out_idx.flat, size=out_idx.size)
    keepdim = len(st.shape) == nd
    odims = out_idx.dims
    rdims = Idx(red_shape, flat=r, size=out_idx.size).dims
    dims, ki, ri = [], 0, 0
    for a in range(nd):
        if a in axes:
            dims.append(rdims[ri])
            ri += 1
        else:
            dims.append(odims[a] if keepdim else odims[ki])
            ki += 1
    return Idx(in_shape, dims=dims, size=out_idx.size)


def reduce_loop(kb, op: str, acc_dt: D.DType, name: str, start: X, stop: X, element, lo: int,
                hi: int) -> X:
    """Emit ``acc = op(element(r) for r in [start, stop))``; returns the accumulated value. Float max/min keep a
    NaN flag beside a plain max (two vectorisable reductions) and give NaN when any element was NaN. With
    ``Options.vector`` a float32 loop whose element has a vector form runs on vectors (:func:`_vector_loop`)."""
    acc = kb.fresh("acc")
    guard = op in ("amax", "amin") and acc_dt.is_floating_point
    nan = kb.fresh("nan") if guard else None
    body: list = []
    outer, kb.block = kb.block, body
    try:
        x = element(var(name, INDEX, lo, hi))
    finally:
        kb.block = outer
    W = kb.lw.opts.vector
    if W and acc_dt is D.float32 and not body:
        got = _vector_loop(kb, op, acc, name, start, stop, x, W)
        if got is not None:
            return got
    B = kb.lw.opts.acc_block
    if B and op == "sum" and acc_dt is D.float64 and x.op == "cast" and x.src[0].dtype is D.float32:
        return _blocked_sum(kb, acc, name, start, stop, body, x.src[0], B, lo, hi)
    kb.emit(ir.Let(acc, _init(op, acc_dt)))
    if guard:
        kb.emit(ir.Let(nan, const(False, D.bool_)))
    a = var(acc, acc_dt)
    if guard:
        body.append(ir.Assign(nan, alu("lor", D.bool_, var(nan, D.bool_), ir.fn("isnan", D.bool_, x))))
        body.append(ir.Assign(acc, where(alu("gt" if op == "amax" else "lt", D.bool_, x, a), x, a)))
    else:
        body.append(ir.Assign(acc, combine(op, a, x)))
    if acc_dt is D.bool_:
        red = ((acc, "and" if op in ("prod", "amin") else "or"),)
    else:
        red = ((acc, {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}[op]),)
    kb.emit(ir.Loop(name, start, stop, body, red + (((nan, "or"),) if guard else ())))
    out = var(acc, acc_dt)
    return where(var(nan, D.bool_), const(float("nan"), acc_dt), out) if guard else out


def _blocked_sum(kb, acc: str, name: str, start: X, stop: X, body: list, x: X, B: int, lo: int, hi: int) -> X:
    """The float64 sum of the float32 values ``x`` (the loop ``name``'s element, computed by ``body``) as blocks of
    ``B`` elements summed in float32, each block's sum added in float64: the inner loop vectorises at float32's
    width (twice float64's), and a float32 lane adds only ``B / lanes`` values before its block is widened."""
    blk = kb.fresh("blk")
    part = kb.fresh("accb")
    b = var(blk, INDEX, lo, hi)
    inner = ir.Loop(name, b, alu("min", INDEX, b + B, stop), [*body, ir.Assign(part, alu("add", D.float32,
                                                                                      var(part, D.float32), x))],
                    ((part, "add"),))
    kb.emit(ir.Let(acc, const(0, D.float64)))
    kb.emit(ir.Loop(blk, start, stop, [ir.Let(part, const(0, D.float32)), inner,
                                      ir.Assign(acc, alu("add", D.float64, var(acc, D.float64),
                                                         cast(var(part, D.float32), D.float64)))], step=B))
    return var(acc, D.float64)


def _vector_loop(kb, op: str, acc: str, name: str, start: X, stop: X, x: X, W: int) -> X | None:
    """The float32 reduction of ``x`` (an expression of the loop variable ``name``) with a vector accumulator:
    W elements a step, then the accumulator's lanes combined pairwise, then the last ``(stop - start) % W``
    elements one at a time into ``acc``. ``None`` when ``x`` has no vector form. NaN propagates through
    :func:`combine`'s selects, so max/min need no flag here."""
    xv = vectorize(x, name, W)
    if xv is None:
        return None
    dt = D.float32
    accv = kb.fresh("accv")
    kb.emit(ir.Let(accv, ir.bcast(_init(op, dt), W)))
    whole = start + ((stop + start * -1) // W) * W  # where the vector steps end
    vacc = var(accv, dt, width=W)
    kb.emit(ir.Loop(name, start, whole, [ir.Assign(accv, combine(op, vacc, xv))], step=W))
    lanes = [ir.lane(vacc, k) for k in range(W)]
    while len(lanes) > 1:
        pairs = [combine(op, lanes[k], lanes[k + 1]) for k in range(0, len(lanes) - 1, 2)]
        lanes = pairs + lanes[len(pairs) * 2:]
    kb.emit(ir.Let(acc, lanes[0]))
    if whole != stop:
        kb.emit(ir.Loop(name, whole, stop, [ir.Assign(acc, combine(op, var(acc, dt), x))]))
    return var(acc, dt)


def group_reduce(kb, op: str, acc_dt: D.DType, start: X, stop: X, element, hi: int) -> X:
    """``op`` over ``element(r)`` for r in [start, stop) by the ``kb.local`` items of a work group: item ``lid``
    takes r = start + lid, start + lid + L, ... (neighbouring items read neighbouring elements), then the items
    combine their values in a tree through the group's shared memory. Every item gets the result."""
    L = kb.local
    lane = ir.lid(L)
    acc = kb.fresh("acc")
    kb.emit(ir.Let(acc, _init(op, acc_dt)))

    def body(r):
        kb.emit(ir.Assign(acc, combine(op, var(acc, acc_dt), element(r))))
    kb.loop(kb.fresh("r"), start + lane, stop, body, lo=0, hi=hi, step=L)
    red = kb.local_array("red", acc_dt, L)
    kb.emit(ir.Store(red, lane, var(acc, acc_dt)))
    kb.emit(ir.Barrier())
    assert L & (L - 1) == 0, f"work groups of {L} items: the tree needs a power of two"
    half = L // 2
    while half >= 1:
        kb.emit(ir.If(alu("lt", D.bool_, lane, iconst(half)),
                      [ir.Store(red, lane, combine(op, ir.load(red, lane, acc_dt),
                                                   ir.load(red, lane + half, acc_dt)))]))
        kb.emit(ir.Barrier())
        half //= 2
    total = kb.fresh("tot")
    kb.emit(ir.Let(total, ir.load(red, iconst(0), acc_dt)))
    kb.emit(ir.Barrier())  # every item has read the result before the array is used again
    return var(total, acc_dt)


def _runs(in_shape, axes) -> list[tuple[bool, int, int]]:
    """The axes of a contiguous ``in_shape`` merged into runs of neighbouring reduced or kept axes (axes of size 1
    left out): ``(reduced, extent, stride)`` for each run, outermost first."""
    runs: list = []
    stride = 1
    for a in reversed(range(len(in_shape))):
        n = in_shape[a]
        if n == 1:
            continue
        red = a in axes
        if runs and runs[-1][0] == red:
            runs[-1] = (red, runs[-1][1] * n, runs[-1][2])
        else:
            runs.append((red, n, stride))
        stride *= n
    return runs[::-1]


def _nested(kb, st, idx: Idx, acc_dt: D.DType, runs: list) -> X:
    """The reduction ``st`` at output position ``idx`` over several runs of reduced axes (``runs``, see
    :func:`_runs`; batch norm's dims (0, 2, 3) of [N, C, H, W] are the runs N and H*W): a loop over the outer runs'
    positions, and in it :func:`reduce_loop` over the innermost run. The kept runs' coordinates come from ``idx``
    once an output and the outer runs' once an outer step, so the inner loop reads ``base + r * stride`` (a
    unit-stride walk when the innermost run holds the last axis) with no division in it."""
    op, n = st.op, idx.n
    kept = [(e, s) for red, e, s in runs if not red]
    red = [(e, s) for r, e, s in runs if r]
    base, below = iconst(0), math.prod(e for e, _ in kept)
    for e, s in kept:  # the kept runs' coordinates, from the output's flat index
        below //= e
        base = base + ((idx.flat // n(below)) % n(e)) * n(s)
    (inner, inner_stride), outer = red[-1], red[:-1]
    Q = math.prod(e for e, _ in outer)
    acc = kb.fresh("acc")
    kb.emit(ir.Let(acc, _init(op, acc_dt)))
    body: list = []
    saved, kb.block = kb.block, body
    try:
        q = var(kb.fresh("q"), INDEX, 0, Q - 1)
        below = Q
        for e, s in outer:  # the outer runs' coordinates, from the outer step
            below //= e
            base = base + ((q // n(below)) % n(e)) * n(s)

        def element(r):
            flat = base + r * n(inner_stride)
            return cast(kb.value(st.ins[0], Idx(tuple(st.in_meta[0][0]), flat=flat, size=idx.size)), acc_dt)
        total = reduce_loop(kb, op, acc_dt, kb.fresh("r"), iconst(0), kb.size(f"reduce{st.out}", inner), element, 0,
                            inner - 1)
        body.append(ir.Assign(acc, combine(op, var(acc, acc_dt), total)))
    finally:
        kb.block = saved
    kb.emit(ir.Loop(q.arg, iconst(0), kb.size(f"outer{st.out}", Q), body))
    return cast(var(acc, acc_dt), st.dtype)


def reduce_value(kb, st, idx: Idx) -> X:
    """The reduction ``st`` at output position ``idx``: a loop in this kernel (two stages when long)."""
    axes = reduce_axes(st)
    in_shape = tuple(st.in_meta[0][0])
    red_shape = tuple(in_shape[a] for a in axes)
    R = math.prod(red_shape)
    acc_dt = _acc_dtype(kb, st)
    op = st.op
    if R == 0:
        return cast(_init(op, acc_dt), st.dtype)
    n_out = math.prod(st.shape)
    opts = kb.lw.opts

    if R >= opts.split_min and n_out < opts.split_outputs:
        chunks = min(opts.max_chunks, -(-R // opts.chunk))
        L = -(-R // chunks)
        chunks = -(-R // L)
        tmp = kb.lw.temp(n_out * chunks, acc_dt)
        part = type(kb)(kb.lw, kb.lw.kernel_name())  # the first stage is a kernel of its own
        part.heavy = True
        G = opts.group
        g = ir.grp(n_out * chunks) if G else ir.gid(n_out * chunks)
        o, c = g // chunks, g % chunks
        start = c * L
        stop = alu("min", INDEX, start + L, iconst(R))

        def element(r):
            return cast(part.value(st.ins[0], _reduce_in_idx(st, axes, Idx(st.shape, flat=o), r, red_shape)),
                        acc_dt)
        dest = part.buf(("tmp", tmp), acc_dt, n_out * chunks, out=True)
        if G:
            part.local = G
            partial = group_reduce(part, op, acc_dt, start, stop, element, R - 1)
            part.emit(ir.If(alu("eq", D.bool_, ir.lid(G), iconst(0)), [ir.Store(dest, g, partial)]))
        else:
            part.emit(ir.Store(dest, g, reduce_loop(part, op, acc_dt, "r", start, stop, element, 0, R - 1)))
        part.origins.add(st.origin)
        kb.lw.add_launch(part, n_out * chunks * (G or 1))
        tname = kb.buf(("tmp", tmp), acc_dt, n_out * chunks)
        total = reduce_loop(kb, op, acc_dt, kb.fresh("c"), iconst(0), iconst(chunks),
                            lambda c2: ir.load(tname, idx.flat * chunks + c2, acc_dt), 0, chunks - 1)
        return cast(total, st.dtype)

    kb.heavy = kb.heavy or R > 16
    if opts.nest and not kb.local:
        runs = _runs(in_shape, axes)
        if sum(red for red, _, _ in runs) >= 2:  # several runs of reduced axes: a loop over the outer ones
            return _nested(kb, st, idx, acc_dt, runs)
    length = None
    if _rows(st, axes):  # whole rows: the length is a parameter (a row kernel's rows are as long as its own)
        row = kb.row_len
        length = row if row is not None and row.size == R and st.out in kb.lw.rows.reduces else \
            kb.size(f"reduce{st.out}", R)
        stop = length
    else:  # columns or inner axes: the loop's length is a parameter still (a bias gradient sums over the batch)
        stop = kb.size(f"reduce{st.out}", R)
    kept = None
    if axes == tuple(range(len(axes))) and len(axes) < len(in_shape):  # leading axes: their stride is a parameter
        kept = kb.size(f"kept{st.out}", n_out)

    def element(r):
        return cast(kb.value(st.ins[0], _reduce_in_idx(st, axes, idx, r, red_shape, length, kept)), acc_dt)
    if kb.local and kb.block is kb.body:  # a work-group kernel (see Lowerer): the group reduces together
        return cast(group_reduce(kb, op, acc_dt, iconst(0), stop, element, R - 1), st.dtype)
    total = reduce_loop(kb, op, acc_dt, kb.fresh("r"), iconst(0), stop, element, 0, R - 1)
    return cast(total, st.dtype)
