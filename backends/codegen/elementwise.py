"""How each elementwise primitive and each source op computes one element, as an IR expression.

``RULES[op](kb, step, vals) -> X`` gets the step's input values (already read at the element's broadcast
index) and returns the output element. Sources (``full``, ``arange``, the random ops) get no inputs and read
the element's flat index from ``kb.flat``. The arithmetic follows the CPU backend's numpy kernels: 16-bit
floats are computed in float32 and rounded to the result dtype, integer division by zero and negative integer
powers raise, NaNs propagate through ``maximum``/``minimum`` as numpy's do.
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D
from tensorwire.protocol import random as R
from tensorwire.protocol.ops import FLOAT_UNARY, binary_dtype

from . import ir
from .ir import X, alu, cast, const, fn, where

BOOL = D.bool_


def _is_float(x: X) -> bool:
    return x.dtype.is_floating_point


def _float_unary(op):
    name = {"reciprocal": None}.get(op, op)

    def rule(kb, st, vals):
        x = cast(vals[0], st.dtype)
        if name is None:
            return alu("div", st.dtype, const(1.0, st.dtype), x)
        return alu(name, st.dtype, x)
    return rule


def _int_identity(op):
    def rule(kb, st, vals):
        x = vals[0]
        if not _is_float(x):
            return cast(x, st.dtype)
        return alu(op, st.dtype, cast(x, st.dtype))
    return rule


def _neg(kb, st, vals):
    x = cast(vals[0], st.dtype)
    return alu("lnot", BOOL, x) if st.dtype is BOOL else alu("neg", st.dtype, x)


def _abs(kb, st, vals):
    x = cast(vals[0], st.dtype)
    if st.dtype is BOOL or not st.dtype.is_signed:
        return x
    if _is_float(x):
        return alu("fabs", st.dtype, x)
    return where(alu("lt", BOOL, x, const(0, x.dtype)), alu("neg", x.dtype, x), x)


def _sign(kb, st, vals):
    x = cast(vals[0], st.dtype)
    if st.dtype is BOOL:
        return x
    zero = const(0, x.dtype)
    s = alu("sub", x.dtype, cast(alu("gt", BOOL, x, zero), x.dtype), cast(alu("lt", BOOL, x, zero), x.dtype))
    if _is_float(x):
        return where(fn("isnan", BOOL, x), x, s)
    return s


def _isnan_isinf(name):
    def rule(kb, st, vals):
        x = vals[0]
        return fn(name, BOOL, x) if _is_float(x) else const(False, BOOL)
    return rule


def _logical_not(kb, st, vals):
    x = vals[0]
    return alu("eq", BOOL, x, const(0, x.dtype))


def _bitwise_not(kb, st, vals):
    x = cast(vals[0], st.dtype)
    return alu("lnot", BOOL, x) if st.dtype is BOOL else alu("not", st.dtype, x)


def _compute_dtype(st) -> D.DType:
    """numpy's loop dtype: the result dtype for float results, else the inputs' common dtype."""
    if st.dtype.is_floating_point:
        return st.dtype
    return binary_dtype(list(st.in_meta))


def _arith(op, bool_op):
    def rule(kb, st, vals):
        ct = _compute_dtype(st)
        a, b = cast(vals[0], ct), cast(vals[1], ct)
        if ct is BOOL:
            return cast(alu(bool_op, BOOL, a, b), st.dtype)
        return cast(alu(op, ct, a, b), st.dtype)
    return rule


def _minmax(op, bool_op):
    cmp = "gt" if op == "max" else "lt"

    def rule(kb, st, vals):
        ct = _compute_dtype(st)
        a, b = cast(vals[0], ct), cast(vals[1], ct)
        if ct is BOOL:
            return cast(alu(bool_op, BOOL, a, b), st.dtype)
        if ct.is_floating_point:  # NaN wins, as numpy's maximum/minimum
            pick_a = alu("lor", BOOL, fn("isnan", BOOL, a), alu(cmp, BOOL, a, b))
            return cast(where(pick_a, a, b), st.dtype)
        return cast(alu(op, ct, a, b), st.dtype)
    return rule


def _float_or_checked_int(float_op, int_fn, bad, error: str, message: str):
    """An op computed in its compute dtype: ``float_op`` (a helper or ALU op) on floats; on integers (bools as
    int8) ``int_fn`` after recording ``error`` where ``bad(divisor)`` holds (numpy raises there)."""
    def rule(kb, st, vals):
        ct = _compute_dtype(st)
        a, b = cast(vals[0], ct), cast(vals[1], ct)
        if ct.is_floating_point:
            v = alu(float_op, ct, a, b) if float_op in ir.ALU else fn(float_op, ct, a, b)
            return cast(v, st.dtype)
        if ct is BOOL:
            a, b, ct = cast(a, D.int8), cast(b, D.int8), D.int8
        kb.check(bad(b), error, message, const(0, ir.INDEX))
        return cast(fn(int_fn, ct, a, b), st.dtype)
    return rule


def _is_zero(b):
    return alu("eq", BOOL, b, const(0, b.dtype))


def _is_negative(b):
    return alu("lt", BOOL, b, const(0, b.dtype))


_floor_divide = _float_or_checked_int("fdiv_floor", "idiv_floor", _is_zero, "ZeroDivisionError",
                                      "ZeroDivisionError: integer division by zero")
_remainder = _float_or_checked_int("fmod_py", "imod_py", _is_zero, "ZeroDivisionError",
                                   "ZeroDivisionError: integer modulo by zero")
_pow = _float_or_checked_int("pow", "ipow", _is_negative, "ValueError",
                             "Integers to negative integer powers are not allowed.")


def _div(kb, st, vals):
    a, b = cast(vals[0], st.dtype), cast(vals[1], st.dtype)
    return alu("div", st.dtype, a, b)


def _atan2(kb, st, vals):
    return alu("atan2", st.dtype, cast(vals[0], st.dtype), cast(vals[1], st.dtype))


def _compare(op):
    def rule(kb, st, vals):
        ct = binary_dtype(list(st.in_meta))
        return alu(op, BOOL, cast(vals[0], ct), cast(vals[1], ct))
    return rule


def _logical(op):
    def rule(kb, st, vals):
        a, b = (alu("ne", BOOL, v, const(0, v.dtype)) for v in vals)
        return alu(op, BOOL, a, b)
    return rule


def _bitwise(op):
    def rule(kb, st, vals):
        return alu(op, st.dtype, cast(vals[0], st.dtype), cast(vals[1], st.dtype))
    return rule


def _shift(op):
    """torch's shifts in the result dtype: a count below 0 or past the width shifts every bit out (0 for ``shl``; for
    ``shr`` the sign's copies, ``a >> (width - 1)``, and 0 for uint8). C never shifts by such a count (undefined;
    OpenCL takes it modulo the width): it is clamped to ``width - 1``, which is also the signed right shift's edge
    value, and the other edges select 0. 8- and 16-bit operands shift in C's int and are cast back to the dtype, so
    ``int8 1 << 7`` is -128, as torch's truncation."""
    def rule(kb, st, vals):
        dt = st.dtype
        a, b = cast(vals[0], dt), cast(vals[1], dt)
        top = const(8 * dt.itemsize - 1, dt)
        bad = alu("gt", BOOL, b, top)
        if dt.is_signed:
            bad = alu("lor", BOOL, alu("lt", BOOL, b, const(0, dt)), bad)
        v = alu(op, dt, a, where(bad, top, b))
        if op == "shr" and dt.is_signed:
            return v
        return where(bad, const(0, dt), v)
    return rule


def _gcd(kb, st, vals):
    return fn("igcd", st.dtype, cast(vals[0], st.dtype), cast(vals[1], st.dtype))


def _lcm(kb, st, vals):
    """torch's ``|a / gcd * b|``, 0 where the gcd is 0. Its kernel computes 8- and 16-bit dtypes in C's int (exact;
    the |.| then truncated) and the others in the dtype (wrapping before the |.|): the same here. The divisor is never
    0 or -1 in C (-1: a negation, which wraps the minimum where torch's division traps)."""
    dt = st.dtype
    a, b = cast(vals[0], dt), cast(vals[1], dt)
    g = fn("igcd", dt, a, b)
    wt = dt if dt.itemsize >= 4 else D.int32
    a, b, gw = cast(a, wt), cast(b, wt), cast(g, wt)
    zero, minus_one = const(0, wt), const(-1, wt)
    is_zero, is_minus_one = alu("eq", BOOL, gw, zero), alu("eq", BOOL, gw, minus_one)
    divisor = where(alu("lor", BOOL, is_zero, is_minus_one), const(1, wt), gw)
    q = where(is_minus_one, alu("neg", wt, a), alu("idiv", wt, a, divisor))
    p = alu("mul", wt, q, b)
    r = cast(where(alu("lt", BOOL, p, zero), alu("neg", wt, p), p), dt)
    return where(is_zero, const(0, dt), r)


def _where(kb, st, vals):
    c, a, b = vals
    c = c if c.dtype is BOOL else alu("ne", BOOL, c, const(0, c.dtype))
    return where(c, cast(a, st.dtype), cast(b, st.dtype))


def _cast(kb, st, vals):
    x, dt = vals[0], st.dtype
    if dt is BOOL:
        return alu("ne", BOOL, x, const(0, x.dtype))
    if _is_float(x) and not dt.is_floating_point:
        return cast(alu("trunc", x.dtype, x), dt) if x.dtype.itemsize == 2 else cast(x, dt)
    return cast(x, dt)


def _copy(kb, st, vals):
    return vals[0]


# sources: no inputs; the element's flat index is kb.flat ----------------------------------------------------

def _full(kb, st, vals):
    return kb.scalar(st, "value", st.dtype)


def _arange(kb, st, vals):
    a = st.attrs
    i = kb.flat
    if st.dtype.is_floating_point or isinstance(a["start"], float) or isinstance(a["step"], float):
        v = alu("add", D.float64, const(a["start"], D.float64),
                alu("mul", D.float64, cast(i, D.float64), const(a["step"], D.float64)))
        return cast(v, st.dtype)
    return cast(alu("add", D.int64, const(a["start"], D.int64), alu("mul", D.int64, i, const(a["step"], D.int64))),
                st.dtype)


def _counter(kb, st, stride=1, start=0):
    off = kb.scalar(st, "offset", D.int64)
    i = kb.flat if stride == 1 else alu("mul", D.int64, kb.flat, const(stride, D.int64))
    return alu("add", D.int64, off, alu("add", D.int64, i, const(start, D.int64)) if start else i)


def _rand(kb, st, vals):
    seed = kb.scalar(st, "seed", D.int64)
    w = fn("rng_bits", D.int64, seed, _counter(kb, st))
    p = R.SIGNIFICAND_BITS.get(st.dtype.np, 24)
    if p == 53:
        return cast(fn("u53", D.float64, w), st.dtype)
    return cast(fn("rand_f32", D.float32, w, const(p, D.int64)), st.dtype)


def _randn(kb, st, vals):
    seed = kb.scalar(st, "seed", D.int64)
    return cast(fn("randn", D.float64, seed, kb.scalar(st, "offset", D.int64), kb.flat), st.dtype)


def _randint(kb, st, vals):
    seed = kb.scalar(st, "seed", D.int64)
    a = st.attrs
    v = fn("randint", D.int64, seed, _counter(kb, st), const(a["low"], D.int64), const(a["high"], D.int64))
    return cast(v, st.dtype)


RULES: dict = {
    **{op: _float_unary(op) for op in FLOAT_UNARY},
    "neg": _neg, "abs": _abs, "sign": _sign,
    "floor": _int_identity("floor"), "ceil": _int_identity("ceil"), "round": _int_identity("rint"),
    "trunc": _int_identity("trunc"),
    "isnan": _isnan_isinf("isnan"), "isinf": _isnan_isinf("isinf"),
    "logical_not": _logical_not, "bitwise_not": _bitwise_not,
    "add": _arith("add", "lor"), "sub": _arith("sub", "xor"), "mul": _arith("mul", "land"),
    "maximum": _minmax("max", "lor"), "minimum": _minmax("min", "land"),
    "floor_divide": _floor_divide, "remainder": _remainder, "pow": _pow, "div": _div, "atan2": _atan2,
    **{op: _compare(op) for op in ("eq", "ne", "lt", "le", "gt", "ge")},
    "logical_and": _logical("land"), "logical_or": _logical("lor"), "logical_xor": _logical("ne"),
    "bitwise_and": _bitwise("and"), "bitwise_or": _bitwise("or"), "bitwise_xor": _bitwise("xor"),
    "bitwise_left_shift": _shift("shl"), "bitwise_right_shift": _shift("shr"), "gcd": _gcd, "lcm": _lcm,
    "where": _where, "cast": _cast, "copy": _copy,
}

SOURCES: dict = {"full": _full, "arange": _arange, "rand": _rand, "randn": _randn, "randint": _randint}
#: sources that compute in float64 whatever their dtype (randn's Box-Muller, arange's ``start + i * step`` as numpy
#: rounds it): a target without float64 (Metal) runs them as host steps
FLOAT64_SOURCES = frozenset({"arange", "randn"})
