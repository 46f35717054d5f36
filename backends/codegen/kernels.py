"""The kernels that are not elementwise chains: indexing, concatenation, arg-reductions, scans, sorting and matmul.

``VALUE_KERNELS[op](kb, step, idx) -> X`` computes one output element (so these still take inlined inputs and
fuse into their consumers' loads); ``STORE_KERNELS[op](kb, step, out) -> grid`` writes the whole output itself
(a scan's running value; scatters, which first copy their input and then write where the index says; the
writes that may collide run in index order, so the last one wins as in numpy).
"""

from __future__ import annotations

import math

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.ops import scatter_identity
from tensorwire.protocol.shapes import broadcast_many

from . import ir
from .ir import INDEX, X, alu, cast, const, iconst, var, where
from .reduce import combine
from .views import Idx, broadcast_idx

BOOL = D.bool_


def _lt(a: X, b) -> X:
    return alu("lt", BOOL, a, b if isinstance(b, X) else iconst(b))


def _ge(a: X, b) -> X:
    return alu("ge", BOOL, a, b if isinstance(b, X) else iconst(b))


def _or(a: X, b: X) -> X:
    return alu("lor", BOOL, a, b)


def _and(a: X, b: X) -> X:
    return alu("land", BOOL, a, b)


def _index_value(kb, slot: int, idx: Idx, n: int, what: str, negative: bool) -> X:
    """An index read from ``slot`` at ``idx``, checked against a dimension of size ``n`` (raising IndexError)
    and made safe to read with (0 where it was out of range)."""
    j = cast(kb.value(slot, idx), INDEX)
    bad = _or(_lt(j, -n if negative else 0), _ge(j, n))
    kb.check(bad, "IndexOutOfRange", f"{what}: index {{detail}} is out of bounds for dimension with size {n}", j)
    if negative:
        j = where(_lt(j, 0), alu("add", INDEX, j, iconst(n)), j)
    return where(bad, iconst(0), j)


def _gather(kb, st, idx: Idx) -> X:
    x, ix = st.ins
    shape = tuple(st.in_meta[0][0])
    if not shape:
        return kb.value(x, Idx((), flat=iconst(0)))
    d = st.attrs["dim"] % len(shape)
    j = _index_value(kb, ix, idx, shape[d], "gather()", False)
    dims = list(idx.dims)
    dims[d] = j
    return kb.value(x, Idx(shape, dims=dims, size=idx.size))


def _index(kb, st, idx: Idx) -> X:
    x, *ixs = st.ins
    shape = tuple(st.in_meta[0][0])
    d, k = st.attrs["dim"], len(ixs)
    nb = len(st.shape) - (len(shape) - k)
    bshape = tuple(st.shape[d:d + nb])
    od = idx.dims
    bidx = Idx(bshape, dims=od[d:d + nb], size=idx.size)
    js = [_index_value(kb, s, broadcast_idx(bidx, m[0]), shape[d + i], "index", True)
          for i, (s, m) in enumerate(zip(ixs, st.in_meta[1:]))]
    return kb.value(x, Idx(shape, dims=od[:d] + js + od[d + nb:], size=idx.size))


def _cat(kb, st, idx: Idx) -> X:
    d = st.attrs["dim"] % len(st.shape)
    i = idx.dims[d]
    parts, off = [], 0
    for slot, (shape, _) in zip(st.ins, st.in_meta):
        n = shape[d]
        if n:
            parts.append((slot, tuple(shape), off, n))
        off += n
    v = None
    for slot, shape, off, n in reversed(parts):
        inside = _and(_ge(i, off), _lt(i, off + n)) if len(parts) > 1 else None
        j = i + (-off)
        dims = list(idx.dims)
        dims[d] = j if inside is None else where(inside, j, iconst(0))
        here = cast(kb.value(slot, Idx(shape, dims=dims, valid=idx.valid, size=idx.size)), st.dtype)
        v = here if v is None else where(_lt(i, off + n), here, v)
    return v


def _setslice(kb, st, idx: Idx) -> X:
    x, v = st.ins
    a = st.attrs
    inside, ks, slice_shape = None, [], []
    for i, s, e, t in zip(idx.dims, a["starts"], a["stops"], a["steps"]):
        m = max(0, -(-(e - s) // t)) if e > s else 0
        slice_shape.append(m)
        rel = i + (-s)
        ok = _and(_ge(rel, 0), _lt(rel, m * t))
        if t != 1:
            ok = _and(ok, alu("eq", BOOL, alu("mod", INDEX, rel, iconst(t)), iconst(0)))
        k = alu("idiv", INDEX, rel, iconst(t)) if t != 1 else rel
        ks.append(where(ok, k, iconst(0)))
        inside = ok if inside is None else _and(inside, ok)
    old = kb.value(x, idx)
    if math.prod(slice_shape) == 0:
        return old
    new = cast(kb.value(v, broadcast_idx(Idx(tuple(slice_shape), dims=ks, size=idx.size), st.in_meta[1][0])),
               st.dtype)
    return new if inside is None else where(inside, new, old)


def _arg(kb, st, idx: Idx) -> X:
    x = st.ins[0]
    shape = tuple(st.in_meta[0][0])
    dt = st.in_meta[0][1]
    vt = D.float32 if dt in D.HALF else dt
    dim = st.attrs.get("dim")
    if dim is None or not shape:
        n = math.prod(shape)

        def at(k):
            return Idx(shape, flat=k, size=idx.size)
    else:
        d = dim % len(shape)
        n = shape[d]
        keep = len(st.shape) == len(shape)
        od = idx.dims

        def at(k):
            dims = list(od) if keep else list(od[:d]) + [None] + list(od[d:])
            dims[d] = k
            return Idx(shape, dims=dims, size=idx.size)
    kb.heavy = kb.heavy or n > 16
    best, bi = kb.fresh("best"), kb.fresh("bi")
    kb.emit(ir.Let(best, cast(kb.value(x, at(iconst(0))), vt)))
    kb.emit(ir.Let(bi, iconst(0)))
    cmp = "gt" if st.op == "argmax" else "lt"

    def body(k):
        xv = cast(kb.value(x, at(k)), vt)
        b = var(best, vt)
        better = alu(cmp, BOOL, xv, b)
        if vt.is_floating_point:  # the first NaN wins
            better = _and(alu("lnot", BOOL, ir.fn("isnan", BOOL, b)), _or(better, ir.fn("isnan", BOOL, xv)))
        kb.emit(ir.If(better, [ir.Assign(best, xv), ir.Assign(bi, k)]))
    kb.loop(kb.fresh("k"), iconst(1), kb.size(f"arg{st.out}", max(n, 1)), body, lo=1, hi=max(n - 1, 1))
    return cast(var(bi, INDEX), st.dtype)


class _MatmulShape:
    """A matmul's operands as 2-D (batched) matrices: ``(..., M, K) @ (..., K, N)``, 1-D operands promoted as numpy
    promotes them, and how to read each operand at (batch position, row, column)."""

    def __init__(self, st):
        (sa, _), (sb, _) = st.in_meta
        self.sa, self.sb = tuple(sa), tuple(sb)
        self.a2 = (1,) + self.sa if len(self.sa) == 1 else self.sa
        self.b2 = self.sb + (1,) if len(self.sb) == 1 else self.sb
        self.M, self.K, self.N = self.a2[-2], self.a2[-1], self.b2[-1]
        self.nbatch = len(st.shape) - (len(self.sa) > 1) - (len(self.sb) > 1)
        self.bshape = tuple(st.shape[:self.nbatch])
        dt = st.dtype
        if dt is BOOL:
            self.acc_dt = BOOL
        elif dt in D.HALF:
            self.acc_dt = D.float32
        else:
            self.acc_dt = None  # float32 -> float64 where the device accumulates wide (``_acc``)

    def acc(self, kb, dt) -> D.DType:
        if self.acc_dt is not None:
            return self.acc_dt
        return D.float64 if dt is D.float32 and kb.lw.opts.acc64 else dt

    def operand(self, is_a: bool, batch: list, row: X, col: X) -> Idx:
        shape2, orig = (self.a2, self.sa) if is_a else (self.b2, self.sb)
        bat = broadcast_idx(Idx(self.bshape, dims=batch), shape2[:-2]).dims if shape2[:-2] else []
        full = list(bat) + [row, col]
        if len(orig) == 1:
            full = [full[-1]] if is_a else [full[-2]]
        return Idx(orig, dims=full)

    def out_dims(self, batch: list, i: X, j: X) -> list:
        """The output position of element (i, j) of batch position ``batch``."""
        return list(batch) + ([i] if len(self.sa) > 1 else []) + ([j] if len(self.sb) > 1 else [])


def _product(acc_dt: D.DType, x: X, y: X) -> X:
    return alu("land" if acc_dt is BOOL else "mul", acc_dt, x, y)


def _matmul(kb, st, idx: Idx) -> X:
    """One output element: a loop over K (devices with BLAS run matmul on the host; see ``tiled_matmul``)."""
    a, b = st.ins
    ms = _MatmulShape(st)
    dims = list(idx.dims)
    if len(ms.sb) == 1:
        dims.append(iconst(0))
    if len(ms.sa) == 1:
        dims.insert(len(dims) - 1, iconst(0))
    batch, i, j = dims[:-2], dims[-2], dims[-1]
    dt = st.dtype
    acc_dt = ms.acc(kb, dt)
    acc = kb.fresh("acc")
    kb.heavy = True
    kb.emit(ir.Let(acc, const(0, acc_dt)))

    def body(k):
        x = cast(kb.value(a, ms.operand(True, batch, i, k)), acc_dt)
        y = cast(kb.value(b, ms.operand(False, batch, k, j)), acc_dt)
        kb.emit(ir.Assign(acc, combine("sum", var(acc, acc_dt), _product(acc_dt, x, y))))
    K = ms.K
    kb.loop(kb.fresh("k"), iconst(0), iconst(K), body, ((acc, "or" if acc_dt is BOOL else "add"),), 0,
            max(K - 1, 0))
    return cast(var(acc, acc_dt), dt)


def tiled_matmul(kb, st, out: str, tile: int) -> int:
    """The whole matmul as work groups of ``tile`` x ``tile`` items, one output element an item: the group stages
    a ``tile``-wide slab of each operand in its shared memory, then every item reads its row and column from
    there, so each operand element is read from global memory ``tile`` times fewer. Items past the matrix's edge
    load zeros and store nothing (they still reach every barrier). Returns the grid."""
    a, b = st.ins
    ms = _MatmulShape(st)
    T = tile
    M, K, N = ms.M, ms.K, ms.N
    gm, gn = -(-M // T), -(-N // T)
    groups = math.prod(ms.bshape) * gm * gn
    kb.local = T * T
    g, lane = ir.grp(groups), ir.lid(T * T)
    ty, tx = lane // T, lane % T
    rest = g % (gm * gn)
    i, j = (rest // gn) * T + ty, (rest % gn) * T + tx
    batch = Idx(ms.bshape, flat=g // (gm * gn)).dims if ms.bshape else []
    dt = st.dtype
    acc_dt = ms.acc(kb, dt)
    sa_, sb_ = kb.local_array("As", acc_dt, T * T), kb.local_array("Bs", acc_dt, T * T)
    acc = kb.fresh("acc")
    kb.heavy = True
    kb.emit(ir.Let(acc, const(0, acc_dt)))
    zero = const(0, acc_dt)
    clamp = lambda v, n: alu("min", INDEX, v, iconst(n - 1))  # noqa: E731 - loads stay inside the operand

    def slab(k0):
        ka, kr = k0 + tx, k0 + ty
        x = cast(kb.value(a, ms.operand(True, batch, clamp(i, M), clamp(ka, K))), acc_dt)
        y = cast(kb.value(b, ms.operand(False, batch, clamp(kr, K), clamp(j, N))), acc_dt)
        kb.emit(ir.Store(sa_, lane, where(_and(_lt(i, M), _lt(ka, K)), x, zero)))
        kb.emit(ir.Store(sb_, lane, where(_and(_lt(kr, K), _lt(j, N)), y, zero)))
        kb.emit(ir.Barrier())

        def inner(kk):
            p = _product(acc_dt, ir.load(sa_, ty * T + kk, acc_dt), ir.load(sb_, kk * T + tx, acc_dt))
            kb.emit(ir.Assign(acc, combine("sum", var(acc, acc_dt), p)))
        kb.loop(kb.fresh("kk"), iconst(0), iconst(T), inner, ((acc, "or" if acc_dt is BOOL else "add"),), 0, T - 1)
        kb.emit(ir.Barrier())
    kb.loop(kb.fresh("k"), iconst(0), iconst(K), slab, lo=0, hi=max(K - 1, 0), step=T)
    flat = Idx(tuple(st.shape), dims=ms.out_dims(batch, i, j)).flat if st.shape else iconst(0)
    kb.emit(ir.If(_and(_lt(i, M), _lt(j, N)), [ir.Store(out, flat, cast(var(acc, acc_dt), dt))]))
    return groups * T * T


VALUE_KERNELS = {"gather": _gather, "index": _index, "cat": _cat, "setslice": _setslice, "argmax": _arg,
                 "argmin": _arg, "matmul": _matmul}


# -- kernels that store their output themselves ---------------------------------------------------------------------

def _copy_launch(kb, st, out: str) -> None:
    """A first kernel that copies the op's input (``x``) into the output buffer."""
    cp = kb.lw.builder()
    n = math.prod(st.shape)
    o = cp.buf(("slot", st.out), st.dtype, n, out=True)
    g = ir.gid(n)
    cp.emit(ir.Store(o, g, cast(cp.value(st.ins[0], Idx(st.shape, flat=g)), st.dtype)))
    cp.origins.add(st.origin)
    kb.lw.add_launch(cp, n)


def _scan(kb, st, out: str) -> int:
    shape = tuple(st.shape)
    if not shape:
        kb.emit(ir.Store(out, iconst(0), cast(kb.value(st.ins[0], Idx((), flat=iconst(0))), st.dtype)))
        return 1
    d = st.attrs["dim"] % len(shape)
    n, inner = shape[d], math.prod(shape[d + 1:])
    grid = math.prod(shape) // max(n, 1)
    g = ir.gid(grid)
    base = (g // inner) * (n * inner) + g % inner
    ct = D.float32 if st.dtype in D.HALF else st.dtype
    op = "sum" if st.op == "cumsum" else "prod"
    acc = kb.fresh("acc")
    kb.emit(ir.Let(acc, const(0 if op == "sum" else 1, ct)))
    kb.heavy = n > 16

    def body(k):
        pos = base + k * inner
        x = cast(kb.value(st.ins[0], Idx(shape, flat=pos)), ct)
        kb.emit(ir.Assign(acc, combine(op, var(acc, ct), x)))
        kb.emit(ir.Store(out, pos, cast(var(acc, ct), st.dtype)))
    kb.loop(kb.fresh("k"), iconst(0), kb.size(f"scan{st.out}", n), body, lo=0, hi=max(n - 1, 0))
    return grid


def _scatter(kb, st, out: str) -> int:
    """out = x; out[.. index[p] ..] = src[p] (or +=, or reduced into: ``scatter_reduce``) for every position p of
    index, in index order. A work item owns every target its positions write (those differ only along ``dim``), so a
    ``scatter_reduce`` without ``include_self`` first writes the identity at each of them, then reduces into them."""
    _copy_launch(kb, st, out)
    x, ix, src = st.ins
    shape = tuple(st.shape)
    ishape = tuple(st.in_meta[1][0])
    if not math.prod(ishape):
        return 0
    if not shape:
        shape, ishape = (1,), (1,)
    d = st.attrs["dim"] % len(shape)
    n, inner = ishape[d], math.prod(ishape[d + 1:])
    grid = math.prod(ishape) // n
    g = ir.gid(grid)
    pre = g // inner
    post = g % inner
    kb.heavy = n > 16
    red = st.attrs["reduce"] if st.op == "scatter_reduce" else None
    ct = D.float32 if st.dtype in D.HALF else st.dtype  # (a reduction's half values combine in float32)

    def target(k):
        p = Idx(ishape, flat=pre * (n * inner) + k * inner + post) if st.in_meta[1][0] else Idx((), flat=iconst(0))
        j = _index_value(kb, ix, p, shape[d], f"{st.op}()", False)
        dims = list(p.dims) if st.in_meta[1][0] else [iconst(0)]
        dims[d] = j
        return p, Idx(shape, dims=dims).flat

    def body(k):
        p, at = target(k)
        sshape = tuple(st.in_meta[2][0])
        v = cast(kb.value(src, Idx(sshape, dims=list(p.dims)) if sshape else Idx((), flat=iconst(0))), st.dtype)
        if st.op == "scatter_add":
            v = combine("sum", ir.load(out, at, st.dtype), v)
        elif red is not None:
            v = cast(combine(red, cast(ir.load(out, at, st.dtype), ct), cast(v, ct)), st.dtype)
        kb.emit(ir.Store(out, at, v))

    def start(k):
        kb.emit(ir.Store(out, target(k)[1], const(scatter_identity(red, st.dtype), st.dtype)))
    if red is not None and not st.attrs["include_self"]:
        kb.loop(kb.fresh("k"), iconst(0), kb.size(f"scatter{st.out}", n), start, lo=0, hi=n - 1)
    kb.loop(kb.fresh("k"), iconst(0), kb.size(f"scatter{st.out}", n), body, lo=0, hi=n - 1)
    return grid


def _index_put(kb, st, out: str) -> int:
    """out = x; out[.., i1, .., ik, ..] = value (+= if accumulate), one position after another (grid 1)."""
    _copy_launch(kb, st, out)
    x, v, *ixs = st.ins
    shape = tuple(st.shape)
    d, k = st.attrs["dim"], len(ixs)
    bshape = tuple(broadcast_many(*(tuple(m[0]) for m in st.in_meta[2:])))
    tshape = shape[:d] + bshape + shape[d + k:]
    m = math.prod(tshape)
    if not m:
        return 0
    nb = len(bshape)

    def body(p):
        pi = Idx(tshape, flat=p)
        td = pi.dims
        bidx = Idx(bshape, dims=td[d:d + nb])
        js = [_index_value(kb, s, broadcast_idx(bidx, mm[0]), shape[d + i], "index", True)
              for i, (s, mm) in enumerate(zip(ixs, st.in_meta[2:]))]
        target = Idx(shape, dims=td[:d] + js + td[d + nb:]).flat
        val = cast(kb.value(v, broadcast_idx(pi, st.in_meta[1][0])), st.dtype)
        if st.attrs.get("accumulate"):
            val = combine("sum", ir.load(out, target, st.dtype), val)
        kb.emit(ir.Store(out, target, val))
    kb.heavy = True
    kb.loop(kb.fresh("p"), iconst(0), kb.size(f"positions{st.out}", m), body, lo=0, hi=m - 1)
    return 1


def _argsort(kb, st, out: str) -> int:
    """Each element counts the elements of its row that sort before it (a stable rank: equal elements keep their
    order; NaN last ascending, first descending) and writes its own index at that rank. O(n) per element, so
    O(n^2) a row: devices with a host sort (the CPU) run argsort there."""
    shape = tuple(st.shape)
    if not shape:
        kb.emit(ir.Store(out, iconst(0), const(0, D.int64)))
        return 1
    d = st.attrs["dim"] % len(shape)
    n, inner = shape[d], math.prod(shape[d + 1:])
    total = math.prod(shape)
    g = ir.gid(total)
    j = (g // inner) % n
    base = (g // (n * inner)) * (n * inner) + g % inner  # the row's first element
    src = st.in_meta[0][1]
    vt = D.float32 if src in D.HALF else src
    me = cast(kb.value(st.ins[0], Idx(shape, flat=g)), vt)
    desc = bool(st.attrs.get("descending"))
    rank = kb.fresh("rank")
    kb.emit(ir.Let(rank, iconst(0)))
    kb.heavy = n > 16

    def body(k):
        other = cast(kb.value(st.ins[0], Idx(shape, flat=base + k * inner)), vt)
        before = alu("gt" if desc else "lt", BOOL, other, me)
        same = alu("eq", BOOL, other, me)
        if vt.is_floating_point:
            nan_o, nan_m = ir.fn("isnan", BOOL, other), ir.fn("isnan", BOOL, me)
            first, second = (nan_o, nan_m) if desc else (nan_m, nan_o)
            before = _or(before, _and(first, alu("lnot", BOOL, second)))
            same = _or(same, _and(nan_o, nan_m))
        kb.emit(ir.Assign(rank, var(rank, INDEX) + cast(_or(before, _and(same, _lt(k, j))), INDEX)))
    kb.loop(kb.fresh("k"), iconst(0), iconst(n), body, ((rank, "add"),), 0, n - 1)
    kb.emit(ir.Store(out, base + var(rank, INDEX) * inner, cast(j, D.int64)))
    return total


STORE_KERNELS = {"cumsum": _scan, "cumprod": _scan, "scatter": _scatter, "scatter_add": _scatter,
                 "scatter_reduce": _scatter, "index_put": _index_put, "argsort": _argsort}
#: store kernels that update their output in place after a first kernel copied the op's input into it (see
#: :func:`_copy_launch`): a target whose kernels can only make fresh outputs (MLX's custom kernels) runs these ops
#: as host steps
UPDATES_IN_PLACE = frozenset({"scatter", "scatter_add", "scatter_reduce", "index_put"})
