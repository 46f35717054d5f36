"""Reductions along dims: sum/prod/amax/amin, argmax/argmin, argsort and the scans (cumsum, cumprod).
"""

from __future__ import annotations

from .. import dtypes as D
from ..errors import DTypeError, ShapeError
from ..shapes import norm_dim, numel, reduced
from .attrs import a_bool, a_dims, a_dtype, a_int
from .table import OpDef, register_op


def _reduce_infer(kind):
    def f(metas, attrs):
        (s, d), = metas
        dims = a_dims(attrs, len(s))
        keep = a_bool(attrs, "keepdim")
        if kind == "sum":
            out = a_dtype(attrs) if attrs.get("dtype") is not None else (
                D.int64 if d.category < 2 else d)
        elif kind in ("all", "any"):
            out = D.bool_
        else:
            out = d
            if d.is_complex:  # complex numbers have no order
                raise DTypeError(f"{kind}(): complex tensors are not supported ({d.name})")
            if kind in ("amax", "amin") and any(s[i] == 0 for i in dims if i < len(s)):
                raise ShapeError(f"{kind}(): expected reduction dim to have non-zero size")
        return reduced(s, dims, keep), out
    return f


for _n in ("sum", "prod", "amax", "amin"):
    register_op(OpDef(_n, 1, _reduce_infer("sum" if _n in ("sum", "prod") else _n), kind="reduce",
                      attrs=("dims", "keepdim") + (("dtype",) if _n in ("sum", "prod") else ())))


def _refuse_complex(name: str, d: D.DType) -> None:
    if d.is_complex:
        raise DTypeError(f"{name}: complex tensors have no order ({d.name})")


def _arg_infer(metas, attrs):
    (s, d), = metas
    _refuse_complex("argmax/argmin", d)
    keep = a_bool(attrs, "keepdim")
    if attrs.get("dim") is None:
        if numel(s) == 0:
            raise ShapeError("argmax/argmin of an empty tensor")
        return ((1,) * len(s) if keep else ()), D.int64
    dim = norm_dim(a_int(attrs, "dim"), len(s))
    if s and s[dim] == 0:
        raise ShapeError("argmax/argmin: expected reduction dim to have non-zero size")
    return reduced(s, (dim,) if s else (), keep), D.int64


for _n in ("argmax", "argmin"):
    register_op(OpDef(_n, 1, _arg_infer, kind="reduce", differentiable=False, attrs=("dim", "keepdim")))


def _argsort_infer(metas, attrs):
    (s, d), = metas
    _refuse_complex("argsort", d)
    if s:
        norm_dim(a_int(attrs, "dim"), len(s))
    a_bool(attrs, "descending")
    return s, D.int64


register_op(OpDef("argsort", 1, _argsort_infer, kind="index", differentiable=False, attrs=("dim", "descending"),
                  doc="The indices that sort ``x`` along ``dim``: stable (equal elements keep their order), NaN "
                      "last when ascending and first when descending, as torch.sort(stable=True)."))


def _scan_infer(metas, attrs):
    (s, d), = metas
    norm_dim(a_int(attrs, "dim"), len(s))
    out = a_dtype(attrs) if attrs.get("dtype") is not None else (D.int64 if d.category < 2 else d)
    return s, out


for _n in ("cumsum", "cumprod"):
    register_op(OpDef(_n, 1, _scan_infer, kind="reduce", attrs=("dim", "dtype")))
