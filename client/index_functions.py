"""torch's functions that make or count integer indices: ``bincount``, ``triu_indices``, ``tril_indices`` and
``unravel_index`` (``tw.bincount(x)``, ``x.bincount()``, ``tw.triu_indices(3, 3)``).

``bincount``'s result has as many bins as the largest value plus one: a size the values decide, so it reads the
input's least and largest values from the device first (one round trip, as ``nonzero`` and ``unique`` read theirs),
then counts with one ``index_add`` there. The triangles' indices are a function of their arguments alone, made on
the client (numpy's ``triu_indices``: the same row-major order as torch's) and uploaded. ``unravel_index`` is
arithmetic on the device, torch's own formula (``indices // (product of the later sizes) % size``, so an index past
the end, or a negative one, wraps as torch's does).
"""

from __future__ import annotations

import builtins

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError

from . import _install
from . import autograd_engine as _autograd
from . import combine as _combine
from . import creation as _creation
from .tensor import Tensor

_INDEX_DTYPES = (D.int32, D.int64)


def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:  # noqa: A002
    """The number of times each value of the 1-d non-negative integer tensor ``input`` occurs (bin ``i`` counts the
    ``i``s), or the sum of ``weights`` over each bin; ``max(input) + 1`` bins, at least ``minlength``. As torch's:
    int64 counts, weights summed in float32 when they are float32 and in float64 otherwise, and no gradient."""
    if not isinstance(input, Tensor):
        raise TypeError(f"bincount(): argument 'input' must be Tensor, not {type(input).__name__}")
    dt = input.dtype
    if dt.is_floating_point or dt.is_complex or dt is D.bool_:
        raise DTypeError(f'"bincount_cpu" not implemented for \'{dt.name}\': bincount counts integers')
    if input.ndim != 1:
        raise ShapeError("bincount only supports 1-d non-negative integral inputs.")
    if type(minlength) is not int:
        raise TypeError(f"bincount(): argument 'minlength' must be int, not {type(minlength).__name__}")
    if minlength < 0:
        raise ValueError("minlength should be >= 0")
    n = input.shape[0]
    if weights is not None:
        if not isinstance(weights, Tensor):
            raise TypeError(f"bincount(): argument 'weights' must be Tensor, not {type(weights).__name__}")
        if weights.ndim != 1 or weights.shape[0] != n:
            raise ShapeError("weights should be 1-d and have the same length as input")
    if n == 0:  # (torch: int64 zeros, with weights or without)
        return _creation.zeros(minlength, dtype=D.int64, device=input.device)
    lo, hi = _combine.stack([input.amin(), input.amax()]).tolist()
    if lo < 0:
        raise ValueError("bincount only supports 1-d non-negative integral inputs.")
    with _autograd.no_grad():  # (torch has no derivative for it)
        if weights is None:
            out_dtype, added = D.int64, _creation.ones(n, dtype=D.int64, device=input.device)
        else:
            out_dtype = D.float32 if weights.dtype is D.float32 else D.float64
            added = weights.detach().to(out_dtype)
        out = _creation.zeros(builtins.max(hi + 1, minlength), dtype=out_dtype, device=input.device)
        return out.index_add(0, input.to(D.int64), added)


def _triangle(name: str, row: int, col: int, offset: int, dtype, device) -> Tensor:
    for arg, v in (("row", row), ("col", col), ("offset", offset)):
        if type(v) is not int:
            raise TypeError(f"{name}(): argument '{arg}' must be int, not {type(v).__name__}")
    if row < 0:
        raise ValueError(f"row must be non-negative, got {row}")
    if col < 0:
        raise ValueError(f"col must be non-negative, got {col}")
    dt = D.int64 if dtype is None else D.get(dtype)
    if dt not in _INDEX_DTYPES:
        raise DTypeError(f'"{name}" not implemented for \'{dt.name}\': the indices are int32 or int64')
    make = np.triu_indices if name == "triu_indices" else np.tril_indices
    rows, cols = make(row, offset, col) if row and col else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    return _creation.tensor(np.stack([rows, cols]).astype(dt.np), device=device)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None) -> Tensor:
    """The ``(2, N)`` row and column indices of the upper triangle of a ``row`` x ``col`` matrix, from diagonal
    ``offset`` up (0: the main one; negative: below it), row by row, as torch's."""
    return _triangle("triu_indices", row, col, offset, dtype, device)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None) -> Tensor:
    """The ``(2, N)`` row and column indices of the lower triangle of a ``row`` x ``col`` matrix, up to diagonal
    ``offset`` (0: the main one; positive: above it), row by row, as torch's."""
    return _triangle("tril_indices", row, col, offset, dtype, device)


def unravel_index(indices: Tensor, shape) -> tuple[Tensor, ...]:
    """The coordinates, one int64 tensor a dim of ``shape``, of the flat (row-major) ``indices`` into a tensor of
    that shape, as torch's (an index past the end, or a negative one, wraps around the shape)."""
    if not isinstance(indices, Tensor):
        raise TypeError(f"unravel_index(): 'indices' must be a Tensor, not {type(indices).__name__}")
    dt = indices.dtype
    if dt.is_floating_point or dt.is_complex or dt is D.bool_:
        raise TypeError(f"expected 'indices' to be integer dtype, but got {dt}")
    dims = [shape] if isinstance(shape, int) else list(shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise TypeError(f"expected 'shape' to be int or sequence of ints, but got {shape!r}")
    if any(d < 0 for d in dims):
        raise ValueError(f"'shape' cannot have negative values, but got {tuple(dims)}")
    flat = indices.to(D.int64)
    out, coef = [], 1
    for d in reversed(dims):
        out.append(flat.floor_divide(coef) % d)  # (a dim of 0: integer division by zero, as torch's)
        coef *= d
    return tuple(reversed(out))


FUNCTIONS = {"bincount": bincount, "triu_indices": triu_indices, "tril_indices": tril_indices,
             "unravel_index": unravel_index}
#: Tensor methods (torch has ``Tensor.bincount``; the others are functions only)
METHODS = {"bincount": bincount}

_install.install_methods(Tensor, METHODS)
_install.register(FUNCTIONS)
_install.loaded(__name__)
