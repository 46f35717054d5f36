"""Elementwise primitives: unary and binary math, comparisons, bitwise ops, ``where`` and ``cast``, with
numpy/torch type promotion.

Each op is declared once here: its inference, and what the rest of the system derives from it (``OpDef.array_fn``:
the numpy and MLX kernels and the conformance reference; ``methods``: the Tensor methods and ``tw.`` functions;
``autocast``: the GPU autocast policy; ``vjp``: the gradient rule). Codegen lowers the op in
``backends/codegen/elementwise.py``.
"""

from __future__ import annotations

import math

from .. import dtypes as D
from ..errors import DTypeError
from ..shapes import broadcast, broadcast_many
from .attrs import a_dtype
from .table import Meta, OpDef, register_op

FLOAT_UNARY = ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "erf", "reciprocal",
               "asin", "acos", "atan", "sinh", "cosh")
SAME_UNARY = ("neg", "abs", "sign", "floor", "ceil", "round", "trunc")
BOOL_UNARY = ("isnan", "isinf")


def _unary_float(metas, attrs):
    (s, d), = metas
    return s, D.float_of(d)


def _unary_same(metas, attrs):
    (s, d), = metas
    return s, d


def _no_complex(name: str, infer):
    """``infer`` refusing complex inputs: ``name`` orders values or rounds them, which complex numbers are not (torch
    refuses them too)."""
    def f(metas, attrs):
        for _, d in metas:
            if d.is_complex:
                raise DTypeError(f"{name} is not supported for complex tensors ({d.name})")
        return infer(metas, attrs)
    return f


def _abs_infer(metas, attrs):
    (s, d), = metas
    return s, D.to_real(d)  # a complex number's modulus is real


def _unary_bool(metas, attrs):
    return metas[0][0], D.bool_


def _bitwise_not(metas, attrs):
    (s, d), = metas
    if d.category >= 2:
        raise DTypeError(f"bitwise_not is only supported for integer and bool tensors, got {d}")
    return s, d


#: unary ops: name -> (array function, Tensor methods, GPU autocast policy); the inference is the tuple they are in
_UNARY: dict[str, tuple[str | None, tuple[str, ...], str | None]] = {
    "exp": ("exp", ("exp",), "fp32"), "log": ("log", ("log",), "fp32"), "log1p": ("log1p", ("log1p",), "fp32"),
    "expm1": ("expm1", ("expm1",), "fp32"), "sqrt": ("sqrt", ("sqrt",), None), "sin": ("sin", ("sin",), None),
    "cos": ("cos", ("cos",), None), "tan": ("tan", ("tan",), "fp32"), "tanh": ("tanh", ("tanh",), None),
    "erf": (None, ("erf",), None),  # numpy has no erf: the backends and the suite write theirs
    "reciprocal": ("reciprocal", ("reciprocal",), "fp32"), "asin": ("arcsin", ("asin", "arcsin"), "fp32"),
    "acos": ("arccos", ("acos", "arccos"), "fp32"), "atan": ("arctan", ("atan", "arctan"), None),
    "sinh": ("sinh", ("sinh",), "fp32"), "cosh": ("cosh", ("cosh",), "fp32"),
    # neg, abs, sign, round and trunc have hand-written methods (bool checks, decimals) or aliases torch spells
    "neg": ("negative", (), None), "abs": ("abs", ("abs", "absolute"), None), "sign": ("sign", ("sign", "sgn"), None),
    "floor": ("floor", ("floor",), None), "ceil": ("ceil", ("ceil",), None), "round": ("round", (), None),
    "trunc": ("trunc", ("trunc", "fix"), None),
    "isnan": ("isnan", ("isnan",), None), "isinf": ("isinf", ("isinf",), None),
    "logical_not": ("logical_not", ("logical_not",), None),
    "bitwise_not": (None, (), None),  # numpy's invert is MLX's bitwise_invert
}
assert set(_UNARY) == {*FLOAT_UNARY, *SAME_UNARY, *BOOL_UNARY, "logical_not", "bitwise_not"}


# VJP rules of the unary ops (a Ctx as the binary ones' below)
_SQRT_PI = math.sqrt(math.pi)


def _exp_vjp(c):
    return [c.g * c.y]


def _log_vjp(c):
    return [c.g / c.x[0]]


def _log1p_vjp(c):
    return [c.g / (c.x[0] + 1)]


def _expm1_vjp(c):
    return [c.g * (c.y + 1)]


def _sqrt_vjp(c):
    return [c.g / (c.y * 2)]


def _sin_vjp(c):
    return [c.g * c.x[0].op("cos")]


def _cos_vjp(c):
    return [-(c.g * c.x[0].op("sin"))]


def _tan_vjp(c):
    return [c.g * (c.y * c.y + 1)]


def _tanh_vjp(c):
    return [c.g * (1 - c.y * c.y)]


def _erf_vjp(c):
    x = c.x[0]
    return [c.g * (-(x * x)).op("exp") * (2.0 / _SQRT_PI)]


def _reciprocal_vjp(c):
    return [-(c.g * c.y * c.y)]


def _asin_vjp(c):
    x = c.x[0]
    return [c.g / (1 - x * x).op("sqrt")]


def _acos_vjp(c):
    x = c.x[0]
    return [-(c.g / (1 - x * x).op("sqrt"))]


def _atan_vjp(c):
    x = c.x[0]
    return [c.g / (x * x + 1)]


def _sinh_vjp(c):
    return [c.g * c.x[0].op("cosh")]


def _cosh_vjp(c):
    return [c.g * c.x[0].op("sinh")]


def _neg_vjp(c):
    return [-c.g]


def _abs_vjp(c):
    return [c.g * c.x[0].op("sign")]


#: the unary ops' rules by op
_UNARY_VJP = {n: globals()[f"_{n}_vjp"] for n in (*FLOAT_UNARY, "neg", "abs")}

for _n in FLOAT_UNARY:
    _f, _m, _p = _UNARY[_n]
    register_op(OpDef(_n, 1, _no_complex(_n, _unary_float) if _n == "erf" else _unary_float, kind="unary",
                      array_fn=_f, methods=_m, autocast=_p,
                      vjp=_UNARY_VJP[_n]))


def _neg_infer(metas, attrs):
    (s, d), = metas
    if d is D.bool_:
        raise DTypeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                         "invert a mask, use the `~` or `logical_not()` operator instead.")
    return s, d


for _n in SAME_UNARY:  # all differentiable, as torch's: sign and the rounding ops with a zero gradient
    _f, _m, _p = _UNARY[_n]
    _i = _neg_infer if _n == "neg" else _abs_infer if _n == "abs" else _unary_same
    register_op(OpDef(_n, 1, _i if _n in ("neg", "abs", "sign") else _no_complex(_n, _i), kind="unary", array_fn=_f,
                      methods=_m,
                      autocast=_p, vjp=_UNARY_VJP.get(_n)))  # (sign and the rounding ops: autograd/vjp.py's zero)
# (sign on a complex tensor is torch's sgn, z / |z|: numpy's sign; floor, ceil, round and trunc refuse complex)
for _n in BOOL_UNARY:
    _f, _m, _p = _UNARY[_n]
    register_op(OpDef(_n, 1, _unary_bool, kind="unary", differentiable=False, array_fn=_f, methods=_m))
register_op(OpDef("logical_not", 1, _unary_bool, kind="unary", differentiable=False, array_fn="logical_not",
                  methods=("logical_not",)))
register_op(OpDef("bitwise_not", 1, _bitwise_not, kind="unary", differentiable=False))


def binary_dtype(metas: list[Meta]) -> D.DType:
    """The common dtype of a binary op's inputs (PyTorch's result_type over (dtype, ndim))."""
    if len(metas) == 2:
        (sa, da), (sb, db) = metas
        if da is db:
            return da
        return D.result_type((da, len(sa)), (db, len(sb)))
    return D.result_type(*((d, len(s)) for s, d in metas))


def _binary_same(metas, attrs):
    return broadcast(metas[0][0], metas[1][0]), binary_dtype(metas)


def _binary_float(metas, attrs):
    return broadcast(metas[0][0], metas[1][0]), D.float_of(binary_dtype(metas))


def _binary_bool(metas, attrs):
    broadcast(metas[0][0], metas[1][0])
    return broadcast(metas[0][0], metas[1][0]), D.bool_


def _binary_int(name):
    def f(metas, attrs):
        d = binary_dtype(metas)
        if d.category >= 2:
            raise DTypeError(f"{name} is only supported for integer and bool tensors, got {d}")
        return broadcast(metas[0][0], metas[1][0]), d
    return f


def _sub_infer(metas, attrs):
    out = _binary_same(metas, attrs)
    if out[1] is D.bool_:
        raise DTypeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                         "Use the `^` or `logical_xor()` operator instead.")
    return out


# VJP rules (a :class:`tensorwire.autograd.vjp.Ctx`: ``c.x`` the inputs, ``c.y`` the output, ``c.g`` its gradient,
# ``c.needs`` which inputs need one; gradients may keep the broadcast shape, autograd sums them back)

def _add_vjp(c):
    return [c.g, c.g]


def _sub_vjp(c):
    return [c.g, -c.g if c.needs[1] else None]


def _mul_vjp(c):
    a, b = c.x
    return [c.g * b if c.needs[0] else None, c.g * a if c.needs[1] else None]


def _div_vjp(c):
    a, b = c.x
    return [c.g / b if c.needs[0] else None, -(c.g * c.y) / b if c.needs[1] else None]


def _minmax_vjp(cmp):
    def rule(c):
        a, b = c.x
        half = c.g * 0.5
        eq = a.eq(b)
        ga = c.where(a.op(cmp, b), c.g, c.where(eq, half, 0)) if c.needs[0] else None
        gb = c.where(b.op(cmp, a), c.g, c.where(eq, half, 0)) if c.needs[1] else None
        return [ga, gb]
    return rule


def _remainder_vjp(c):
    a, b = c.x
    return [c.g, -(c.g * a.op("floor_divide", b)) if c.needs[1] else None]


def _pow_vjp(c):
    a, b = c.x
    ga = gb = None
    if c.needs[0]:
        ga = c.where(b.eq(0), 0, c.g * b * a.op("pow", b - 1))
    if c.needs[1]:
        gb = c.where(a.eq(0) & (b >= 0), 0, c.g * c.y * a.op("log"))
    return [ga, gb]


def _atan2_vjp(c):
    a, b = c.x
    d = a * a + b * b
    return [c.g * b / d if c.needs[0] else None, -(c.g * a) / d if c.needs[1] else None]


def _pow_infer(metas, attrs):
    return _binary_same(metas, attrs)


#: compare ops: bool results, computed in the inputs' common dtype (no float16 -> float32 widening)
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")

# one line an op: name, inference, array function, Tensor methods, GPU autocast policy, VJP rule. Ops without methods
# have hand-written ones (operators, torch's extra arguments); floor_divide's zero gradient is autograd/vjp.py's
for _n, _infer, _f, _m, _p, _vjp in (
        ("add", _binary_same, "add", (), None, _add_vjp),
        ("sub", _sub_infer, "subtract", (), None, _sub_vjp),
        ("mul", _binary_same, "multiply", (), None, _mul_vjp),
        ("maximum", _binary_same, "maximum", ("maximum",), None, _minmax_vjp("gt")),
        ("minimum", _binary_same, "minimum", ("minimum",), None, _minmax_vjp("lt")),
        ("floor_divide", _binary_same, "floor_divide", (), None, None),  # (differentiable on floats, as torch's)
        ("remainder", _binary_same, "remainder", (), None, _remainder_vjp),
        ("pow", _pow_infer, "power", (), "fp32", _pow_vjp),
        ("div", _binary_float, "divide", (), None, _div_vjp),
        ("atan2", _binary_float, "arctan2", ("atan2", "arctan2"), "promote", _atan2_vjp)):
    if _n in ("maximum", "minimum", "floor_divide", "remainder", "atan2"):
        _infer = _no_complex(_n, _infer)
    register_op(OpDef(_n, 2, _infer, kind="binary", array_fn=_f, methods=_m, autocast=_p, vjp=_vjp,
                      doc="True division (ints give floats)." if _n == "div" else ""))
for _n, _f in (("eq", "equal"), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"), ("gt", "greater"),
               ("ge", "greater_equal"), ("logical_and", "logical_and"), ("logical_or", "logical_or"),
               ("logical_xor", None)):  # (MLX has no logical_xor)
    register_op(OpDef(_n, 2, _no_complex(_n, _binary_bool) if _n in ("lt", "le", "gt", "ge") else _binary_bool,
                      kind="binary", differentiable=False, array_fn=_f,
                      methods=(_n,) if _n.startswith("logical") else ()))
for _n in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    register_op(OpDef(_n, 2, _binary_int(_n), kind="binary", differentiable=False, array_fn=_n))


def _integer_only(name):
    """Inference of torch's integer-only binary ops: the common dtype (torch's result_type, so a bool tensor with an
    integer tensor or a Python int is that integer dtype) must be an integer one; bool with bool, floats and complex
    are refused, as torch's kernels refuse them (``"lshift_cpu" not implemented for 'Float'``)."""
    def f(metas, attrs):
        d = binary_dtype(metas)
        if d.category != 1:
            raise DTypeError(f"{name} is only supported for integer tensors, got {d}")
        return broadcast(metas[0][0], metas[1][0]), d
    return f


#: torch's integer-only binary ops: name -> (array function, doc). The shifts are numpy's and MLX's functions of that
#: name (torch's edge counts: a count below 0 or not below the width shifts every bit out, the sign's copies for a
#: right shift; MLX's kernel is written by hand, it masks the count); numpy's gcd and lcm differ from torch's at the
#: dtype's minimum and where lcm overflows, and MLX has neither, so those kernels (and the suite's references) are
#: written by hand: array function None
INTEGER_BINARY = {
    "bitwise_left_shift": ("bitwise_left_shift", "a << b in a's and b's common integer dtype, truncated to it; 0 where "
                           "b < 0 or b >= the dtype's width (torch's)."),
    "bitwise_right_shift": ("bitwise_right_shift", "a >> b (arithmetic) in the common integer dtype; where b < 0 or b "
                            "is past the width, the sign's copies (-1 or 0; 0 for uint8), as torch's."),
    "gcd": (None, "Greatest common divisor in the common integer dtype, torch's: Euclid on |a| and |b| (gcd(0, 0) is "
            "0; |.| of the dtype's minimum wraps to itself, as torch's does)."),
    "lcm": (None, "Least common multiple in the common integer dtype, torch's |a / gcd(a, b) * b| (0 where either is "
            "0; overflow wraps as torch's does, and so does the minimum over a gcd of -1, where torch's division "
            "traps)."),
}
for _n, (_f, _doc) in INTEGER_BINARY.items():
    register_op(OpDef(_n, 2, _integer_only(_n), kind="binary", differentiable=False, array_fn=_f, methods=(_n,),
                      doc=_doc))


def _where_infer(metas, attrs):
    (sc, dc), (sa, da), (sb, db) = metas
    return broadcast_many(sc, sa, sb), binary_dtype([(sa, da), (sb, db)])


register_op(OpDef("where", 3, _where_infer, kind="other",
                  doc="where(cond, a, b): a where cond is true, else b (cond is read as bool)."))


def _cast_infer(metas, attrs):
    return metas[0][0], a_dtype(attrs)


register_op(OpDef("cast", 1, _cast_infer, kind="unary", attrs=("dtype",),
                  doc="Convert to `dtype` (float to int truncates toward zero, as torch)."))
