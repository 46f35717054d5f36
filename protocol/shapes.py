"""Shape arithmetic shared by the op table's inference rules."""

from __future__ import annotations

import math
import operator

from .errors import IndexOutOfRange, ProtocolError, ShapeError

Shape = tuple[int, ...]

MAX_NDIM = 64
MAX_NUMEL = 1 << 40


def check_shape(shape) -> Shape:
    """Validate a shape from the wire or the user: a sequence of non-negative ints, bounded."""
    if isinstance(shape, int):
        shape = (shape,)
    elif type(shape) is tuple and len(shape) <= MAX_NDIM:  # (the usual case, a tuple of plain ints: itself)
        for s in shape:
            if type(s) is not int or s < 0:
                break
        else:
            if math.prod(shape) <= MAX_NUMEL:
                return shape
    try:  # operator.index: ints and numpy ints; a float (2.5) or a string is not a size
        out = tuple(operator.index(s) for s in shape)
    except (TypeError, ValueError):
        raise ShapeError(f"a shape must be a sequence of ints, got {shape!r}") from None
    if len(out) > MAX_NDIM:
        raise ShapeError(f"at most {MAX_NDIM} dimensions are supported, got {len(out)}")
    n = 1
    for s in out:
        if s < 0:
            raise ShapeError(f"negative dimension in shape {out}")
        n *= s
    if n > MAX_NUMEL:
        raise ShapeError(f"shape {out} has {n} elements, more than the limit {MAX_NUMEL}")
    return out


def numel(shape: Shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


_bcast_cache: dict[tuple[Shape, Shape], Shape] = {}


def broadcast(a: Shape, b: Shape) -> Shape:
    """numpy/PyTorch broadcasting of two shapes."""
    if a == b:
        return a
    key = (a, b)
    r = _bcast_cache.get(key)
    if r is not None:
        return r
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + a
    pb = (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ShapeError(f"shapes {list(a)} and {list(b)} cannot be broadcast together "
                             f"(size {x} vs {y})")
    r = tuple(out)
    if len(_bcast_cache) < 4096:
        _bcast_cache[key] = r
    return r


def broadcast_many(*shapes: Shape) -> Shape:
    out: Shape = ()
    for s in shapes:
        out = broadcast(out, s)
    return out


def norm_dim(d, ndim: int, *, allow_end: bool = False) -> int:
    """Normalise a possibly negative dim for a tensor of ``ndim`` dims (0-d accepts 0 and -1)."""
    if not isinstance(d, int) or isinstance(d, bool):
        raise ProtocolError(f"a dim must be an int, got {d!r}")
    hi = ndim + (1 if allow_end else 0)
    lo_n = max(hi, 1)
    if not -lo_n <= d < lo_n:
        raise IndexOutOfRange(f"dimension out of range (expected to be in range of [{-lo_n}, {lo_n - 1}], "
                              f"but got {d})")
    return d % lo_n if hi else 0


def norm_dims(dims, ndim: int) -> tuple[int, ...]:
    """Normalise a dim, a tuple of dims or None (all dims) into a sorted tuple without repeats."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(sorted({norm_dim(d, ndim) for d in dims}))
    if len(out) != len(tuple(dims)):
        raise ShapeError(f"dim {list(dims)} appears multiple times in the list of dims")
    return out


def reduced(shape: Shape, dims: tuple[int, ...], keepdim: bool) -> Shape:
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def infer_reshape(shape: Shape, target) -> Shape:
    """Resolve a reshape target with at most one -1 against the input's element count."""
    target = tuple(int(t) for t in target)
    n = numel(shape)
    if target.count(-1) > 1:
        raise ShapeError("only one dimension can be inferred (-1)")
    if -1 in target:
        rest = numel(tuple(t for t in target if t != -1))
        if rest == 0 or n % rest:
            raise ShapeError(f"shape '{list(target)}' is invalid for input of size {n}")
        target = tuple(n // rest if t == -1 else t for t in target)
    if any(t < 0 for t in target) or numel(target) != n:
        raise ShapeError(f"shape '{list(target)}' is invalid for input of size {n}")
    return check_shape(target)


def slice_len(start: int, stop: int, step: int) -> int:
    if step <= 0:
        raise ShapeError("slice step must be positive")
    return max(0, (stop - start + step - 1) // step)
