"""Lowering: a fragment's primitive steps grouped into kernels.

:func:`lower` takes the steps ``Device.compile`` receives and the set of slots that must exist as buffers after the
run (the outputs the client keeps), and returns a :class:`Lowered` program: kernel launches and host steps in
order, plus the temporary buffers they need. :mod:`.schedule` decides what is a buffer; a
:class:`KernelBuilder` then builds each buffer's kernel, computing inlined values element by element
(:mod:`.views` for movement ops, :mod:`.elementwise` for arithmetic, :mod:`.reduce` for reductions,
:mod:`.kernels` for index ops, scans and matmul; :mod:`.vectorize` and :mod:`.lanes` for elementwise items of several
elements).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from tensorwire.protocol import dtypes as D

from . import ir
from .elementwise import RULES, SOURCES
from .ir import INDEX, X, const, iconst, var, where
from .kernels import STORE_KERNELS, VALUE_KERNELS, tiled_matmul
from .lanes import element_lanes, lane_count, substitute, vector_stores
from .reduce import REDUCE, reduce_value
from .schedule import KNOWN_OPS, Options, schedule
from .vectorize import vectorize
from .views import MOVEMENT, Idx, broadcast_idx, view_idx

__all__ = ["HostStep", "Idx", "KernelBuilder", "Launch", "Lowered", "Options", "lower"]


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


_MISSING = object()


def attr_value(attrs: dict, attr, default=None):
    """Attribute ``attr`` of ``attrs``; ``(name, k)`` names element k of a list attribute (a slice's starts)."""
    if type(attr) is tuple:
        v = attrs.get(attr[0], _MISSING)
        if v is _MISSING:
            return default
        return v[attr[1]]
    return attrs.get(attr, default)


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
        self.local = 0  # > 0: the kernel runs in work groups of this many items (ir.Kernel.local)
        self.locals: list[ir.Local] = []
        self._carried: dict = {}  # slot -> (index, value) of the kept values this kernel stores besides its own
        self.row_len: X | None = None  # a row kernel: its row length, a size parameter (ir.size)

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

    def scalar(self, st, attr: str | tuple[str, int], dtype: D.DType) -> X:
        """A kernel parameter holding attribute ``attr`` of step ``st`` (``(name, k)``: element k of a list
        attribute), so that a replay's dynamic value reaches a kernel built once."""
        key = (st.out, attr, dtype.name)
        name = self._scalar_of.get(key)
        if name is None:  # a replay's fresh value reaches steps recorded as such (not parts of a composite)
            name = self._scalar_of[key] = f"s{len(self.scalars)}"
            self.scalars.append(ir.Scalar(name, dtype))
            self.scalar_args.append((st.origin if st.dynamic else None, attr, attr_value(st.attrs, attr), dtype))
        return var(name, dtype)

    def size(self, role: str, value: int) -> X:
        """A size as a kernel parameter (:func:`.ir.size`, the plan's value, an INDEX scalar) rather than a constant
        in the source: a fragment of the same structure at other sizes renders the same source, so it reuses the
        compiled kernel. ``role`` names the size in this kernel (one parameter a role)."""
        key = (SIZE_ATTR, role)
        name = self._scalar_of.get(key)
        if name is None:
            name = self._scalar_of[key] = f"s{len(self.scalars)}"
            self.scalars.append(ir.Scalar(name, INDEX))
            self.scalar_args.append((None, key, int(value), INDEX))
        return ir.size(name, value)

    def local_array(self, prefix: str, dtype: D.DType, size: int) -> str:
        """A new array shared by the items of a work group; returns its name."""
        a = ir.Local(self.fresh(prefix), dtype, size)
        self.locals.append(a)
        return a.name

    def check(self, bad: X, error: str, message: str, detail: X) -> None:
        """Record ``error`` (with ``message``, ``{detail}`` filled in) when ``bad`` holds."""
        self.can_raise = True
        code = self.lw.error_code(error, message)
        self.block.append(ir.If(bad, [ir.Raise(code, detail)]))

    def emit(self, stmt) -> None:
        self.block.append(stmt)

    def loop(self, name: str, start: X, stop: X, body_fn, reductions: tuple = (), lo: int = 0, hi: int | None = None,
             step: int = 1, independent: bool = False):
        body: list = []
        outer, self.block = self.block, body
        try:
            body_fn(var(name, INDEX, lo, hi))
        finally:
            self.block = outer
        self.block.append(ir.Loop(name, start, stop, body, tuple(reductions), independent, step))

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
        if slot in self.lw.carried:
            return self._carry(slot, idx)
        if slot in self.lw.buffers:
            return self.load_slot(slot, idx)
        return self.compute(self.lw.prod[slot], idx)

    def _carry(self, slot: int, idx: Idx) -> X:
        """A kept value this kernel computes (see ``schedule``): stored at this kernel's index, once, and read from
        a local after that."""
        got = self._carried.get(slot)
        if got is not None and got[0] is idx.flat:
            return got[1]
        shape, dt = self.lw.meta[slot]
        v = self.compute(self.lw.prod[slot], idx)
        name = self.fresh("c")
        self.emit(ir.Let(name, v))
        v = var(name, dt)
        self.emit(ir.Store(self.buf(("slot", slot), dt, math.prod(shape), out=True), idx.flat, v))
        self._carried[slot] = (idx.flat, v)
        return v

    def compute(self, st, idx: Idx) -> X:
        """The element at ``idx`` of what step ``st`` computes."""
        self.origins.add(st.origin)
        op = st.op
        if op in MOVEMENT:
            starts = None
            if op == "slice" and st.dynamic:  # bounds that move between replays: kernel parameters
                starts = [self.scalar(st, ("starts", k), INDEX) for k in range(len(st.shape))]
            in_idx, pad = view_idx(st, idx, starts)
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
        return VALUE_KERNELS[op](self, st, idx)

    def at(self, shape, flat: X) -> Idx:
        """The position ``flat`` in a tensor of ``shape``: the root of a kernel's index arithmetic, its strides and
        dims size parameters where the device asks for it (``Options.size_strides``, see :class:`.views.Idx`)."""
        return Idx(shape, flat=flat, size=self.size if self.lw.opts.size_strides else None)

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
        """The kernel over ``grid`` items. Without work groups (whose grid is whole groups, one per output or row)
        the grid is a parameter (``Kernel.grid_var``) where it exceeds one item."""
        grid_var = self.size("grid", grid).arg if not self.local and grid > 1 else None
        sizes = {name: a[2] for name, a in zip((s.name for s in self.scalars), self.scalar_args)
                 if type(a[1]) is tuple and a[1][0] == SIZE_ATTR}
        return ir.Kernel(self.name, self.bufs, self.scalars, grid, self.body, self.can_raise, self.heavy,
                         self.local, self.locals, grid_var, sizes)


class Lowerer:
    def __init__(self, steps: list, keep: set, opts: Options):
        self.steps, self.opts = steps, opts
        self.meta: dict[int, tuple] = {}
        for s in steps:
            for x, m in zip(s.ins, s.in_meta):
                self.meta[x] = (tuple(m[0]), m[1])
            if s.out >= 0:
                self.meta[s.out] = (tuple(s.shape), s.dtype)
        self.prod, self.buffers, self.host_views, self.rows, self.carried = schedule(steps, keep, opts)
        self.out = Lowered(buffers=set(self.buffers))
        self.errors: list = []
        self._k = 0

    def kernel_name(self) -> str:
        self._k += 1
        return f"k{self._k - 1}"

    def builder(self) -> KernelBuilder:
        """A new kernel's builder (its name the next one): the kernels that write their output in several launches
        (:mod:`.kernels`' scatters) start the first one here."""
        return KernelBuilder(self, self.kernel_name())

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
        for st in self.steps:
            if st.out < 0 or st.out not in self.buffers or st.out in self.carried:
                continue
            if st.op in self.opts.host_ops or st.op not in KNOWN_OPS or st.out in self.host_views:
                self.out.items.append(HostStep(st))
                continue
            n = math.prod(st.shape)
            if n == 0:
                self.out.items.append(HostStep(st))  # an empty result: nothing to compute
                continue
            kb = self.builder()
            kb.origins.add(st.origin)
            out = kb.buf(("slot", st.out), st.dtype, n, out=True)
            if st.out in self.rows.roots:
                grid = self._row_kernel(kb, st, out)
            elif st.op == "matmul" and self.opts.tile:
                grid = tiled_matmul(kb, st, out, self.opts.tile)
            elif st.op in STORE_KERNELS:
                grid = STORE_KERNELS[st.op](kb, st, out)
                if not grid:
                    continue
            elif self._long_reduction(st):  # a work group an element, reducing together
                kb.local = self.opts.group
                g = ir.grp(n)
                v = kb.compute(st, Idx(st.shape, flat=g))
                kb.emit(ir.If(ir.alu("eq", D.bool_, ir.lid(kb.local), iconst(0)), [ir.Store(out, g, v)]))
                grid = n * kb.local
            else:
                grid = self._elementwise(kb, st, out, n)
            self.add_launch(kb, grid)
        return self.out

    def _elementwise(self, kb: KernelBuilder, st, out: str, n: int) -> int:
        """One work item an element; with ``Options.vector`` = W, one item a vector of W elements where the
        element's computation has a vector form (:mod:`.vectorize`), the last item finishing a tail of fewer
        than W elements in a scalar loop (all of them, when there are fewer than W: the source is the same).
        With ``Options.lane_bytes``, one item the elements of that many bytes of the output (:meth:`_lanes`)."""
        if self.opts.lane_bytes and not self.opts.vector:
            return self._lanes(kb, st, out, n)
        W = self.opts.vector
        if not W or st.dtype is not D.float32:
            g = ir.gid(n)
            v = kb.compute(st, kb.at(st.shape, g))
            if self.opts.nest and all(type(s) in _NESTABLE for s in kb.body):
                # (statements before the store: the kept values the kernel stores besides its own, see _carry)
                d = _inner_divisor([v, *(e for s in kb.body for e in _exprs(s))], ir.GID, n)
                if d is not None:
                    return self._nested(kb, out, n, v, d)
            kb.emit(ir.Store(out, g, v))
            return n
        i, v, stmts = self._element(kb, st, n)
        vec = None if stmts else vectorize(v, ELEM_VAR, W)
        if vec is None:  # the element needs statements (a reduction's loop, a check) or has no vector form
            return self._item_an_element(kb, out, n, i, v, stmts)
        grid = -(-n // W)
        base = ir.gid(grid) * W
        whole = [ir.Let(ELEM_VAR, base), ir.Store(out, i, vec)]
        size = kb.size("elements", n)  # (whether n is a multiple of W is a run's matter, not the source's)
        tail = ir.Loop(ELEM_VAR, base, size, [ir.Store(out, i, v)], independent=True)
        kb.emit(ir.If(ir.alu("le", D.bool_, base + W, size), whole, [tail]))
        return grid

    @staticmethod
    def _nested(kb: KernelBuilder, out: str, n: int, v: X, d: X) -> int:
        """Element ``gid`` of an elementwise kernel (its value ``v``, after the statements already in its body: the
        kept values it stores besides, ``Let`` and ``Store`` only) as one item per ``d`` elements (``d`` divides
        ``n``; see ``Options.nest``): item ``o`` loops over ``j`` < ``d`` computing element ``o * d + j``, so the
        index arithmetic's ``gid // d`` is ``o`` and ``gid % d`` is ``j``, and the divisions left depend on ``o``
        only, out of the inner loop (a unit-stride walk the C compiler vectorises)."""
        dv = d.arg if d.op == "const" else d.size
        o = var(NEST_OUTER, INDEX, 0, n // dv - 1)
        j = var(NEST_INNER, INDEX, 0, dv - 1)
        flat = o * d + j
        memo: dict = {}
        inner = [_substituted(s, ir.GID, flat, memo) for s in kb.body]
        inner.append(ir.Store(out, flat, substitute(v, ir.GID, flat, memo)))
        kb.body.clear()  # (kb.block is the body: the statements move into the inner loop)
        kb.emit(ir.Let(NEST_OUTER, ir.gid(n // dv)))
        kb.emit(ir.Loop(NEST_INNER, iconst(0), d, inner, independent=True))
        kb.heavy = True  # (each item loops: the C target hands items out dynamically, its simd is the inner loop's)
        return n // dv

    @staticmethod
    def _element(kb: KernelBuilder, st, n: int):
        """Element ``i`` of ``st``'s output as ``(i, value, statements)``: the statements it needs first (a
        reduction's loop, a check) are collected apart, not emitted."""
        i = var(ELEM_VAR, INDEX, 0, n - 1)
        stmts: list = []
        outer, kb.block = kb.block, stmts
        try:
            v = kb.compute(st, kb.at(st.shape, i))
        finally:
            kb.block = outer
        return i, v, stmts

    @staticmethod
    def _item_an_element(kb: KernelBuilder, out: str, n: int, i, v, stmts: list) -> int:
        """One work item per element: its statements, then its store; returns the item count."""
        kb.emit(ir.Let(ELEM_VAR, ir.gid(n)))
        kb.block += stmts
        kb.emit(ir.Store(out, i, v))
        return n

    def _lanes(self, kb: KernelBuilder, st, out: str, n: int) -> int:
        """One work item L neighbouring elements (:mod:`.lanes`): each lane's scalar computation, contiguous aligned
        loads and the stores as vectors; the last item finishes a tail of fewer than L elements in a scalar loop, as
        every item does where an offset parameter is not aligned on this run. An element that needs statements (a
        reduction's loop, a check) keeps one item an element."""
        L = lane_count(st.dtype, self.opts.lane_bytes)
        i, v, stmts = self._element(kb, st, n)
        if stmts or L == 1:
            return self._item_an_element(kb, out, n, i, v, stmts)
        grid = -(-n // L)
        base = ir.gid(grid) * L
        lanes, guards = element_lanes(v, ELEM_VAR, base, L, self.opts.lane_bytes)
        whole = vector_stores(out, st.dtype, base, lanes, self.opts.lane_bytes)
        size = kb.size("elements", n)
        cond, stop = ir.alu("le", D.bool_, base + L, size), size
        if guards:  # an offset only the run knows: where it is not aligned, every item takes the scalar loop
            for g in guards:
                cond = ir.alu("land", D.bool_, cond, g)
            stop = ir.alu("min", INDEX, base + L, size)
        tail = ir.Loop(ELEM_VAR, base, stop, [ir.Store(out, i, v)], independent=True)
        kb.emit(ir.If(cond, whole, [tail]))
        return grid


    def _long_reduction(self, st) -> bool:
        """Whether ``st``'s kernel computes a reduction of at least ``Options.group`` elements an output that is
        not split in two stages (work groups then pay off: ``Options.group`` > 0 on GPU-like devices)."""
        G, opts = self.opts.group, self.opts
        if not G:
            return False
        todo, seen = [st], set()
        while todo:
            s = todo.pop()
            if s.op in REDUCE:
                R = math.prod(s.in_meta[0][0]) // max(math.prod(s.shape), 1)
                if R >= G and not (R >= opts.split_min and math.prod(s.shape) < opts.split_outputs):
                    return True
            if s.op in REDUCE or s.op in RULES or s.op in MOVEMENT:
                for x in s.ins:
                    if x not in self.buffers and x in self.prod and x not in seen:
                        seen.add(x)
                        todo.append(self.prod[x])
        return False

    def _row_kernel(self, kb: KernelBuilder, st, out: str) -> int:
        """One work item a row (or, with ``Options.group``, one work group a row): the row's reductions, then a
        loop writing the row (in a group, item ``lid`` writes columns ``lid, lid + L, ...``)."""
        n = self.rows.roots[st.out]
        rows = math.prod(st.shape) // n
        G = self.opts.group
        kb.local = G
        g = ir.grp(rows) if G else ir.gid(rows)
        kb.heavy = True
        kb.row_block = kb.body
        kb.row_len = length = kb.size("row", n)  # its row reductions' length too (reduce.reduce_value)

        def body(c):
            flat = g * length + c
            kb.emit(ir.Store(out, flat, kb.compute(st, kb.at(st.shape, flat))))
        kb.loop(ROW_VAR, ir.lid(G) if G else iconst(0), length, body, lo=0, hi=n - 1, step=G or 1,
                independent=True)
        return rows * (G or 1)


ROW_VAR = "col"
SIZE_ATTR = "#size"  # a size parameter's "attribute" in ``Launch.scalars``: ``(None, (SIZE_ATTR, role), size, INDEX)``
ELEM_VAR = "i"  # an elementwise kernel's element index, where vectors may take the place of work items


#: the least divisor of an elementwise kernel's index that becomes a loop over its remainders (``Options.nest``)
NEST_MIN = 4
NEST_OUTER, NEST_INNER = "o", "j"


#: the statements an elementwise kernel's body may hold before its store and still nest (see Lowerer._nested)
_NESTABLE = (ir.Let, ir.Store)


def _exprs(stmt) -> list:
    """The expressions of a ``Let`` or ``Store``."""
    return [stmt.value] if type(stmt) is ir.Let else [stmt.idx, stmt.value]


def _substituted(stmt, name: str, value: X, memo: dict):
    """A ``Let`` or ``Store`` with the index variable ``name`` replaced by ``value`` (:func:`.lanes.substitute`)."""
    if type(stmt) is ir.Let:
        return dataclasses.replace(stmt, value=substitute(stmt.value, name, value, memo))
    return ir.Store(stmt.buf, substitute(stmt.idx, name, value, memo), substitute(stmt.value, name, value, memo))


def _inner_divisor(roots: list, name: str, n: int) -> X | None:
    """The smallest divisor (a constant or a size parameter) of the index variable ``name`` (of ``n`` values) in
    the index arithmetic (``name // d``, ``name % d``) of the expressions ``roots`` that divides ``n``, at least
    :data:`NEST_MIN` and below ``n``; None if there is none."""
    best: X | None = None
    seen: set = set()

    def walk(e: X) -> None:
        nonlocal best
        if id(e) in seen:
            return
        seen.add(id(e))
        if e.op == "alu" and e.arg in ("idiv", "mod") and e.src[0].op == "var" and e.src[0].arg == name:
            d = e.src[1]
            dv = d.arg if d.op == "const" else d.size
            if dv is not None and NEST_MIN <= dv < n and n % dv == 0 and (
                    best is None or dv < (best.arg if best.op == "const" else best.size)):
                best = d
        for x in e.src:
            walk(x)
    for v in roots:
        walk(v)
    return best


def _uses(x: X, name: str) -> bool:
    if x.op == "var":
        return x.arg == name
    return any(_uses(s, name) for s in x.src)


def lower(steps: list, keep: set, opts: Options | None = None) -> Lowered:
    """Group ``steps`` into kernels; the slots in ``keep`` (and everything a host step reads) become buffers. Where
    matmul is a host op, an outer product (:func:`_outer_products`) is lowered as the elementwise product it is."""
    opts = opts or Options()
    if "matmul" in opts.host_ops:
        steps = _outer_products(steps)
    return Lowerer(steps, keep, opts).run()


#: the dtypes whose outer products are lowered as elementwise products (a 16-bit float's product rounds through
#: float32 in the host kernel, as the elementwise rule may not)
_OUTER_DTYPES = frozenset({D.float32, D.float64})


def _outer_products(steps: list) -> list:
    """``steps`` with each matmul that contracts a dimension of 1 (``[..., M, 1] @ [..., 1, N]``, both at least 2-D,
    of one float dtype) as a ``mul`` of the same operands, which broadcasts them to the same ``[..., M, N]``: each
    element is one product, so the values are the host kernel's (``np.multiply``, see the CPU's ``_outer_product``),
    zeros' signs included, and a fused kernel computes it in place of a buffer the BLAS call would write (a recurrent
    layer's weight gradient a letter, summed over the letters and added to the weight: issue 37)."""
    out = None
    for k, st in enumerate(steps):
        if st.op != "matmul" or len(st.in_meta) != 2:
            continue
        (xs, xt), (ys, yt) = st.in_meta
        if len(xs) < 2 or len(ys) < 2 or xs[-1] != 1 or not (st.dtype is xt is yt) or st.dtype not in _OUTER_DTYPES:
            continue
        if out is None:
            out = list(steps)
        out[k] = dataclasses.replace(st, op="mul", attrs={}, kernel=None)
    return steps if out is None else out
