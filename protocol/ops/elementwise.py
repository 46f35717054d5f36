"""Elementwise primitives: unary and binary math, comparisons, bitwise ops, ``where`` and ``cast``, with
numpy/torch type promotion.
"""

from __future__ import annotations

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


def _unary_bool(metas, attrs):
    return metas[0][0], D.bool_


def _bitwise_not(metas, attrs):
    (s, d), = metas
    if d.is_floating_point:
        raise DTypeError(f"bitwise_not is only supported for integer and bool tensors, got {d}")
    return s, d


for _n in FLOAT_UNARY:
    register_op(OpDef(_n, 1, _unary_float, kind="unary"))
def _neg_infer(metas, attrs):
    (s, d), = metas
    if d is D.bool_:
        raise DTypeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                         "invert a mask, use the `~` or `logical_not()` operator instead.")
    return s, d


for _n in SAME_UNARY:  # all differentiable, as torch's: sign and the rounding ops with a zero gradient
    register_op(OpDef(_n, 1, _neg_infer if _n == "neg" else _unary_same, kind="unary"))
for _n in BOOL_UNARY:
    register_op(OpDef(_n, 1, _unary_bool, kind="unary", differentiable=False))
register_op(OpDef("logical_not", 1, _unary_bool, kind="unary", differentiable=False))
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
        if d.is_floating_point:
            raise DTypeError(f"{name} is only supported for integer and bool tensors, got {d}")
        return broadcast(metas[0][0], metas[1][0]), d
    return f


def _sub_infer(metas, attrs):
    out = _binary_same(metas, attrs)
    if out[1] is D.bool_:
        raise DTypeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                         "Use the `^` or `logical_xor()` operator instead.")
    return out


for _n in ("add", "sub", "mul", "maximum", "minimum", "floor_divide", "remainder"):
    # (floor_divide is differentiable on floats as torch's: a zero gradient, autograd/vjp.py)
    register_op(OpDef(_n, 2, _sub_infer if _n == "sub" else _binary_same, kind="binary"))


def _pow_infer(metas, attrs):
    return _binary_same(metas, attrs)


register_op(OpDef("pow", 2, _pow_infer, kind="binary"))
register_op(OpDef("div", 2, _binary_float, kind="binary", doc="True division (ints give floats)."))
register_op(OpDef("atan2", 2, _binary_float, kind="binary"))
for _n in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"):
    register_op(OpDef(_n, 2, _binary_bool, kind="binary", differentiable=False))
for _n in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    register_op(OpDef(_n, 2, _binary_int(_n), kind="binary", differentiable=False))


def _where_infer(metas, attrs):
    (sc, dc), (sa, da), (sb, db) = metas
    return broadcast_many(sc, sa, sb), binary_dtype([(sa, da), (sb, db)])


register_op(OpDef("where", 3, _where_infer, kind="other",
                  doc="where(cond, a, b): a where cond is true, else b (cond is read as bool)."))


def _cast_infer(metas, attrs):
    return metas[0][0], a_dtype(attrs)


register_op(OpDef("cast", 1, _cast_infer, kind="unary", attrs=("dtype",),
                  doc="Convert to `dtype` (float to int truncates toward zero, as torch)."))
