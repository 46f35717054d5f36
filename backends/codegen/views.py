"""Positions in tensors, and how movement ops map them: the index arithmetic that replaces copies.

An :class:`Idx` is a multi-index over a shape, kept as one flat expression while the access stays contiguous (so a
contiguous chain reads ``b[gid]`` with no division at all); permutes, expands, slices, flips and pads switch to one
index per dimension. Padding adds a validity mask under which a position may lie outside its tensor.
"""

from __future__ import annotations

import math

from tensorwire.protocol import dtypes as D

from .ir import X, alu, iconst

#: the ops that only move data: their outputs are index arithmetic over their input
MOVEMENT = frozenset({"reshape", "permute", "expand", "slice", "flip", "pad", "copy"})


def _strides(shape) -> list[int]:
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return st[::-1]


class Idx:
    """A position in a tensor of ``shape``: a flat index and/or one index per dim, and a validity mask
    (padding) under which the position may be outside the tensor. ``size(role, n)``, when given
    (``KernelBuilder.size``), makes the sizes its index arithmetic divides and multiplies by (its dims and
    strides) kernel parameters, so the source does not depend on them; positions derived from it keep it."""

    __slots__ = ("shape", "_flat", "_dims", "valid", "size")

    def __init__(self, shape, flat: X | None = None, dims: list | None = None, valid: X | None = None, size=None):
        self.shape, self._flat, self._dims, self.valid, self.size = tuple(shape), flat, dims, valid, size

    def n(self, v: int):
        """The size ``v`` as this position's arithmetic uses it: a parameter (see the class doc) or the int."""
        return v if self.size is None or v <= 1 else self.size(f"block{v}", v)

    @property
    def dims(self) -> list[X]:
        if self._dims is None:
            self._dims = [(self._flat // self.n(s)) % self.n(n) if n != 1 else iconst(0)
                          for n, s in zip(self.shape, _strides(self.shape))]
        return self._dims

    @property
    def flat(self) -> X:
        if self._flat is None:
            acc = iconst(0)
            for d, s in zip(self.dims, _strides(self.shape)):
                acc = acc + d * self.n(s)
            self._flat = acc
        return self._flat


def _and(a: X | None, b: X | None) -> X | None:
    if a is None:
        return b
    if b is None:
        return a
    return alu("land", D.bool_, a, b)


def broadcast_idx(idx: Idx, shape) -> Idx:
    """Where an input of ``shape`` is read for output position ``idx`` (numpy broadcasting; the divisor or modulus
    of a broadcast over leading or trailing dims is a parameter where ``idx``'s sizes are, see :class:`Idx`)."""
    shape = tuple(shape)
    size = idx.size
    if shape == idx.shape:
        return idx
    if math.prod(shape) == 1:
        return Idx(shape, flat=iconst(0), valid=idx.valid, size=idx.size)
    off = len(idx.shape) - len(shape)
    full = (1,) * off + shape
    if idx._flat is not None:  # a flat index: a broadcast over leading or trailing dims is one divide or modulo
        k = len(full)
        while k and full[k - 1] == 1:
            k -= 1
        if full[:k] == idx.shape[:k]:  # [a, b, 1, 1] read from [a, b, c, d]: flat // (c * d)
            return Idx(shape, flat=idx.flat // idx.n(math.prod(idx.shape[k:])), valid=idx.valid, size=size)
        k = 0
        while k < len(full) and full[k] == 1:
            k += 1
        if full[k:] == idx.shape[k:]:  # [1, 1, c, d] (or [c, d]) read from [a, b, c, d]: flat % (c * d)
            return Idx(shape, flat=idx.flat % idx.n(math.prod(idx.shape[k:])), valid=idx.valid, size=size)
    dims = [iconst(0) if n == 1 else idx.dims[off + k] for k, n in enumerate(shape)]
    return Idx(shape, dims=dims, valid=idx.valid, size=size)


def view_idx(st, idx: Idx, starts: list | None = None) -> tuple[Idx, object]:
    """Map an output position of movement step ``st`` to its input's; returns (input idx, pad value or None).
    ``starts``: a slice's start in each dimension as expressions (kernel scalars, where its bounds are dynamic)."""
    in_shape = tuple(st.in_meta[0][0])
    op, a = st.op, st.attrs
    if op == "copy" or (op == "reshape" and in_shape == idx.shape):
        return Idx(in_shape, idx._flat, idx._dims, idx.valid, idx.size), None
    if op == "reshape":
        if [n for n in in_shape if n != 1] == [n for n in idx.shape if n != 1] and idx._dims is not None:
            it = iter(d for d, n in zip(idx.dims, idx.shape) if n != 1)
            return Idx(in_shape, dims=[next(it) if n != 1 else iconst(0) for n in in_shape], valid=idx.valid,
                       size=idx.size), None
        return Idx(in_shape, flat=idx.flat, valid=idx.valid, size=idx.size), None
    if op == "permute":
        nd = len(in_shape)
        dims: list = [None] * nd
        for o, p in enumerate(a["dims"]):
            dims[p % nd] = idx.dims[o]
        return Idx(in_shape, dims=dims, valid=idx.valid, size=idx.size), None
    if op == "expand":
        return broadcast_idx(idx, in_shape), None
    if op == "slice":
        if starts is None:
            starts = [iconst(s) for s in a["starts"]]
        dims = [s + d * t for d, s, t in zip(idx.dims, starts, a["steps"])]
        return Idx(in_shape, dims=dims, valid=idx.valid, size=idx.size), None
    if op == "flip":
        nd = max(len(in_shape), 1)
        fl = a.get("dims")
        fl = range(len(in_shape)) if fl is None else ([fl] if isinstance(fl, int) else fl)
        fl = {d % nd for d in fl}
        dims = [iconst(n - 1) + d * (-1) if k in fl else d for k, (d, n) in enumerate(zip(idx.dims, in_shape))]
        return Idx(in_shape, dims=dims, valid=idx.valid, size=idx.size), None
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
        return Idx(in_shape, dims=dims, valid=valid, size=idx.size), a.get("value", 0)
    raise ValueError(f"{op} is not a movement op")
