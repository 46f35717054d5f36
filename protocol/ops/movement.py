"""Movement ops: reshape, permute, expand, slice, flip, pad, cat and copy. A compiling backend turns these
into index arithmetic.
"""

from __future__ import annotations

from .. import dtypes as D
from ..errors import ShapeError
from ..shapes import check_shape, infer_reshape, norm_dim, slice_len
from .attrs import a_dims, a_int, a_ints, a_num
from .table import OpDef, register_op


def _reshape_infer(metas, attrs):
    (s, d), = metas
    return infer_reshape(s, a_ints(attrs, "shape")), d


def _permute_infer(metas, attrs):
    (s, d), = metas
    dims = a_ints(attrs, "dims")
    if len(dims) != len(s):
        raise ShapeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match "
                         f"the length of the desired ordering of dimensions i.e. input.dim() = {len(s)} "
                         f"is not equal to len(dims) = {len(dims)}")
    nd = tuple(norm_dim(x, len(s)) for x in dims)
    if len(set(nd)) != len(nd):
        raise ShapeError(f"permute(): duplicate dims are not allowed in {list(dims)}")
    return tuple(s[i] for i in nd), d


def _expand_infer(metas, attrs):
    (s, d), = metas
    target = a_ints(attrs, "shape")
    if len(target) < len(s):
        raise ShapeError(f"expand: the number of sizes provided ({len(target)}) must be greater or equal "
                         f"to the number of dimensions in the tensor ({len(s)})")
    pad = (1,) * (len(target) - len(s)) + s
    out = []
    for i, (have, want) in enumerate(zip(pad, target)):
        if want == -1:
            if i < len(target) - len(s):
                raise ShapeError("expand: -1 is not allowed in a leading, non-existing dimension")
            want = have
        if have != want and have != 1:
            raise ShapeError(f"The expanded size of the tensor ({want}) must match the existing size ({have}) "
                             f"at non-singleton dimension {i}.  Target sizes: {list(target)}.  "
                             f"Tensor sizes: {list(s)}")
        out.append(want)
    return check_shape(out), d


def _slice_infer(metas, attrs):
    (s, d), = metas
    starts, stops, steps = a_ints(attrs, "starts"), a_ints(attrs, "stops"), a_ints(attrs, "steps")
    if not len(starts) == len(stops) == len(steps) == len(s):
        raise ShapeError("slice: starts, stops and steps need one entry per dimension")
    out = []
    for n, a, b, st in zip(s, starts, stops, steps):
        if not (0 <= a <= n and 0 <= b <= n):
            raise ShapeError(f"slice bounds [{a}:{b}] out of range for size {n}")
        if st <= 0:
            slice_len(a, b, st)  # (raises its error)
        m = (b - a + st - 1) // st  # slice_len, inline: this runs for every slice a client records
        out.append(m if m > 0 else 0)
    return tuple(out), d


def _flip_infer(metas, attrs):
    (s, d), = metas
    a_dims(attrs, len(s))
    return s, d


def _pad_infer(metas, attrs):
    (s, d), = metas
    pads = a_ints(attrs, "pads")  # [lo0, hi0, lo1, hi1, ...] for every dim, in dim order
    a_num(attrs, "value", 0)
    if len(pads) != 2 * len(s):
        raise ShapeError("pad: need a (low, high) pair for every dimension")
    out = []
    for i, n in enumerate(s):
        m = n + pads[2 * i] + pads[2 * i + 1]
        if m < 0:
            raise ShapeError(f"pad: resulting size of dim {i} would be negative")
        out.append(m)
    return check_shape(out), d


def _cat_infer(metas, attrs):
    for i, (s, _) in enumerate(metas):
        if not s:
            raise ShapeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    s0, _ = metas[0]
    dim = norm_dim(a_int(attrs, "dim"), len(s0))
    dt = metas[0][1]
    total = 0
    for s, d in metas:
        if len(s) != len(s0) or any(a != b for i, (a, b) in enumerate(zip(s, s0)) if i != dim):
            raise ShapeError(f"cat: sizes of tensors must match except in dimension {dim}; "
                             f"got {list(s0)} and {list(s)}")
        total += s[dim]
        dt = D.promote_types(dt, d)
    return check_shape(s0[:dim] + (total,) + s0[dim + 1:]), dt


register_op(OpDef("reshape", 1, _reshape_infer, kind="movement", attrs=("shape",)))
register_op(OpDef("permute", 1, _permute_infer, kind="movement", attrs=("dims",)))
register_op(OpDef("expand", 1, _expand_infer, kind="movement", attrs=("shape",)))
def _slice_lengths(attrs) -> tuple:
    """What a plan of a slice depends on: each dimension's length and step (its bounds may move between replays:
    ``data[i:i + 8]`` at a new ``i`` every step reuses the plan)."""
    steps = attrs["steps"]
    lens = []
    for a, b, st in zip(attrs["starts"], attrs["stops"], steps):  # (slice_len, inline: it runs for every slice)
        if st <= 0:
            slice_len(a, b, st)  # (raises its error)
        m = (b - a + st - 1) // st
        lens.append(m if m > 0 else 0)
    return tuple(lens), tuple(steps)


register_op(OpDef("slice", 1, _slice_infer, kind="movement", attrs=("starts", "stops", "steps"),
                  dynamic=("starts", "stops"), dynamic_key=_slice_lengths,
                  doc="Strided slice with positive steps; bounds already clamped to [0, size]."))
register_op(OpDef("flip", 1, _flip_infer, kind="movement", attrs=("dims",)))
register_op(OpDef("pad", 1, _pad_infer, kind="movement", attrs=("pads", "value"),
                  doc="Constant padding; pads = [low0, high0, low1, high1, ...] (negative crops)."))
register_op(OpDef("cat", None, _cat_infer, kind="movement", attrs=("dim",)))


def _copy_infer(metas, attrs):
    return metas[0]


register_op(OpDef("copy", 1, _copy_infer, kind="movement",
                  doc="A fresh copy; across devices (the node's device differs from its input's) it is "
                      "the transfer that `.to(device)` records."))
