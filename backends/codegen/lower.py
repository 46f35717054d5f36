"""Lowering: a fragment's primitive steps grouped into kernels.

:func:`lower` takes the steps ``Device.compile`` receives and the set of slots that must exist as buffers
after the run (the outputs the client keeps), and returns a :class:`Lowered` program: kernel launches and
host steps in order, plus the temporary buffers they need.

Scheduling (:func:`schedule`) decides which slots become buffers. Everything else is *inlined*: computed
inside the kernel of the buffer that consumes it, element by element.

* Elementwise ops and sources (``full``, ``arange``, random) inline into their single consumer.
* Movement ops (reshape, permute, expand, slice, flip, pad, copy) become index arithmetic; a movement chain
  over a buffer is a view and inlines into every consumer.
* A reduction inlines its elementwise prologue into its loop; it inlines into its consumer (the epilogue)
  when that consumer reads each result once (same element count, no reduction of its own).
* Index ops, scans and matmul are kernels of their own (:mod:`.kernels`); their inputs may be inlined
  (matmul takes views only). Ops the device runs itself (``Options.host_ops``: BLAS matmul on the CPU) are
  host steps, and so are the worker's own ops (``const``, ``hub_tensor``).

An index is an :class:`Idx`: a multi-index over a shape, kept as a flat expression while the access stays
contiguous, so a contiguous chain reads ``b[gid]`` with no division at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tensorwire.protocol import dtypes as D

from . import ir
from .elementwise import RULES, SOURCES
from .ir import INDEX, X, alu, cast, const, iconst, var, where

MOVEMENT = frozenset({"reshape", "permute", "expand", "slice", "flip", "pad", "copy"})
REDUCE = frozenset({"sum", "prod", "amax", "amin"})


@dataclass
class Options:
    """What the target device wants from the lowering."""

    host_ops: frozenset = frozenset()  # ops the device runs itself (BLAS matmul)
    host_views: bool = False           # the host makes views (numpy): movement chains feeding host steps
    acc64: bool = False                # float32 sums accumulate in float64 (cheap on CPUs)
    split_min: int = 16384             # reductions this long over few outputs split in two stages...
    split_outputs: int = 16            # ...when they have fewer outputs than this
    chunk: int = 4096                  # elements per first-stage work item
    max_chunks: int = 64
    row_fusion: bool = False           # row reductions broadcast back over their rows fuse into one kernel a row


@dataclass
class Launch:
    """One kernel call: ``args[i]`` feeds ``kernel.bufs[i]`` (``("slot", s)`` or ``("tmp", k)``);
    ``scalars[i]`` is ``(origin node, attribute, value when not replaced, dtype)``."""

    kernel: ir.Kernel
    args: list
    scalars: list
    origins: tuple


@dataclass
class HostStep:
    """A step the device runs outside the compiler (its own kernel, or a worker op)."""

    step: object


@dataclass
class Lowered:
    items: list = field(default_factory=list)
    temps: list = field(default_factory=list)  # (numel, dtype)
    buffers: set = field(default_factory=set)  # slots that exist as buffers during the run

    @property
    def kernels(self) -> list[ir.Kernel]:
        return [it.kernel for it in self.items if isinstance(it, Launch)]


# -- indices ------------------------------------------------------------------------------------------------

def _strides(shape) -> list[int]:
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return st[::-1]


class Idx:
    """A position in a tensor of ``shape``: a flat index and/or one index per dim, and a validity mask
    (padding) under which the position may be outside the tensor."""

    __slots__ = ("shape", "_flat", "_dims", "valid")

    def __init__(self, shape, flat: X | None = None, dims: list | None = None, valid: X | None = None):
        self.shape, self._flat, self._dims, self.valid = tuple(shape), flat, dims, valid

    @property
    def dims(self) -> list[X]:
        if self._dims is None:
            self._dims = [(self._flat // s) % n if n != 1 else iconst(0)
                          for n, s in zip(self.shape, _strides(self.shape))]
        return self._dims

    @property
    def flat(self) -> X:
        if self._flat is None:
            acc = iconst(0)
            for d, s in zip(self.dims, _strides(self.shape)):
                acc = acc + d * s
            self._flat = acc
        return self._flat


def _and(a: X | None, b: X | None) -> X | None:
    if a is None:
        return b
    if b is None:
        return a
    return alu("land", D.bool_, a, b)


def broadcast_idx(idx: Idx, shape) -> Idx:
    """Where an input of ``shape`` is read for output position ``idx`` (numpy broadcasting)."""
    shape = tuple(shape)
    if shape == idx.shape:
        return idx
    if math.prod(shape) == 1:
        return Idx(shape, flat=iconst(0), valid=idx.valid)
    off = len(idx.shape) - len(shape)
    full = (1,) * off + shape
    if idx._flat is not None:  # a flat index: a broadcast over leading or trailing dims is one divide or modulo
        k = len(full)
        while k and full[k - 1] == 1:
            k -= 1
        if full[:k] == idx.shape[:k]:  # [a, b, 1, 1] read from [a, b, c, d]: flat // (c * d)
            return Idx(shape, flat=idx.flat // math.prod(idx.shape[k:]), valid=idx.valid)
        k = 0
        while k < len(full) and full[k] == 1:
            k += 1
        if full[k:] == idx.shape[k:]:  # [1, 1, c, d] (or [c, d]) read from [a, b, c, d]: flat % (c * d)
            return Idx(shape, flat=idx.flat % math.prod(idx.shape[k:]), valid=idx.valid)
    dims = [iconst(0) if n == 1 else idx.dims[off + k] for k, n in enumerate(shape)]
    return Idx(shape, dims=dims, valid=idx.valid)


def view_idx(st, idx: Idx) -> tuple[Idx, object]:
    """Map an output position of movement step ``st`` to its input's; returns (input idx, pad value or None)."""
    in_shape = tuple(st.in_meta[0][0])
    op, a = st.op, st.attrs
    if op == "copy" or (op == "reshape" and in_shape == idx.shape):
        return Idx(in_shape, idx._flat, idx._dims, idx.valid), None
    if op == "reshape":
        if [n for n in in_shape if n != 1] == [n for n in idx.shape if n != 1] and idx._dims is not None:
            it = iter(d for d, n in zip(idx.dims, idx.shape) if n != 1)
            return Idx(in_shape, dims=[next(it) if n != 1 else iconst(0) for n in in_shape], valid=idx.valid), None
        return Idx(in_shape, flat=idx.flat, valid=idx.valid), None
    if op == "permute":
        nd = len(in_shape)
        dims: list = [None] * nd
        for o, p in enumerate(a["dims"]):
            dims[p % nd] = idx.dims[o]
        return Idx(in_shape, dims=dims, valid=idx.valid), None
    if op == "expand":
        return broadcast_idx(idx, in_shape), None
    if op == "slice":
        dims = [iconst(s) + d * t for d, s, t in zip(idx.dims, a["starts"], a["steps"])]
        return Idx(in_shape, dims=dims, valid=idx.valid), None
    if op == "flip":
        nd = max(len(in_shape), 1)
        fl = a.get("dims")
        fl = range(len(in_shape)) if fl is None else ([fl] if isinstance(fl, int) else fl)
        fl = {d % nd for d in fl}
        dims = [iconst(n - 1) + d * (-1) if k in fl else d for k, (d, n) in enumerate(zip(idx.dims, in_shape))]
        return Idx(in_shape, dims=dims, valid=idx.valid), None
    if op == "pad":
        p = a["pads"]
        dims, valid = [], idx.valid
        for k, (d, n) in enumerate(zip(idx.dims, in_shape)):
            lo, hi = p[2 * k], p[2 * k + 1]
            i = d + (-lo)
            if lo > 0:
                valid = _and(valid, alu("ge", D.bool_, i, iconst(0)))
            if hi > 0:
                valid = _and(valid, alu("lt", D.bool_, i, iconst(n)))
            dims.append(i)
        return Idx(in_shape, dims=dims, valid=valid), a.get("value", 0)
    raise ValueError(f"{op} is not a movement op")


# -- scheduling ------------------------------------------------------------------------------------------------

def _inline_inputs(op: str, opts: Options) -> str:
    """How a consumer takes its inputs: "expr" (any inlined expression), "view" (views of buffers), "buffer"."""
    if op in opts.host_ops or op not in _KNOWN:
        return "buffer"
    if op == "matmul":
        return "view"
    return "expr"


def schedule(steps: list, keep: set, opts: Options) -> tuple[dict, set, set]:
    """``(producer of each slot, the slots that are buffers, the buffers the host makes as views)``."""
    prod = {s.out: s for s in steps if s.out >= 0}
    consumers: dict[int, list] = {}
    for s in steps:
        for x in dict.fromkeys(s.ins):
            consumers.setdefault(x, []).append(s)
    inline: set[int] = set()
    # single-consumer expressions, in reverse: a reduce's epilogue check reads the decisions downstream
    for st in reversed(steps):
        o, cons = st.out, consumers.get(st.out, [])
        if o < 0 or o in keep or st.op not in _KNOWN or st.op in opts.host_ops or len(cons) != 1:
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
            if st.op in opts.host_ops or st.op not in _KNOWN:
                for x in st.ins:
                    mark(x)
        for o in keep:
            mark(o)
    rows = _row_groups(steps, prod, consumers, inline, keep, opts) if opts.row_fusion else RowGroups()
    buffers = {x for x in consumers if x not in prod} | {o for o in prod if o not in inline}
    return prod, buffers, host_views, rows


@dataclass
class RowGroups:
    """Kernels that run a row per work item: ``roots`` (slot -> row length) and the row reductions they compute
    before walking their row (softmax: the max, then the sum of exponentials, then the row itself)."""

    roots: dict = field(default_factory=dict)
    reduces: set = field(default_factory=set)


def _is_row_reduce(st, shape) -> bool:
    nd = len(shape)
    return (st.op in REDUCE and tuple(st.in_meta[0][0]) == shape and _reduce_axes(st) == (nd - 1,)
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


# -- kernel building -----------------------------------------------------------------------------------------------

class KernelBuilder:
    """Builds one kernel: its buffers, scalars and statements; :meth:`value` computes a slot's element."""

    def __init__(self, lw: Lowerer, name: str):
        self.lw, self.name = lw, name
        self.bufs: list[ir.Buf] = []
        self.args: list = []
        self._buf_of: dict = {}
        self.scalars: list[ir.Scalar] = []
        self.scalar_args: list = []
        self._scalar_of: dict = {}
        self.body: list = []
        self.block = self.body
        self.can_raise = False
        self.heavy = False
        self.flat: X = iconst(0)  # the flat index of the element a source is computing
        self._n = 0
        self.origins: set = set()
        self.row_block: list | None = None  # a row kernel: where its row reductions go (before the row loop)
        self._row_values: dict = {}

    def fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def buf(self, key, dtype: D.DType, size: int, out: bool = False) -> str:
        name = self._buf_of.get(key)
        if name is None:
            name = self._buf_of[key] = f"b{len(self.bufs)}"
            self.bufs.append(ir.Buf(name, dtype, size, out))
            self.args.append(key)
        return name

    def scalar(self, st, attr: str, dtype: D.DType) -> X:
        key = (st.out, attr, dtype.name)
        name = self._scalar_of.get(key)
        if name is None:  # a replay's fresh value reaches steps recorded as such (not parts of a composite)
            name = self._scalar_of[key] = f"s{len(self.scalars)}"
            self.scalars.append(ir.Scalar(name, dtype))
            self.scalar_args.append((st.origin if st.dynamic else None, attr, st.attrs.get(attr), dtype))
        return var(name, dtype)

    def check(self, bad: X, error: str, message: str, detail: X) -> None:
        """Record ``error`` (with ``message``, ``{detail}`` filled in) when ``bad`` holds."""
        self.can_raise = True
        code = self.lw.error_code(error, message)
        self.block.append(ir.If(bad, [ir.Raise(code, detail)]))

    def emit(self, stmt) -> None:
        self.block.append(stmt)

    def loop(self, name: str, start: X, stop: X, body_fn, reductions: tuple = (), lo: int = 0, hi: int | None = None):
        body: list = []
        outer, self.block = self.block, body
        try:
            body_fn(var(name, INDEX, lo, hi))
        finally:
            self.block = outer
        self.block.append(ir.Loop(name, start, stop, body, tuple(reductions)))

    # values --------------------------------------------------------------------------------------------------
    def load_slot(self, slot: int, idx: Idx) -> X:
        shape, dt = self.lw.meta[slot]
        n = math.prod(shape)
        name = self.buf(("slot", slot), dt, n)
        if n == 0:
            return const(0, dt)
        i = idx.flat
        if idx.valid is not None:
            i = where(idx.valid, i, iconst(0))
        return ir.load(name, i, dt)

    def value(self, slot: int, idx: Idx) -> X:
        """The element of ``slot`` at ``idx`` (a load from its buffer, or its producer's computation)."""
        if slot in self.lw.buffers:
            return self.load_slot(slot, idx)
        return self.compute(self.lw.prod[slot], idx)

    def compute(self, st, idx: Idx) -> X:
        """The element at ``idx`` of what step ``st`` computes."""
        self.origins.add(st.origin)
        op = st.op
        if op in MOVEMENT:
            in_idx, pad = view_idx(st, idx)
            v = self.value(st.ins[0], in_idx)
            if pad is not None and in_idx.valid is not idx.valid:
                v = where(in_idx.valid, v, const(pad, st.dtype))
            return v
        if op in RULES:
            vals = [self.value(x, broadcast_idx(idx, m[0])) for x, m in zip(st.ins, st.in_meta)]
            return RULES[op](self, st, vals)
        if op in SOURCES:
            saved, self.flat = self.flat, idx.flat
            try:
                return SOURCES[op](self, st, [])
            finally:
                self.flat = saved
        if op in REDUCE:
            if st.out in self.lw.rows.reduces:
                return self._row_reduce(st, idx)
            return reduce_value(self, st, idx)
        from .kernels import VALUE_KERNELS
        return VALUE_KERNELS[op](self, st, idx)

    def _row_reduce(self, st, idx: Idx) -> X:
        """A row kernel's reduction: computed once per row, ahead of the loop over the row."""
        got = self._row_values.get(st.out)
        if got is None:
            if self.row_block is None or _uses(idx.flat, ROW_VAR):  # (not expected) still right: computed here
                return reduce_value(self, st, idx)
            saved, self.block = self.block, self.row_block
            try:
                got = self._row_values[st.out] = reduce_value(self, st, idx)
            finally:
                self.block = saved
        return got

    def kernel(self, grid: int) -> ir.Kernel:
        return ir.Kernel(self.name, self.bufs, self.scalars, grid, self.body, self.can_raise, self.heavy)


# -- reductions ------------------------------------------------------------------------------------------------------

def _reduce_axes(st) -> tuple[int, ...]:
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
        if dt in (D.float16, D.bfloat16):
            return D.float64 if kb.lw.opts.acc64 else D.float32
        if dt is D.float32 and kb.lw.opts.acc64:
            return D.float64
        return dt
    return D.float32 if dt in (D.float16, D.bfloat16) else dt


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
    info = __import__("numpy").iinfo(dt.np)
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


def _reduce_in_idx(st, axes, out_idx: Idx, r: X, red_shape) -> Idx:
    """The input position for output position ``out_idx`` and flat reduced position ``r``."""
    in_shape = tuple(st.in_meta[0][0])
    nd = len(in_shape)
    kept = [a for a in range(nd) if a not in axes]
    R = math.prod(red_shape)
    if not kept:
        return Idx(in_shape, flat=r)
    if axes == tuple(range(nd - len(axes), nd)):  # trailing axes: rows
        return Idx(in_shape, flat=out_idx.flat * R + r)
    if axes == tuple(range(len(axes))):  # leading axes: columns
        return Idx(in_shape, flat=r * math.prod(in_shape[a] for a in kept) + out_idx.flat)
    keepdim = len(st.shape) == nd
    odims = out_idx.dims
    rdims = Idx(red_shape, flat=r).dims
    dims, ki, ri = [], 0, 0
    for a in range(nd):
        if a in axes:
            dims.append(rdims[ri])
            ri += 1
        else:
            dims.append(odims[a] if keepdim else odims[ki])
            ki += 1
    return Idx(in_shape, dims=dims)


def reduce_loop(kb: KernelBuilder, op: str, acc_dt: D.DType, name: str, start: X, stop: X, element, lo: int,
                hi: int) -> X:
    """Emit ``acc = op(element(r) for r in [start, stop))``; returns the accumulated value. Float max/min keep a
    NaN flag beside a plain max (two vectorisable reductions) and give NaN when any element was NaN."""
    acc = kb.fresh("acc")
    kb.emit(ir.Let(acc, _init(op, acc_dt)))
    guard = op in ("amax", "amin") and acc_dt.is_floating_point
    nan = kb.fresh("nan") if guard else None
    if guard:
        kb.emit(ir.Let(nan, const(False, D.bool_)))

    def body(r):
        x = element(r)
        a = var(acc, acc_dt)
        if guard:
            kb.emit(ir.Assign(nan, alu("lor", D.bool_, var(nan, D.bool_), ir.fn("isnan", D.bool_, x))))
            kb.emit(ir.Assign(acc, where(alu("gt" if op == "amax" else "lt", D.bool_, x, a), x, a)))
        else:
            kb.emit(ir.Assign(acc, combine(op, a, x)))
    if acc_dt is D.bool_:
        red = ((acc, "and" if op in ("prod", "amin") else "or"),)
    else:
        red = ((acc, {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}[op]),)
    kb.loop(name, start, stop, body, red + (((nan, "or"),) if guard else ()), lo, hi)
    out = var(acc, acc_dt)
    return where(var(nan, D.bool_), const(float("nan"), acc_dt), out) if guard else out


def reduce_value(kb: KernelBuilder, st, idx: Idx) -> X:
    """The reduction ``st`` at output position ``idx``: a loop in this kernel (two stages when long)."""
    axes = _reduce_axes(st)
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
        part = KernelBuilder(kb.lw, kb.lw.kernel_name())
        part.heavy = True
        g = ir.gid(n_out * chunks)
        o, c = g // chunks, g % chunks
        start = c * L
        stop = alu("min", INDEX, start + L, iconst(R))
        partial = reduce_loop(part, op, acc_dt, "r", start, stop, lambda r: cast(part.value(
            st.ins[0], _reduce_in_idx(st, axes, Idx(st.shape, flat=o), r, red_shape)), acc_dt), 0, R - 1)
        part.emit(ir.Store(part.buf(("tmp", tmp), acc_dt, n_out * chunks, out=True), g, partial))
        part.origins.add(st.origin)
        kb.lw.add_launch(part, n_out * chunks)
        tname = kb.buf(("tmp", tmp), acc_dt, n_out * chunks)
        total = reduce_loop(kb, op, acc_dt, kb.fresh("c"), iconst(0), iconst(chunks),
                            lambda c2: ir.load(tname, idx.flat * chunks + c2, acc_dt), 0, chunks - 1)
        return cast(total, st.dtype)

    kb.heavy = kb.heavy or R > 16
    total = reduce_loop(kb, op, acc_dt, kb.fresh("r"), iconst(0), iconst(R), lambda r: cast(kb.value(
        st.ins[0], _reduce_in_idx(st, axes, idx, r, red_shape)), acc_dt), 0, R - 1)
    return cast(total, st.dtype)


# -- the program ------------------------------------------------------------------------------------------------------

class Lowerer:
    def __init__(self, steps: list, keep: set, opts: Options):
        self.steps, self.opts = steps, opts
        self.meta: dict[int, tuple] = {}
        for s in steps:
            for x, m in zip(s.ins, s.in_meta):
                self.meta[x] = (tuple(m[0]), m[1])
            if s.out >= 0:
                self.meta[s.out] = (tuple(s.shape), s.dtype)
        self.prod, self.buffers, self.host_views, self.rows = schedule(steps, keep, opts)
        self.out = Lowered(buffers=set(self.buffers))
        self.errors: list = []
        self._k = 0

    def kernel_name(self) -> str:
        self._k += 1
        return f"k{self._k - 1}"

    def temp(self, numel: int, dtype: D.DType) -> int:
        self.out.temps.append((numel, dtype))
        return len(self.out.temps) - 1

    def error_code(self, error: str, message: str) -> int:
        key = (error, message)
        if key not in self.errors:
            self.errors.append(key)
        return self.errors.index(key) + 1

    def add_launch(self, kb: KernelBuilder, grid: int) -> None:
        k = kb.kernel(grid)
        k.errors = list(self.errors)
        self.out.items.append(Launch(k, kb.args, kb.scalar_args, tuple(sorted(kb.origins))))

    def run(self) -> Lowered:
        from .kernels import STORE_KERNELS
        for st in self.steps:
            if st.out < 0 or st.out not in self.buffers:
                continue
            if st.op in self.opts.host_ops or st.op not in _KNOWN or st.out in self.host_views:
                self.out.items.append(HostStep(st))
                continue
            n = math.prod(st.shape)
            if n == 0:
                self.out.items.append(HostStep(st))  # an empty result: nothing to compute
                continue
            kb = KernelBuilder(self, self.kernel_name())
            kb.origins.add(st.origin)
            out = kb.buf(("slot", st.out), st.dtype, n, out=True)
            if st.out in self.rows.roots:
                grid = self._row_kernel(kb, st, out)
            elif st.op in STORE_KERNELS:
                grid = STORE_KERNELS[st.op](kb, st, out)
                if not grid:
                    continue
            else:
                g = ir.gid(n)
                kb.emit(ir.Store(out, g, kb.compute(st, Idx(st.shape, flat=g))))
                grid = n
            self.add_launch(kb, grid)
        return self.out


    def _row_kernel(self, kb: KernelBuilder, st, out: str) -> int:
        """One work item a row: the row's reductions, then a loop writing the row."""
        n = self.rows.roots[st.out]
        rows = math.prod(st.shape) // n
        g = ir.gid(rows)
        kb.heavy = True
        kb.row_block = kb.body

        def body(c):
            flat = g * n + c
            kb.emit(ir.Store(out, flat, kb.compute(st, Idx(st.shape, flat=flat))))
        kb.loop(ROW_VAR, iconst(0), iconst(n), body, lo=0, hi=n - 1)
        kb.body[-1].independent = True
        return rows


ROW_VAR = "col"


def _uses(x: X, name: str) -> bool:
    if x.op == "var":
        return x.arg == name
    return any(_uses(s, name) for s in x.src)


def lower(steps: list, keep: set, opts: Options | None = None) -> Lowered:
    """Group ``steps`` into kernels; the slots in ``keep`` (and everything a host step reads) become buffers."""
    return Lowerer(steps, keep, opts or Options()).run()


def _known_ops() -> frozenset:
    from .kernels import STORE_KERNELS, VALUE_KERNELS
    return frozenset(RULES) | frozenset(SOURCES) | MOVEMENT | REDUCE | frozenset(VALUE_KERNELS) | frozenset(
        STORE_KERNELS)


class _Known:
    _ops: frozenset | None = None

    def __contains__(self, op) -> bool:
        if self._ops is None:
            self._ops = _known_ops()
        return op in self._ops


_KNOWN = _Known()
