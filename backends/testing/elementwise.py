"""Elementwise cases and their numpy references: unary ops (with their input domains), binary ops over
broadcasting shapes and mixed dtypes, ``where`` and ``cast``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.ops import FLOAT_UNARY, OPS, binary_dtype

from .cases import Case, _Graph
from .inputs import SELECTED_DTYPES, SPECIAL, _accepts, _case, _f64, _sh, _vals


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if np.size(x) else np.asarray(x, np.float64)


def _round_half_even(x):
    f = np.floor(x)
    d = x - f
    return np.where(d > 0.5, f + 1, np.where(d < 0.5, f, np.where(np.fmod(f, 2) == 0, f, f + 1)))


def _table_refs(nin: int) -> dict[str, Callable]:
    """The op table's elementwise ops of ``nin`` inputs with an array function: numpy's, on float64."""
    return {n: getattr(np, op.array_fn) for n, op in OPS.items()
            if op.array_fn and op.kind in ("unary", "binary") and op.nin == nin}


#: float64 references of the unary ops: the table's array functions, and those numpy lacks or names otherwise
UNARY_REF: dict[str, Callable] = {
    **_table_refs(1), "erf": _erf, "round": _round_half_even, "logical_not": lambda x: x == 0,
    "bitwise_not": None,  # dtype dependent, see _unary_case
}
assert set(FLOAT_UNARY) <= set(UNARY_REF)

_DOMAIN = {"log": (0.125, 4.0), "log1p": (-0.5, 3.0), "sqrt": (0.0, 4.0), "reciprocal": (0.25, 4.0),
           "asin": (-0.875, 0.875), "acos": (-0.875, 0.875), "tan": (-1.25, 1.25), "exp": (-3.0, 3.0)}


def _unary_ref(op: str, x: np.ndarray, dt_in: D.DType):
    x64 = _f64(x)
    if op == "bitwise_not":
        return ~x if dt_in is D.bool_ else -x64 - 1
    return UNARY_REF[op](x64)


def _unary_cases(op: str) -> Iterator[Case]:
    extra_shapes = [(), (0, 4), (3, 1, 2)]
    lo, hi = _DOMAIN.get(op, (-3.0, 3.0))
    q = None if op in FLOAT_UNARY else 0.25  # full precision, or a grid with halves (round, floor...)
    for i, dt in enumerate(SELECTED_DTYPES):
        if not _accepts(op, [((2,), dt)]):
            continue
        for shape in ((2, 3), extra_shapes[i % len(extra_shapes)]):
            yield _case(f"{op}[{dt.name}:{_sh(shape)}]", op,
                        lambda rng, dt=dt, shape=shape: _unary_graph(op, rng, dt, shape, lo, hi, q))
    for dt in (D.float32, D.float16, D.bfloat16):
        if not _accepts(op, [((2,), dt)]) or op == "bitwise_not":
            continue

        def build_special(rng, dt=dt):
            g = _Graph()
            x = SPECIAL.astype(dt.np)
            g.ref(g.op(op, g.input(x)), _unary_ref(op, x, dt))
            return g
        yield _case(f"{op}[{dt.name}:special]", op, build_special)


def _unary_graph(op, rng, dt, shape, lo, hi, q) -> _Graph:
    g = _Graph()
    x = _vals(rng, shape, dt, lo, hi, q)
    if op == "reciprocal" and dt.is_floating_point:
        x = (x * np.where(rng.random(shape) < 0.5, -1, 1)).astype(dt.np)
    g.ref(g.op(op, g.input(x)), _unary_ref(op, x, dt))
    return g


#: float64 references of the binary ops: the table's array functions, and those that differ from them
BINARY_REF: dict[str, Callable] = {
    **_table_refs(2),
    "floor_divide": lambda a, b: np.floor(a / b), "remainder": lambda a, b: a - b * np.floor(a / b),
    "logical_and": lambda a, b: (a != 0) & (b != 0), "logical_or": lambda a, b: (a != 0) | (b != 0),
    "logical_xor": lambda a, b: (a != 0) ^ (b != 0),
    "bitwise_and": None, "bitwise_or": None, "bitwise_xor": None,  # on int64, see _binary_ref
    # in the result dtype, on Python ints (torch's definitions, not numpy's functions: see _INTEGER_REF)
    "bitwise_left_shift": None, "bitwise_right_shift": None, "gcd": None, "lcm": None,
}
_BITWISE = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}


def _wrap(v: int, dt: D.DType) -> int:
    """The integer ``v`` modulo 2**width, in ``dt``'s range (two's complement)."""
    w = 8 * dt.itemsize
    v &= (1 << w) - 1
    return v - (1 << w) if dt.is_signed and v >> (w - 1) else v


def _lshift_ref(a: int, b: int, dt: D.DType) -> int:
    """torch's left shift: the count below 0 or not below the width gives 0, else the product truncated."""
    return _wrap(a << b, dt) if 0 <= b < 8 * dt.itemsize else 0


def _rshift_ref(a: int, b: int, dt: D.DType) -> int:
    """torch's right shift: arithmetic (Python's >> floors, as the sign's copies do); the count below 0 or not below
    the width less one for signed dtypes shifts by that (-1 or 0), by the width for uint8 (0)."""
    top = 8 * dt.itemsize - dt.is_signed
    return a >> b if 0 <= b < top else a >> top


def _c_rem(b: int, a: int) -> int:
    """C's ``b % a``: truncating, the dividend's sign."""
    r = abs(b) % abs(a)
    return -r if b < 0 else r


def _gcd_ref(a: int, b: int, dt: D.DType) -> int:
    """torch's calc_gcd in ``dt``: |a| and |b| in the dtype (the minimum's wraps to itself), then Euclid with C's
    remainder."""
    a, b = _wrap(abs(a), dt), _wrap(abs(b), dt)
    while a:
        a, b = _c_rem(b, a), a
    return b


def _lcm_ref(a: int, b: int, dt: D.DType) -> int:
    """torch's ``|a / gcd * b|``: 8- and 16-bit dtypes computed exactly (C's int) and the |.| truncated; the others
    wrapped to the dtype before the |.| (the minimum over a gcd of -1, where torch's division traps, wraps)."""
    g = _gcd_ref(a, b, dt)
    if g == 0:
        return 0
    q, r = divmod(a, g)
    assert r == 0, (a, b, g)
    p = q * b
    return _wrap(abs(p if dt.itemsize < 4 else _wrap(p, dt)), dt)


_INTEGER_REF = {"bitwise_left_shift": _lshift_ref, "bitwise_right_shift": _rshift_ref, "gcd": _gcd_ref,
                "lcm": _lcm_ref}


def _integer_ref(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``op`` of ``a`` and ``b`` (broadcast) in their result dtype, element by element on Python ints."""
    dt = binary_dtype([(a.shape, D.from_numpy(a.dtype)), (b.shape, D.from_numpy(b.dtype))])
    f = _INTEGER_REF[op]
    x, y = np.broadcast_arrays(a.astype(dt.np), b.astype(dt.np))
    out = [f(int(u), int(v), dt) for u, v in zip(x.ravel().tolist(), y.ravel().tolist())]
    return np.array(out, dtype=dt.np).reshape(x.shape)


def _binary_ref(op, a, b):
    if op in _INTEGER_REF:
        return _integer_ref(op, a, b)
    if op in _BITWISE:
        if a.dtype == np.bool_ and b.dtype == np.bool_:
            return _BITWISE[op](a, b)
        return _BITWISE[op](a.astype(np.int64), b.astype(np.int64))
    return BINARY_REF[op](_f64(a), _f64(b))


def _binary_inputs(op, rng, sa, da, sb, db):
    if op in _INTEGER_REF:  # a over the dtype's range and small values; shift counts past both ends of the width
        dt = binary_dtype([(sa, da), (sb, db)])
        a = _int_vals(rng, sa, da, small=op in ("gcd", "lcm"))
        if op in ("gcd", "lcm"):
            return a, _int_vals(rng, sb, db, small=True)
        w = 8 * dt.itemsize
        b = rng.integers(-2 if db.is_signed else 0, w + 3, size=tuple(sb))
        return a, (b > 0 if db is D.bool_ else b.astype(db.np))
    if op == "pow":
        a = _vals(rng, sa, da, 0.25 if da.is_floating_point else 0, 2.0 if da.is_floating_point else 3, None)
        b = _vals(rng, sb, db, -2.0 if db.is_floating_point else 0, 2.0 if db.is_floating_point else 3, 0.5)
        return a, b
    # a coarse grid gives ties for comparisons and exact quotients for floor_divide/remainder; arithmetic
    # gets the dtype's full precision (so a backend computing in a narrower type is caught)
    q = 0.5 if op in ("eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum") else (
        0.25 if op in ("floor_divide", "remainder") else None)
    a = _vals(rng, sa, da, -4, 4, q)
    b = _vals(rng, sb, db, -4, 4, q)
    if op in ("floor_divide", "remainder", "div"):  # no zero divisors
        if db is D.bool_:
            b = np.ones(sb, bool)
        else:
            mag = _vals(rng, sb, db, 1, 4, 0.25)
            sign = np.where(rng.random(sb) < 0.5, -1, 1)
            b = (mag * sign).astype(db.np) if db.is_signed or db.is_floating_point else mag
    return a, b


def _int_vals(rng, shape, dt: D.DType, small: bool) -> np.ndarray:
    """Integers of ``dt``: half from [-12, 12] (zeros, negatives, common divisors), half over the dtype's range (only
    the small ones when ``small``: lcm's products of large values all overflow)."""
    shape = tuple(shape)
    if dt is D.bool_:
        return rng.random(shape) < 0.5
    info = np.iinfo(dt.np)
    v = rng.integers(max(info.min, -12), 13, size=shape)
    if not small:
        v = np.where(rng.random(shape) < 0.5, v, rng.integers(info.min, info.max, size=shape, endpoint=True))
    return v.astype(dt.np)


#: the integer dtypes of the integer-only ops' edge cases (the suite's other cases have only int32 and int64)
_INT_DTYPES = (D.int8, D.int16, D.int32, D.int64, D.uint8)


def _edge_values(dt: D.DType) -> np.ndarray:
    """The dtype's ends and the values next to them, zero, and small values of both signs with common divisors."""
    info = np.iinfo(dt.np)
    small = (-16, -12, -9, -6, -5, -4, -1, 0, 1, 3, 4, 6, 9, 12, 16, 77)
    vals = {info.min, info.min + 1, info.max - 1, info.max, *(v for v in small if v >= info.min)}
    return np.array(sorted(vals), dtype=dt.np)


def _integer_edge_cases(op: str) -> Iterator[Case]:
    """Every edge value against every count from -2 to the width + 2 (uint8: to the width + 2, and 254, 255) for the
    shifts, against every edge value for gcd and lcm: a column against a row (broadcast), per integer dtype."""
    for dt in _INT_DTYPES:
        def build(rng, dt=dt):
            g = _Graph()
            a = _edge_values(dt)
            if op in ("gcd", "lcm"):
                b = a
            else:
                w = 8 * dt.itemsize
                b = np.arange(-2, w + 3) if dt.is_signed else np.concatenate([np.arange(0, w + 3), [254, 255]])
                b = b.astype(dt.np)
            a, b = a[:, None], b[None, :]
            g.ref(g.op(op, g.input(a), g.input(b)), _binary_ref(op, a, b))
            return g
        yield _case(f"{op}[{dt.name}:edges]", op, build)
    # the narrow dtypes over shapes and promotions (an int8 tensor with a 0-d int64 is int8; a bool tensor with one
    # is int64; uint8 with int8 is int16)
    for da, sa, db, sb in ((D.int8, (2, 3), D.int8, ()), (D.int16, (0, 3), D.int16, (1, 3)), (D.uint8, (), D.uint8, ()),
                           (D.int8, (3, 4), D.int64, ()), (D.bool_, (2, 3), D.int64, ()),
                           (D.uint8, (2, 3), D.int8, (3,))):
        def build(rng, da=da, sa=sa, db=db, sb=sb):
            g = _Graph()
            a, b = _binary_inputs(op, rng, sa, da, sb, db)
            g.ref(g.op(op, g.input(a), g.input(b)), _binary_ref(op, a, b))
            return g
        yield _case(f"{op}[{da.name}:{_sh(sa)},{db.name}:{_sh(sb)}]", op, build)


def _binary_cases(op: str) -> Iterator[Case]:
    shapes = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((0, 3), (1, 3)), ((), ()),
              ((4, 1), (0,))]
    specs = []
    for i, dt in enumerate(SELECTED_DTYPES):
        sa, sb = shapes[i % len(shapes)]
        specs.append((dt, sa, dt, sb))
    for sa, sb in shapes:
        specs.append((D.float32, sa, D.float32, sb))
    for da, db in ((D.int32, D.int64), (D.bool_, D.float32), (D.int64, D.float16), (D.float16, D.bfloat16),
                   (D.int32, D.bfloat16), (D.float32, D.float64), (D.bool_, D.int32)):
        specs.append((da, (2, 3), db, (2, 3)))
    # 0-d tensors only raise the category: float64 0-d with float32 -> float32; int64 0-d with int32 -> int32
    specs += [(D.float32, (3,), D.float64, ()), (D.int32, (3,), D.int64, ()), (D.int64, (2, 2), D.float32, ())]
    seen = set()
    for da, sa, db, sb in specs:
        if not _accepts(op, [(sa, da), (sb, db)]):
            continue
        name = f"{op}[{da.name}:{_sh(sa)},{db.name}:{_sh(sb)}]"
        if name in seen:
            continue
        seen.add(name)

        def build(rng, da=da, sa=sa, db=db, sb=sb):
            g = _Graph()
            a, b = _binary_inputs(op, rng, sa, da, sb, db)
            g.ref(g.op(op, g.input(a), g.input(b)), _binary_ref(op, a, b))
            return g
        yield _case(name, op, build)
    if op in _INTEGER_REF:
        yield from _integer_edge_cases(op)
        return
    if op not in ("floor_divide", "remainder", "pow") and op not in _BITWISE:
        for dt in (D.float32, D.float16):
            def build_special(rng, dt=dt):
                g = _Graph()
                a = np.repeat(SPECIAL, SPECIAL.size).astype(dt.np)
                b = np.tile(SPECIAL, SPECIAL.size).astype(dt.np)
                g.ref(g.op(op, g.input(a), g.input(b)), _binary_ref(op, a, b))
                return g
            yield _case(f"{op}[{dt.name}:special]", op, build_special)


def _where_cases(op: str) -> Iterator[Case]:
    specs = [((2, 1, 3), D.float32, (3,), D.float32, (2, 4, 1)), ((2, 3), D.int32, (2, 3), D.float16, ()),
             ((), D.bool_, (2, 2), D.bfloat16, (2, 2)), ((0, 2), D.int64, (1, 2), D.int64, (2,)),
             ((3,), D.float64, (3,), D.int32, (3,)), ((2, 3), D.bool_, (2, 3), D.bool_, (2, 3))]
    for sc, da, sa, db, sb in specs:
        for cdt in (D.bool_, D.int32) if sc == (2, 1, 3) else (D.bool_,):
            def build(rng, sc=sc, cdt=cdt, da=da, sa=sa, db=db, sb=sb):
                g = _Graph()
                c = _vals(rng, sc, cdt, -1, 1)
                a, b = _vals(rng, sa, da), _vals(rng, sb, db)
                g.ref(g.op(op, g.input(c), g.input(a), g.input(b)), np.where(c != 0, _f64(a), _f64(b)))
                return g
            yield _case(f"where[{cdt.name}:{_sh(sc)},{da.name}:{_sh(sa)},{db.name}:{_sh(sb)}]", op, build)
    # large, irregular masks (a ReLU's backward): backends may select arithmetically there, which must stay exact,
    # and fall back where the values are not finite
    for tag, sc, sa, dt, sb, special in (("relu-grad", (64, 128), (64, 128), D.float32, (), False),
                                         ("broadcast", (64, 1), (64, 128), D.float64, (128,), False),
                                         ("non-finite", (64, 128), (64, 128), D.float32, (), True)):
        def build(rng, sc=sc, sa=sa, dt=dt, sb=sb, special=special):
            g = _Graph()
            c = rng.random(sc) > 0.5
            a, b = _vals(rng, sa, dt), np.zeros(sb, dt.np) if not sb else _vals(rng, sb, dt)
            if special:
                a[0, :4] = [np.inf, -np.inf, np.nan, -0.0]
                c[0, :4] = [True, False, True, True]
            g.ref(g.op(op, g.input(c), g.input(a), g.input(b)), np.where(c, _f64(a), _f64(b)))
            return g
        yield _case(f"where[large:{tag}]", op, build)


_CAST_VALUES = np.array([-2.75, -1.5, -0.5, 0.0, 0.5, 1.25, 3.0, 100.0, -100.0, 7.875])


def _cast_cases(op: str) -> Iterator[Case]:
    for src in SELECTED_DTYPES:
        for dst in SELECTED_DTYPES:
            def build(rng, src=src, dst=dst):
                g = _Graph()
                if src is D.bool_:
                    x = np.array([True, False, True, True])
                elif src.is_floating_point:
                    x = _CAST_VALUES.astype(src.np)
                else:
                    x = np.array([-3, -1, 0, 1, 2, 100, -100, 7]).astype(src.np)
                x64 = _f64(x)
                ref = (x64 != 0) if dst is D.bool_ else (np.trunc(x64) if not dst.is_floating_point else x64)
                g.ref(g.op("cast", g.input(x), dtype=dst.name), ref)
                return g
            yield _case(f"cast[{src.name}->{dst.name}]", op, build)

    def build_special(rng):
        g = _Graph()
        x = SPECIAL.astype(np.float32)
        g.ref(g.op("cast", g.input(x), dtype="bool"), x != 0)
        big = np.array([1e5, -1e5, 65504.0, 3e38, -3.5e38], np.float32)
        g.ref(g.op("cast", g.input(big), dtype="float16"), np.array([np.inf, -np.inf, 65504.0, np.inf, -np.inf]))
        g.ref(g.op("cast", g.input(x), dtype="float64"), _f64(x))
        g.ref(g.op("cast", g.input(x), dtype="bfloat16"), _f64(x))
        r = np.random.default_rng(0).uniform(-10, 10, 64)
        g.ref(g.op("cast", g.input(r), dtype="float16"), r)
        g.ref(g.op("cast", g.input(r), dtype="bfloat16"), r)
        g.ref(g.op("cast", g.input(r), dtype="float32"), r)
        return g
    yield _case("cast[special]", op, build_special)



