"""Indexing ops: gather, scatter, scatter_add, scatter_reduce, advanced indexing, index_put and setslice.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from ..errors import DTypeError, ShapeError
from ..shapes import broadcast, broadcast_many, check_shape, norm_dim
from .attrs import a_bool, a_int, a_str
from .movement import _slice_infer
from .table import OpDef, register_op


def _index_dtype(d: D.DType, what: str):
    if d not in (D.int64, D.int32, D.int16, D.int8, D.uint8):
        raise DTypeError(f"{what}: index tensor must be an integer tensor, got {d}")


def _gather_infer(metas, attrs):
    (s, d), (si, di) = metas
    _index_dtype(di, "gather")
    dim = norm_dim(a_int(attrs, "dim"), len(s))
    if len(si) != len(s):
        raise ShapeError("gather(): index tensor must have the same number of dimensions as input tensor")
    for i, (a, b) in enumerate(zip(s, si)):
        if i != dim and b > a:
            raise ShapeError(f"gather(): size of index {list(si)} does not fit input {list(s)} at dim {i}")
    return si, d


def _scatter_infer(metas, attrs):
    (s, d), (si, di), (ss, ds) = metas
    _index_dtype(di, "scatter")
    dim = norm_dim(a_int(attrs, "dim"), len(s))
    if not (len(si) == len(s) == len(ss)):
        raise ShapeError("scatter(): index, src and self must have the same number of dimensions")
    for i in range(len(s)):
        if si[i] > ss[i] or (i != dim and si[i] > s[i]):
            raise ShapeError(f"scatter(): index {list(si)} does not fit src {list(ss)} / self {list(s)}")
    return s, d


#: the reductions of the ``scatter_reduce`` primitive; torch's other two are made of ``scatter_add`` ("sum", and the
#: sum and count of "mean": client/scatter_reductions.py)
SCATTER_REDUCES = ("prod", "amax", "amin")


def scatter_identity(reduce: str, dtype: D.DType):
    """The value a ``scatter_reduce`` without ``include_self`` starts each position it writes from: 1 for "prod",
    the dtype's lowest value for "amax" (-inf for floats, False for bool) and its highest for "amin"."""
    if reduce == "prod":
        return True if dtype is D.bool_ else 1
    high = reduce == "amin"
    if dtype is D.bool_:
        return high
    if dtype.is_floating_point:
        return math.inf if high else -math.inf
    info = np.iinfo(dtype.np)
    return int(info.max if high else info.min)


def _scatter_reduce_infer(metas, attrs):
    reduce = a_str(attrs, "reduce", SCATTER_REDUCES)
    a_bool(attrs, "include_self", None)  # (required: no default on the wire)
    if metas[0][1].is_complex and reduce != "prod":
        raise DTypeError(f"scatter_reduce(): reduce {reduce!r} is not supported for complex tensors")
    return _scatter_infer(metas, attrs)


def _index_infer(metas, attrs):
    (s, d), *idx = metas
    dim = a_int(attrs, "dim")
    if not idx:
        raise ShapeError("index needs at least one index tensor")
    if not 0 <= dim or dim + len(idx) > len(s):
        raise ShapeError(f"too many indices for tensor of dimension {len(s)}")
    for _, di in idx:
        _index_dtype(di, "index")
    b = broadcast_many(*(si for si, _ in idx))
    return check_shape(s[:dim] + b + s[dim + len(idx):]), d


def _index_put_infer(metas, attrs):
    (s, d), (sv, dv), *idx = metas
    a_bool(attrs, "accumulate")
    target, _ = _index_infer([(s, d), *idx], attrs)
    if broadcast(target, sv) != target:
        raise ShapeError(f"shape mismatch: value tensor of shape {list(sv)} cannot be broadcast to "
                         f"indexing result of shape {list(target)}")
    return s, d


def _setslice_infer(metas, attrs):
    (s, d), (sv, dv) = metas
    out, _ = _slice_infer([(s, d)], attrs)
    if broadcast(out, sv) != out:
        raise ShapeError(f"shape mismatch: value tensor of shape {list(sv)} cannot be broadcast to "
                         f"indexing result of shape {list(out)}")
    return s, d


register_op(OpDef("gather", 2, _gather_infer, kind="index", attrs=("dim",)))
register_op(OpDef("scatter", 3, _scatter_infer, kind="index", attrs=("dim",),
                  doc="out = self with out[index[i]][j] = src[i][j] along dim (torch.scatter)."))
register_op(OpDef("scatter_add", 3, _scatter_infer, kind="index", attrs=("dim",)))
register_op(OpDef("scatter_reduce", 3, _scatter_reduce_infer, kind="index", attrs=("dim", "reduce", "include_self"),
                  doc="out = self with src[i][j] reduced (reduce: prod, amax or amin) into out[index[i][j]][j] along "
                      "dim, in index order; without include_self a position written starts from the reduction's "
                      "identity (scatter_identity), not from self (torch.scatter_reduce)."))
register_op(OpDef("index", None, _index_infer, kind="index", attrs=("dim",),
                  doc="Advanced indexing: x[:, ..., i1, ..., ik] with the k index tensors (broadcast together) "
                      "on consecutive dims starting at `dim`, numpy semantics; negative indices count from "
                      "the end; out-of-range raises IndexError."))
register_op(OpDef("index_put", None, _index_put_infer, kind="index", attrs=("dim", "accumulate"),
                  doc="index_put(x, value, *indices): x with x[..., i1, ..., ik, ...] = value (+= if accumulate)."))
register_op(OpDef("setslice", 2, _setslice_infer, kind="index", attrs=("starts", "stops", "steps"),
                  doc="out = x with x[slices] = value (value broadcast to the slice)."))
