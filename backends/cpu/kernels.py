"""numpy kernels for every primitive op (and a few native composites), CPU backend.

Kernel signature: ``kernel(inputs: list[np.ndarray], attrs: dict, shape, dtype) -> np.ndarray``.
Buffers are immutable: a kernel never writes into an input, so movement ops return numpy views.
float16/bfloat16 math runs in float32 and is rounded back, as PyTorch's CPU kernels do.
"""

from __future__ import annotations

import math

import numpy as np

from tensorwire.backends.array_kernels import axes as _axes
from tensorwire.backends.array_kernels import movement_kernels, registrar, scatter_operands
from tensorwire.protocol import dtypes as D
from tensorwire.protocol import random as rng
from tensorwire.protocol.errors import DTypeError, IndexOutOfRange
from tensorwire.protocol.ops import COMPARE, OPS, binary_dtype, scatter_identity

from . import blas, host_c
from .erf import INV_SQRT_2PI as _INV_SQRT_2PI
from .erf import SQRT_HALF as _SQRT_HALF
from .erf import erf_float32

_SCIPY_ERF = None  # (scipy's erf once imported, else math.erf vectorised)


def _erf(x):
    """scipy's erf (exact; math.erf vectorised where scipy is missing), imported on the first call: a client imports
    these kernels for its host ops, and importing scipy.special took ~0.4-1.3 s of a script's first run (issue 37).
    float64 and complex only: float32's is :func:`.erf.erf_float32`, without scipy."""
    global _SCIPY_ERF
    f = _SCIPY_ERF
    if f is None:
        try:
            from scipy.special import erf as f  # lazy: ~0.4-1.3 s to import, for the first erf only
        except ImportError:  # scipy is optional (not a dependency)
            f = np.vectorize(math.erf, otypes=[np.float64])
        _SCIPY_ERF = f
    return f(x)

_HALF = tuple(d.np for d in D.HALF)  # their numpy types


def _compute(dt: D.DType) -> np.dtype:
    return np.dtype(np.float32) if dt.np in _HALF else dt.np


def _out(x: np.ndarray, dt: D.DType) -> np.ndarray:
    return x if x.dtype == dt.np else x.astype(dt.np)


def _arr(x, dt: np.dtype) -> np.ndarray:
    return x if x.dtype == dt else x.astype(dt)


KERNELS: dict = {}
#: ``@kernel(name)``: enters a kernel into :data:`KERNELS`
kernel = registrar(KERNELS)


# creation -------------------------------------------------------------------------------------

@kernel("full")
def _full(ins, a, shape, dt):
    v = a["value"]
    if type(v) is list:  # a complex value travels as [real, imag]
        v = complex(*v)
    # two common fills made without np.full's wrapper (~4x the cost): zeros (a recurrent loop's first hidden state,
    # every step) and a 0-d float (an optimizer's step size); the same values, the same conversions
    elif (type(v) is int and v == 0) or (type(v) is float and v == 0 and math.copysign(1.0, v) > 0):
        return np.zeros(shape, dtype=dt.np)
    elif not shape and type(v) is float and dt.np in _FLOATS:
        return np.array(v, dtype=dt.np)
    return np.full(shape, v, dtype=dt.np)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@kernel("arange")
def _arange(ins, a, shape, dt):
    n, start, step = a["n"], a["start"], a["step"]
    if dt.is_floating_point or isinstance(start, float) or isinstance(step, float):
        v = start + np.arange(n, dtype=np.float64) * step
    else:
        v = start + np.arange(n, dtype=np.int64) * step
    return _out(v, dt)


@kernel("rand")
def _rand(ins, a, shape, dt):
    return rng.uniform(a["seed"], a["offset"], shape, dt.np)


@kernel("randn")
def _randn(ins, a, shape, dt):
    # (the C fill where the CPU compiles: the same numbers, ~10x faster)
    got = host_c.normal(a["seed"], a["offset"], shape, dt.np)
    return got if got is not None else rng.normal(a["seed"], a["offset"], shape, dt.np)


@kernel("randint")
def _randint(ins, a, shape, dt):
    return rng.randint(a["seed"], a["offset"], shape, dt.np, a["low"], a["high"])


# elementwise ------------------------------------------------------------------------------------

# Most elementwise kernels are made from the op table (OpDef.array_fn, the numpy function of that name, at the end of
# this section); these are the ops that need more than that (scipy's erf, integers' rounding, division by zero ...).

def _unary(fn, int_identity=False):
    def k(ins, a, shape, dt):
        x = ins[0]
        if int_identity and not dt.is_floating_point:
            return x
        # (a complex input to a real result, abs's: computed on the complex values)
        return _out(fn(x if x.dtype.kind == "c" else _arr(x, _compute(dt))), dt)
    return k


def _erf_any(x: np.ndarray) -> np.ndarray:
    if x.dtype != np.float32:
        return _erf(x)  # (float64 and complex: scipy's, exact)
    got = host_c.erf_f32(x)  # (the C spelling of erf_float32's algorithm, where the host library has it)
    return erf_float32(x) if got is None else got


KERNELS["erf"] = _unary(_erf_any)
_sign_num = _unary(np.sign)


@kernel("sign")
def _sign(ins, a, shape, dt):
    if dt is D.bool_:  # numpy has no bool loop for sign; sign(b) is b
        return ins[0]
    return _sign_num(ins, a, shape, dt)


for _n, _f in (("floor", np.floor), ("ceil", np.ceil), ("round", np.round), ("trunc", np.trunc)):
    KERNELS[_n] = _unary(_f, int_identity=True)


@kernel("isnan")
def _isnan(ins, a, shape, dt):
    return np.isnan(ins[0]) if ins[0].dtype.kind in "fc" or ins[0].dtype in _HALF else np.zeros(shape, bool)


@kernel("isinf")
def _isinf(ins, a, shape, dt):
    return np.isinf(ins[0]) if ins[0].dtype.kind in "fc" or ins[0].dtype in _HALF else np.zeros(shape, bool)


KERNELS["logical_not"] = lambda ins, a, s, dt: np.logical_not(ins[0])
KERNELS["bitwise_not"] = lambda ins, a, s, dt: np.invert(ins[0])


def _binary(fn, compare=False):
    def k(ins, a, shape, dt):
        x, y = ins
        ct = binary_dtype([(x.shape, D.from_numpy(x.dtype)), (y.shape, D.from_numpy(y.dtype))])
        cnp = _compute(ct) if not compare else ct.np
        if dt.is_floating_point and not compare:
            cnp = _compute(dt)
        r = fn(_arr(x, cnp), _arr(y, cnp))
        return _out(r, dt) if not compare else r
    return k


def _floordiv(x, y):
    if x.dtype.kind in "iu" and np.any(y == 0):
        raise ZeroDivisionError("ZeroDivisionError: integer division by zero")
    return np.floor_divide(x, y)


def _remainder(x, y):
    if x.dtype.kind in "iu" and np.any(y == 0):
        raise ZeroDivisionError("ZeroDivisionError: integer modulo by zero")
    return np.remainder(x, y)


def _pow(x, y):
    if x.dtype.kind in "iu" and np.any(y < 0):
        raise ValueError("Integers to negative integer powers are not allowed.")
    if y.size == 1 and x.dtype.kind == "f" and y.ndim <= x.ndim:  # (a float base to one exponent)
        e = y.item() if y.ndim == 0 else y.reshape(-1)[0]
        if e == 2 or e == 3:
            # torch's CPU pow multiplies for these (its pow_tensor_scalar_optimized_kernel): x * x, x * x * x, to the
            # bit; numpy's power calls pow() per element, ~30x slower (120 us against 4 for 2,000 floats)
            r = np.multiply(x, x)
            if e == 2:
                return r
            # (in place where the square is an array: a 0-d x's is a numpy scalar, which takes no out=)
            return np.multiply(r, x, out=r) if type(r) is np.ndarray else np.multiply(r, x)
    return np.power(x, y)


def _gcd(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """torch's gcd of two arrays of one integer dtype (its ``calc_gcd``: Euclid on |x| and |y| in the dtype, with C's
    truncating remainder). That is numpy's gcd except where an operand is a signed dtype's minimum, whose |.| wraps to
    itself in torch's loop (gcd(-128, 6) is -2 in int8, gcd(-128, 0) is -128): those elements run the loop."""
    g = np.asarray(np.gcd(x, y))
    if x.dtype.kind != "i":
        return g
    lo = np.iinfo(x.dtype).min
    at = (x == lo) | (y == lo)
    if not at.any():
        return g
    a, b = (np.broadcast_to(v, g.shape)[at] for v in (x, y))
    a, b = np.abs(a), np.abs(b)  # (numpy's |.| wraps the minimum to itself, as C's)
    while True:
        nz = a != 0
        if not nz.any():
            break
        c = a[nz]
        a[nz] = np.fmod(b[nz], c)  # (C's %: the dividend's sign; never the minimum by -1 here)
        b[nz] = c
    g[at] = b
    return g


def _lcm(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """torch's lcm, ``|x / gcd(x, y) * y|`` in the dtype (0 where the gcd is 0). Its kernel computes 8- and 16-bit
    dtypes in C's int (exact, then truncated) and the others in the dtype, wrapping before the |.|; numpy's lcm takes
    the |.| of the operands first, which differs where the product overflows. Here the product is exact in int64
    (int64: wrapping) and wrapped as torch's; where torch's division traps (the minimum by a gcd of -1), it wraps."""
    g = _gcd(x, y)
    wide = x.dtype.itemsize >= 4
    ct = x.dtype if x.dtype.itemsize == 8 else np.dtype(np.int64)
    g, a, b = g.astype(ct), x.astype(ct), y.astype(ct)
    with np.errstate(all="ignore"):
        neg = g == -1
        q = np.where(neg, np.negative(a), a // np.where((g == 0) | neg, 1, g))  # exact: g divides a
        p = np.multiply(q, b)
        if wide:
            p = np.abs(p.astype(x.dtype))
        else:
            p = np.abs(p).astype(x.dtype)
    return np.where(g == 0, x.dtype.type(0), p)


for _n, _f in (("floor_divide", _floordiv), ("remainder", _remainder), ("pow", _pow), ("gcd", _gcd), ("lcm", _lcm)):
    KERNELS[_n] = _binary(_f)
for _n, _f in (("logical_and", np.logical_and), ("logical_or", np.logical_or),
               ("logical_xor", np.logical_xor)):
    KERNELS[_n] = (lambda f: lambda ins, a, s, dt: f(ins[0], ins[1]))(_f)

#: the elementwise ops whose kernel is the op table's array function as it is: op name -> numpy function
ARRAY_FN: dict[str, np.ufunc] = {n: getattr(np, op.array_fn) for n, op in OPS.items()
                                 if op.array_fn and op.kind in ("unary", "binary") and n not in KERNELS}
for _n, _f in ARRAY_FN.items():
    KERNELS[_n] = _unary(_f) if OPS[_n].nin == 1 else _binary(_f, compare=_n in COMPARE)


_SAME_SIZE_INT = {2: np.int16, 4: np.int32, 8: np.int64}


@kernel("where")
def _where(ins, a, shape, dt):
    c, x, y = _arr(ins[0], np.dtype(bool)), _arr(ins[1], dt.np), _arr(ins[2], dt.np)
    it = _SAME_SIZE_INT.get(dt.np.itemsize)
    if c.size >= _WHERE_BITS_MIN and (dt.np.kind == "f" or dt.np in _HALF) and it is not None:
        return _where_bits(c, x, y, tuple(shape), it, dt.np)
    return np.where(c, x, y)


_WHERE_BITS_MIN = 4096  # elements of the condition from which a float where selects bits (:func:`_where_bits`)


def _where_bits(c: np.ndarray, x: np.ndarray, y: np.ndarray, shape: tuple, it, rt: np.dtype) -> np.ndarray:
    """``np.where(c, x, y)`` of a bool ``c`` and float ``x``, ``y`` of dtype ``rt`` (viewed as the integers ``it`` of
    its size) into ``shape``. np.where branches per element and mispredicts on irregular masks (a ReLU's: ~10x
    slower); selecting the bits, y ^ ((x ^ y) & -c), is branch-free and exact for every value (NaN payloads, -0.0,
    infinities)."""
    m = c.view(np.int8).astype(it)
    np.negative(m, out=m)  # all ones where c
    xi, yi = x.view(it), y.view(it)
    if y.ndim == 0 and not yi:  # y is +0.0 (a ReLU's backward): x & -c
        return np.bitwise_and(m, xi, out=m if m.shape == shape else None).view(rt)
    r = np.bitwise_xor(xi, yi)
    r = np.bitwise_and(r, m, out=r if r.shape == shape else None)
    return np.bitwise_xor(r, yi, out=r).view(rt)


@kernel("cast")
def _cast(ins, a, shape, dt):
    x = ins[0]
    if dt is D.bool_:
        return x != 0
    if x.dtype.kind == "c" and not dt.is_complex:  # complex to real keeps the real part, as torch's
        x = x.real
    if x.dtype in _HALF and not dt.is_floating_point:
        x = x.astype(np.float32)
    if x.dtype.kind == "f" and not dt.is_inexact:
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(dt.np)
    return _arr(x, dt.np)


# reductions ----------------------------------------------------------------------------------------

@kernel("sum")
def _sum(ins, a, shape, dt):
    x = ins[0]
    ct = _compute(dt)
    return _out(np.sum(x, axis=_axes(a, x.ndim), keepdims=a.get("keepdim", False), dtype=ct), dt)


@kernel("prod")
def _prod(ins, a, shape, dt):
    x = ins[0]
    return _out(np.prod(x, axis=_axes(a, x.ndim), keepdims=a.get("keepdim", False), dtype=_compute(dt)), dt)


@kernel("amax")
def _amax(ins, a, shape, dt):
    x = ins[0]
    ax = _axes(a, x.ndim)
    if x.size == 0:
        return np.empty(shape, dt.np)
    return np.max(x, axis=ax, keepdims=a.get("keepdim", False)) if ax else x.copy()


@kernel("amin")
def _amin(ins, a, shape, dt):
    x = ins[0]
    ax = _axes(a, x.ndim)
    if x.size == 0:
        return np.empty(shape, dt.np)
    return np.min(x, axis=ax, keepdims=a.get("keepdim", False)) if ax else x.copy()


def _arg(fn):
    def k(ins, a, shape, dt):
        x = ins[0]
        if x.dtype in _HALF:
            x = x.astype(np.float32)
        if a.get("dim") is None or x.ndim == 0:
            return np.asarray(fn(x.reshape(-1)), dtype=np.int64).reshape(shape)
        return np.asarray(fn(x, axis=a["dim"] % x.ndim, keepdims=a.get("keepdim", False)), dtype=np.int64)
    return k


@kernel("argsort")
def _argsort(ins, a, shape, dt):
    """Stable; NaN last ascending (numpy's order), first descending: the descending order is the stable ascending
    order of the row reversed, read backwards."""
    x = ins[0]
    if x.dtype in _HALF:
        x = x.astype(np.float32)
    if x.ndim == 0:
        return np.zeros((), np.int64)
    d = a["dim"] % x.ndim
    if not a.get("descending"):
        return np.argsort(x, axis=d, kind="stable").astype(np.int64)
    n = x.shape[d]
    rev = np.argsort(np.flip(x, d), axis=d, kind="stable")
    return np.flip(n - 1 - rev, d).astype(np.int64)


KERNELS["argmax"] = _arg(np.argmax)
KERNELS["argmin"] = _arg(np.argmin)


@kernel("cumsum")
def _cumsum(ins, a, shape, dt):
    x = ins[0]
    if x.ndim == 0:
        return _out(x, dt)
    return _out(np.cumsum(x, axis=a["dim"] % x.ndim, dtype=_compute(dt)), dt)


@kernel("cumprod")
def _cumprod(ins, a, shape, dt):
    x = ins[0]
    if x.ndim == 0:
        return _out(x, dt)
    return _out(np.cumprod(x, axis=a["dim"] % x.ndim, dtype=_compute(dt)), dt)


# movement --------------------------------------------------------------------------------------------

KERNELS["reshape"] = lambda ins, a, shape, dt: ins[0].reshape(shape)
KERNELS.update(movement_kernels(np))  # permute, expand, copy


@kernel("slice")
def _slice(ins, a, shape, dt):
    return ins[0][tuple(map(slice, a["starts"], a["stops"], a["steps"]))]


@kernel("flip")
def _flip(ins, a, shape, dt):
    x = ins[0]
    return np.flip(x, axis=_axes(a, x.ndim)) if x.ndim else x


@kernel("pad")
def _pad(ins, a, shape, dt):
    x = ins[0]
    p = a["pads"]
    if x.ndim == 0:  # nothing to pad (np.pad rejects an empty pad_width)
        return x
    crop = tuple(slice(max(-p[2 * i], 0), x.shape[i] - max(-p[2 * i + 1], 0)) for i in range(x.ndim))
    x = x[crop]
    lo = [max(p[2 * i], 0) for i in range(x.ndim)]
    # filled, then the input copied in: ~2x faster than np.pad, which fills each side axis by axis (a slice's
    # gradient is a pad of the whole source, ~10 MB a step for a recurrent layer's packed output)
    # (a zero pad, the gradient's, from np.zeros: calloc'd memory needs no fill pass, ~1.5x faster for 8 MB)
    v = a.get("value", 0)
    zero = type(v) in (int, float, bool) and v == 0 and math.copysign(1.0, v) > 0  # (not -0.0: its sign is kept)
    out = np.zeros(tuple(shape), x.dtype) if zero else np.full(
        tuple(shape), np.asarray(v).astype(x.dtype), x.dtype)
    out[tuple(slice(b, b + n) for b, n in zip(lo, x.shape))] = x
    return out


@kernel("cat")
def _cat(ins, a, shape, dt):
    return np.concatenate([_arr(x, dt.np) for x in ins], axis=a["dim"] % len(shape))


# indexing -----------------------------------------------------------------------------------------------

def _check_index(idx: np.ndarray, n: int, what: str, allow_negative: bool):
    if idx.size == 0:
        return idx
    lo, hi = int(_MIN(idx, axis=None)), int(_MAX(idx, axis=None))  # (without min's and max's wrappers: see _MIN)
    if hi >= n or lo < (-n if allow_negative else 0):
        bad = hi if hi >= n else lo
        raise IndexOutOfRange(f"{what}: index {bad} is out of bounds for dimension with size {n}")
    return idx


@kernel("gather")
def _gather(ins, a, shape, dt):
    x, idx = ins
    dim = a["dim"] % max(x.ndim, 1)
    if x.ndim == 0:
        return x.copy()
    _check_index(idx, x.shape[dim], "gather()", False)
    return x[_scatter_index(idx, dim)]  # (np.take_along_axis's fancy index, without its ~10 us of Python a call)


def _grids(shape: tuple) -> list:
    """``np.indices(shape, sparse=True)`` as a list, read-only and kept for the few index shapes a program uses."""
    got = _GRIDS.get(shape)
    if got is None:
        if len(_GRIDS) >= 256:
            _GRIDS.clear()
        got = _GRIDS[shape] = list(np.indices(shape, sparse=True))
        for g in got:
            g.flags.writeable = False
    return got


_GRIDS: dict[tuple, list] = {}


def _scatter_index(idx, dim):
    """The fancy index that reads or writes element ``idx[i...]`` of dimension ``dim`` at position ``i...`` of the
    others (``np.take_along_axis``'s, and ``np.put_along_axis``'s)."""
    grids = _grids(idx.shape).copy()
    grids[dim] = idx.astype(np.int64, copy=False)
    return tuple(grids)


@kernel("scatter")
def _scatter(ins, a, shape, dt):
    x, idx, src, dim = scatter_operands(ins, a, "scatter()", _check_index)
    out = np.array(x, copy=True)
    out[_scatter_index(idx, dim)] = _arr(src[tuple(slice(0, n) for n in idx.shape)], dt.np)
    return out


@kernel("scatter_add")
def _scatter_add(ins, a, shape, dt):
    x, idx, src, dim = scatter_operands(ins, a, "scatter_add()", _check_index)
    out = np.array(x, copy=True)
    np.add.at(out, _scatter_index(idx, dim), _arr(src[tuple(slice(0, n) for n in idx.shape)], dt.np))
    return out


#: the ufunc each ``scatter_reduce`` reduction applies at the positions (``ufunc.at``: in index order)
_SCATTER_UFUNCS = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


@kernel("scatter_reduce")
def _scatter_reduce(ins, a, shape, dt):
    """``ufunc.at`` over the flat output at each index element's position (O(index.numel()); ~9x faster than
    ``ufunc.at`` with a tuple of index arrays), after writing the identity there without ``include_self``."""
    x, idx, src, dim = scatter_operands(ins, a, "scatter_reduce()", _check_index)
    out = np.array(x, dtype=dt.np, copy=True)
    if idx.size == 0:
        return out
    vals = _arr(src[tuple(slice(0, n) for n in idx.shape)] if src.ndim else src.reshape(idx.shape), dt.np)
    flat = out.reshape(-1)
    pos = np.ravel_multi_index(_scatter_index(idx, dim), out.shape).reshape(-1) if out.ndim else \
        np.zeros(idx.size, np.int64)
    if not a["include_self"]:
        flat[pos] = scatter_identity(a["reduce"], dt)
    _SCATTER_UFUNCS[a["reduce"]].at(flat, pos, vals.reshape(-1))
    return out


def _index_key(x, dim, idx):
    for k, i in enumerate(idx):
        _check_index(i, x.shape[dim + k], "index", True)
    return (slice(None),) * dim + tuple(i.astype(np.int64, copy=False) for i in idx)


@kernel("index")
def _index(ins, a, shape, dt):
    x, *idx = ins
    return x[_index_key(x, a["dim"], idx)]


@kernel("index_put")
def _index_put(ins, a, shape, dt):
    x, v, *idx = ins
    key = _index_key(x, a["dim"], idx)
    out = np.array(x, copy=True)
    val = _arr(v, dt.np)
    if a.get("accumulate"):
        _add_at(out, key, val, a["dim"], len(idx))
    else:
        out[key] = val
    return out


def _add_at(out: np.ndarray, key: tuple, val: np.ndarray, dim: int, n_idx: int) -> None:
    """``out[key] += val`` in place, repeated indices adding up in the order of ``out[key]``'s elements (numpy's
    ``add.at``). One index along dim 0 of a row-major ``out`` (an embedding's gradient) is ``add.at`` over the flat
    ``out`` at each element's position: the same additions in the same order, ~4x faster than ``add.at``'s row by
    row path for rows of 64 floats."""
    i = key[0] if dim == 0 and n_idx == 1 and out.size and out.flags.c_contiguous else None
    rows = out.shape[0] if out.ndim else 0
    # (an index out of bounds takes add.at's own path, which raises numpy's IndexError: a flat position made of
    # one past -rows would wrap to another row)
    lo = int(i.min()) if i is not None and i.size else None
    if lo is not None and -rows <= lo and i.max() < rows:
        if lo < 0:
            i = np.where(i < 0, i + rows, i)
        inner = out.size // out.shape[0]
        pos = (i.reshape(-1, 1) * inner + np.arange(inner)).reshape(-1)
        np.add.at(out.reshape(-1), pos, np.broadcast_to(val, i.shape + out.shape[1:]).reshape(-1))
        return
    np.add.at(out, key, np.broadcast_to(val, out[key].shape))


@kernel("setslice")
def _setslice(ins, a, shape, dt):
    x, v = ins
    out = np.array(x, copy=True)
    out[tuple(slice(s, e, st) for s, e, st in zip(a["starts"], a["stops"], a["steps"]))] = _arr(v, dt.np)
    return out


# matmul ---------------------------------------------------------------------------------------------------

def _outer_product(x_shape, y_shape) -> bool:
    """Whether a matmul of operands so shaped contracts a dimension of 1 (both at least 2-D): each element is one
    product, which ``np.multiply`` broadcasting ``[..., M, 1]`` against ``[..., 1, N]`` computes 4-10x faster than
    BLAS (a recurrent layer's weight gradient a step, ``h.T @ g``) and exactly (zeros keep their sign, as torch's)."""
    return len(x_shape) >= 2 and len(y_shape) >= 2 and x_shape[-1] == 1


@kernel("matmul")
def _matmul(ins, a, shape, dt):
    x, y = ins
    ct = _compute(dt)
    x, y = _arr(x, ct), _arr(y, ct)
    if _outer_product(x.shape, y.shape):
        return _out(np.multiply(x, y), dt)
    return _out(blas.matmul(x, y), dt)  # ([..., M, K] @ [K, N]: one gemm over all the rows)


@kernel("linear")
def _linear(ins, a, shape, dt):
    """x @ w^T (+ b) as the decomposition computes it, with the bias added in place into the product: one pass and
    no second buffer. A 16-bit float result is rounded once, after the bias is added to the float32 product."""
    if len(ins) > 2 and dt.np in _HALF:
        y = _matmul([ins[0], ins[1].T], a, shape, D.float32)
        y += _arr(ins[2], np.dtype(np.float32))
        return _out(y, dt)
    y = _matmul([ins[0], ins[1].T], a, shape, dt)
    if len(ins) > 2:
        b = ins[2]
        if y.dtype == b.dtype:
            y += b
        else:
            ct = _compute(dt)
            y = _out(y.astype(ct) + b.astype(ct), dt)
    return y


# native composites (faster than their decomposition on numpy) ----------------------------------------------

@kernel("relu")
def _relu(ins, a, shape, dt):
    return np.maximum(ins[0], ins[0].dtype.type(0))


@kernel("square")
def _square(ins, a, shape, dt):
    x = _arr(ins[0], _compute(dt))
    return _out(x * x, dt)


@kernel("sigmoid")
def _sigmoid(ins, a, shape, dt):
    x = _arr(ins[0], _compute(dt))
    with np.errstate(over="ignore"):
        return _out(1.0 / (1.0 + np.exp(-x)), dt)


@kernel("log_softmax")
def _log_softmax(ins, a, shape, dt):
    """x - logsumexp(x) along ``dim``: the decomposition's steps (protocol/ops/math_composites.py: amax, an infinite
    maximum read as 0, sub, exp, sum, log, add, sub), each rounded to the result dtype as its kernel rounds it, in
    one kernel rather than ~8 steps (a char-RNN's loss takes one a letter). The reductions are the ufuncs'
    ``reduce`` that ``np.max`` and ``np.sum`` call (their Python wrappers cost more than a short row's work)."""
    if dt.is_complex:  # (as the decomposition's amax refuses them, at planning)
        raise DTypeError(f"log_softmax(): complex tensors are not supported ({dt.name})")
    x = ins[0]
    if x.dtype != dt.np:  # (the decomposition's cast to the float dtype)
        x = x.astype(dt.np)
    if x.size == 0:
        return np.empty(shape, dt.np)
    ct = _compute(dt)
    if ct != dt.np or x.ndim == 0:
        return _log_softmax_steps(x, _axes({"dims": [a["dim"]]}, x.ndim), ct, dt)
    return _log_softmax_along(x, a["dim"] % x.ndim)


def _log_softmax_along(x: np.ndarray, ax: int) -> np.ndarray:
    """:func:`_log_softmax` of a non-empty ``x`` of a dtype computed as itself (not a half type), along axis ``ax``
    (also the straight-line runner's callable for such a step: :func:`specialize`): along the last axis by the C
    kernel where it applies (``host_c.log_softmax``)."""
    if ax == x.ndim - 1:
        got = host_c.log_softmax(x)
        if got is not None:
            return got
    m = np.maximum.reduce(x, axis=ax, keepdims=True)
    if not math.isfinite(np.add.reduce(m, axis=None)):  # (an infinite or nan maximum, or a sum that overflowed)
        m = np.where(np.isinf(m), x.dtype.type(0), m)
    t = x - m
    np.exp(t, out=t)
    lse = np.add.reduce(t, axis=ax, dtype=x.dtype, keepdims=True)
    np.log(lse, out=lse)
    lse += m
    return x - lse


def _log_softmax_steps(x: np.ndarray, ax: tuple, ct: np.dtype, dt: D.DType) -> np.ndarray:
    """:func:`_log_softmax` step by step as the decomposition's kernels run it: for the half types (computed in
    float32, rounded to the result dtype after each step) and 0-d inputs (reductions over no axis)."""
    r = dt.np
    m = np.max(x, axis=ax, keepdims=True) if ax else x
    inf = np.isinf(m)
    if inf.any():
        m = np.where(inf, r.type(0), m)
    xc, mc = x.astype(ct), m.astype(ct)
    e = np.exp((xc - mc).astype(r).astype(ct)).astype(r)
    s = np.asarray(np.sum(e, axis=ax, keepdims=True, dtype=ct)).astype(r)
    lse = (np.log(s.astype(ct)).astype(r).astype(ct) + mc).astype(r)
    return np.asarray(xc - lse.astype(ct)).astype(r)


@kernel("log_softmax_grad")
def _log_softmax_grad(ins, a, shape, dt):
    """``g - exp(y) * sum(g)`` along ``dim``: the decomposition's ops in its order, each rounded to the result dtype
    (half types computed in float32 and rounded after each step, as their kernels round them); along the last axis
    of float32/float64 by the C kernel where it applies (``host_c.log_softmax_grad``)."""
    g, y = ins
    ax = a["dim"] % g.ndim if g.ndim else None
    r = dt.np
    if ax == g.ndim - 1 and g.dtype == r and y.dtype == r:
        got = host_c.log_softmax_grad(g, y)
        if got is not None:
            return got
    ct = _compute(dt)
    with np.errstate(all="ignore"):
        gc = _arr(g, ct)
        if ct == r and ax is not None:  # (computed as itself: no rounding between the steps, temporaries reused)
            e = np.exp(_arr(y, ct))
            e *= np.add.reduce(gc, axis=ax, keepdims=True)
            return np.subtract(gc, e, out=e)
        e = np.exp(_arr(y, ct)).astype(r)
        s = np.asarray(np.sum(gc, axis=ax, keepdims=True, dtype=ct)).astype(r) if ax is not None else gc.astype(r)
        p = (e.astype(ct) * s.astype(ct)).astype(r)
        return np.asarray(gc - p.astype(ct)).astype(r)


# fused optimizer updates: the same arithmetic, in the same order, as their decompositions in protocol/ops/optim.py
# (in the compute dtype, rounded once); temporaries are updated in place, inputs never

def _decayed_grad(grad, param, a, ct):
    g = _arr(grad, ct)
    wd = a.get("weight_decay", 0)
    if not wd or param is None:
        return g
    t = _arr(param, ct) * ct.type(wd)
    t += g
    return t


@kernel("adam_exp_avg")
def _adam_exp_avg(ins, a, shape, dt):
    ct = _compute(dt)
    g = _decayed_grad(ins[1], ins[2] if len(ins) > 2 else None, a, ct)
    return _out(_exp_avg(_arr(ins[0], ct), g, ct.type(1 - a.get("beta1", 0))), dt)


def _exp_avg(m, g, c):
    """m + (g - m) (1 - beta1), the new first moment (``c``: 1 - beta1 in the compute dtype)."""
    t = g - m
    t *= c
    t += m
    return t


@kernel("adam_exp_avg_sq")
def _adam_exp_avg_sq(ins, a, shape, dt):
    ct = _compute(dt)
    g = _decayed_grad(ins[1], ins[2] if len(ins) > 2 else None, a, ct)
    b2 = a.get("beta2", 0)
    return _out(_exp_avg_sq(_arr(ins[0], ct), g, ct.type(1 - b2), ct.type(b2)), dt)


def _exp_avg_sq(v, g, c, b2):
    """g (1 - beta2) g + v beta2, the new second moment (``c``, ``b2``: 1 - beta2 and beta2 in the compute dtype)."""
    t = g * c
    t *= g
    t += v * b2
    return t


@kernel("adam_param")
def _adam_param(ins, a, shape, dt):
    ct = _compute(dt)
    p, m, v, step_size, bc2_sqrt = (_arr(x, ct) for x in ins[:5])
    if len(ins) > 5:
        p = p * _arr(ins[5], ct)
    return _out(_adam_new_param(p, m, v, step_size, bc2_sqrt, ct.type(a.get("eps", 0))), dt)


def _adam_new_param(p, m, v, step_size, bc2_sqrt, eps):
    """p - m / (sqrt(v) / bc2_sqrt + eps) * step_size (``eps`` in the compute dtype), computed in one temporary
    where the operands are arrays of the result's shape (each step writes elementwise into the buffer it reads:
    the same values as a new buffer a step)."""
    denom = np.sqrt(v)
    denom /= bc2_sqrt
    denom += eps
    if type(denom) is np.ndarray and denom.shape == np.shape(m) == np.shape(p) and denom.ndim:
        np.divide(m, denom, out=denom)
        denom *= step_size
        return np.subtract(p, denom, out=denom)
    t = m / denom
    t *= step_size
    return p - t


@kernel("lbfgs_direction")
def _lbfgs_direction(ins, a, shape, dt):
    """L-BFGS's two-loop recursion (``protocol/ops/optim.py``) in one kernel: the decomposition's numpy steps in its
    order (each dot product a product then ``np.sum``), two ``[n]`` temporaries in all."""
    ct = _compute(dt)
    g, h_diag, *rest = (_arr(x, ct) for x in ins)
    m = len(rest) // 3
    dirs, stps, ro = rest[:m], rest[m:2 * m], rest[2 * m:]
    q = np.negative(g)
    tmp = np.empty_like(q)
    al = [None] * m
    for i in range(m - 1, -1, -1):
        al[i] = np.sum(np.multiply(stps[i], q, out=tmp), dtype=ct) * ro[i]
        q -= np.multiply(dirs[i], al[i], out=tmp)
    r = q * h_diag
    for i in range(m):
        be = np.sum(np.multiply(dirs[i], r, out=tmp), dtype=ct) * ro[i]
        r += np.multiply(stps[i], al[i] - be, out=tmp)
    return _out(r, dt)


@kernel("add_n")
def _add_n(ins, a, shape, dt):
    """The inputs summed left to right (``protocol/ops/math_composites.py``), rounded to ``dt`` after each addition
    as the chain of ``add`` kernels would: bit-equal to it, in one result array."""
    ct = _compute(dt)
    acc = np.add(_arr(ins[0], ct), _arr(ins[1], ct), out=np.empty(ins[0].shape, ct))  # (an array, even 0-d)
    if ct == dt.np:
        for x in ins[2:]:
            np.add(acc, x, out=acc)
        return acc
    for x in ins[2:]:  # a half dtype: computed in float32, rounded each time
        np.add(_arr(_out(acc, dt), ct), _arr(x, ct), out=acc)
    return _out(acc, dt)


@kernel("sgd_momentum")
def _sgd_momentum(ins, a, shape, dt):
    ct = _compute(dt)
    g = _decayed_grad(ins[1], ins[2] if len(ins) > 2 else None, a, ct)
    damp = a.get("dampening", 0)
    if damp:
        g = g * ct.type(1 - damp)
    t = _arr(ins[0], ct) * ct.type(a.get("momentum", 0))
    t += g
    return _out(t, dt)


@kernel("sgd_update")
def _sgd_update(ins, a, shape, dt):
    ct = _compute(dt)
    p = _arr(ins[0], ct)
    d = _decayed_grad(ins[1], p, a, ct)
    if len(ins) > 3:
        d = d + _arr(ins[3], ct) * ct.type(a.get("momentum", 0))
    return _out(p - d * _arr(ins[2], ct), dt)


# fused cross entropy (class-index targets): log_softmax as torch's CPU kernel computes it, x - max - log(sum(exp(x -
# max))), read at the targets; the gradient is (softmax - onehot) * per-row scale

def _ce_prep(ins, a, ct):
    """The class-major [C, N] view of the logits (numpy reduces a short row far slower than it adds rows), the
    valid-target mask (None: every target counts), the targets' flat positions in the [C, N] arrays (class 0 where
    ignored), x - max ([C, N], C-contiguous) and log(sum(exp(x - max))) per sample, and the number of valid targets.

    The loss and its gradient read the same logits and targets one after the other (a training step's forward,
    then its backward): the last small result is kept with its inputs and reused when the next call gets the very
    same buffers (buffers are immutable, and the kept references keep them alive, so identity is equality).
    A training step's loss is ~20 numpy calls on tiny arrays, each ~1 us of fixed cost: the common case (no target
    equals ``ignore_index``) takes the targets' bounds from their min and max and skips the mask."""
    x, t = ins[0], ins[1]
    ignore = a.get("ignore_index", -100)
    last = _CE_LAST.get("v")
    if last is not None and last[0] is x and last[1] is t and last[2] == ignore and last[3] == ct:
        return last[4]
    xc = _arr(x, ct)
    t64 = t.astype(np.int64, copy=False)
    c = xc.shape[1]
    valid, idx, n = None, t64, t64.size
    if n:  # (the ufuncs' reductions that min, max and sum call, without their Python wrappers, here and below)
        lo, hi = int(_MIN(t64, axis=None)), int(_MAX(t64, axis=None))
        if lo <= ignore <= hi:  # some targets may be ignored
            valid = t64 != ignore
            idx = np.where(valid, t64, 0)
            n = int(np.count_nonzero(valid))
            lo, hi = int(_MIN(idx, axis=None)), int(_MAX(idx, axis=None))
        if lo < 0 or hi >= c:
            raise IndexOutOfRange(f"cross_entropy: target {lo if lo < 0 else hi} is out of bounds for {c} classes")
    xt = np.ascontiguousarray(xc.T)  # [C, N]
    m = _MAX(xt, axis=0)
    if not math.isfinite(_ADD(m, axis=None)):
        m[np.isinf(m)] = 0  # rows with an infinite maximum: as the decomposition's logsumexp
    shifted = xt - m
    e = np.exp(shifted)
    log_sum = np.log(np.add.reduce(e, axis=0))
    # the flat positions of the targets in [C, N] (one index into the raveled array reads and writes them faster
    # than the pair of index arrays)
    at = idx * t64.size
    at += _positions(t64.size)
    out = (valid, at, shifted, log_sum, n)
    if xt.size <= _CE_KEEP:
        _CE_LAST["v"] = (x, t, ignore, ct, out)
    return out


def _positions(n: int) -> np.ndarray:
    """``arange(n)``, read-only and kept for the few batch sizes a program uses."""
    got = _POSITIONS.get(n)
    if got is None:
        if len(_POSITIONS) >= 64:
            _POSITIONS.clear()
        got = _POSITIONS[n] = np.arange(n)
        got.flags.writeable = False
    return got


#: the ufuncs' reductions that ``min``, ``max`` and ``sum`` call, without their Python wrappers (a few us a call on the
#: short arrays of an index check or a loss)
_MIN, _MAX, _ADD = np.minimum.reduce, np.maximum.reduce, np.add.reduce
_CE_LAST: dict = {}  # "v": the last (logits, targets, ignore_index, dtype, prep) of a small cross entropy
_CE_KEEP = 1 << 16  # logits kept at most (elements)
_POSITIONS: dict[int, np.ndarray] = {}


@kernel("cross_entropy_index")
def _cross_entropy_index(ins, a, shape, dt):
    ct = _compute(dt)
    with np.errstate(all="ignore"):
        return _out(_ce_loss(ins, a, ct, a.get("reduction", "mean")), dt)


def _ce_loss(ins, a: dict, ct: np.dtype, red: str) -> np.ndarray:
    """The cross entropy of logits ``ins[0]`` at class indices ``ins[1]`` in the compute dtype ``ct``, reduced by
    ``red`` (errors ignored by the caller: the kernel, or a straight-line runner)."""
    valid, at, shifted, log_sum, n = _ce_prep(ins, a, ct)
    loss = log_sum - shifted.reshape(-1)[at]  # -(log_softmax at the target)
    if valid is not None:
        loss = np.where(valid, loss, ct.type(0))
    if red == "none":
        return loss
    total = np.add.reduce(loss)
    if red == "mean":
        total = total / ct.type(n)
    return np.asarray(total, dtype=ct)


@kernel("cross_entropy_index_grad")
def _cross_entropy_index_grad(ins, a, shape, dt):
    ct = _compute(dt)
    with np.errstate(all="ignore"):
        return _out(_ce_grad(ins, a, ct, a.get("reduction", "mean") == "mean"), dt)


def _ce_grad(ins, a: dict, ct: np.dtype, mean: bool) -> np.ndarray:
    """The gradient of :func:`_ce_loss` by the logits, ``ins[2]`` the loss's gradient (errors ignored by the
    caller)."""
    valid, at, shifted, log_sum, n = _ce_prep(ins, a, ct)
    s = _arr(np.asarray(ins[2]), ct)
    if mean:
        s = s / ct.type(n)
    if valid is not None:
        s = np.where(valid, s, ct.type(0))  # [N]
    out = shifted - log_sum
    np.exp(out, out=out)  # softmax = exp(log_softmax), as torch's backward reads it
    out *= s
    flat = out.reshape(-1)  # (a view: out is a new C-contiguous [C, N])
    flat[at] -= s
    return np.ascontiguousarray(out.T)


# specialisation: tight callables for the straight-line runner ------------------------------------------------

# the ops whose kernel is a numpy function as it is (ARRAY_FN), called without the generic kernel's dtype logic
_UFUNC_BINARY = {n: f for n, f in ARRAY_FN.items() if OPS[n].nin == 2}
_UFUNC_UNARY = {n: f for n, f in ARRAY_FN.items() if OPS[n].nin == 1}


_CONST_MAX = 4096  # elements of a constant `full` the prepared runner makes once


def specialize(step):
    """A callable ``f(*arrays)`` for ``step`` that skips the generic kernel's dtype logic, or None."""
    op, meta, dt = step.op, step.in_meta, step.dtype
    if dt.np in _HALF:
        return None
    if op in _UFUNC_BINARY and len(meta) == 2:
        f = _UFUNC_BINARY[op]
        compare = dt is D.bool_ and op not in ("add", "mul", "maximum", "minimum")
        ct = binary_dtype(list(meta)).np if compare else dt.np
        if ct in _HALF:
            return None
        ca, cb = meta[0][1].np != ct, meta[1][1].np != ct
        if not ca and not cb:
            return f
        if ca and not cb:
            return lambda a, b: f(a.astype(ct), b)
        if cb and not ca:
            return lambda a, b: f(a, b.astype(ct))
        return lambda a, b: f(a.astype(ct), b.astype(ct))
    if op in _UFUNC_UNARY and len(meta) == 1 and meta[0][1].np == dt.np:
        return _UFUNC_UNARY[op]
    if op == "reshape":
        shape = step.shape
        return lambda a: a.reshape(shape)
    if op == "matmul" and meta[0][1].np == dt.np and meta[1][1].np == dt.np:
        return np.multiply if _outer_product(meta[0][0], meta[1][0]) else blas.matmul_for(meta[0][0], meta[1][0])
    if op == "linear" and len(meta[0][0]) <= 2 and _same_dtypes(step):
        return _linear_fn(meta[0][0], meta[1][0], len(meta) > 2)
    if op == "log_softmax" and meta[0][1].np == dt.np and dt.is_floating_point and meta[0][0] and math.prod(
            meta[0][0]):  # (not complex, not 0-d, not empty: see _log_softmax)
        ax = step.attrs["dim"] % len(meta[0][0])
        return lambda a: _log_softmax_along(a, ax)
    if op == "cat" and _same_dtypes(step):
        ax = step.attrs["dim"] % len(step.shape)
        cat = np.concatenate
        return lambda *a: cat(a, axis=ax)
    if op == "gather" and len(meta) == 2 and meta[0][0]:
        dim = step.attrs["dim"] % len(meta[0][0])
        n = meta[0][0][dim]
        return lambda a, i: a[_scatter_index(_check_index(i, n, "gather()", False), dim)]
    if op == "relu":
        zero = dt.np.type(0)
        return lambda a: np.maximum(a, zero)
    if op == "full" and math.prod(step.shape) <= _CONST_MAX:  # a constant: made once, shared (buffers are immutable)
        c = _full([], step.attrs, step.shape, dt)
        c.flags.writeable = False
        return lambda: c
    if op == "sum" and meta[0][1].np == dt.np:
        add = np.add.reduce
        ax = _axes(step.attrs, len(meta[0][0]))
        keep = step.attrs.get("keepdim", False)
        if ax and all(meta[0][0][d] == 1 for d in ax):  # one element a sum: the reduction's identity plus it, as
            shape, zero, plus = tuple(step.shape), np.zeros((), dt.np), np.add  # numpy's reduce adds it (-0.0 sums
            zero.flags.writeable = False  # to 0.0), without a reduction's setup (a gradient's bias row); a 0-d
            return lambda a: plus(a.reshape(shape), zero)  # array, not a scalar: numpy converts a scalar each call
        lead = 0  # the leading axes reduced: summed first, as whole rows (numpy reduces many short rows slowly)
        while lead in ax:
            lead += 1
        if 1 < len(ax) < len(meta[0][0]) and lead:
            first, rest, shape = tuple(range(lead)), tuple(d - lead for d in ax if d >= lead), step.shape
            return lambda a: add(add(a, axis=first), axis=rest).reshape(shape)
        return lambda a: add(a, axis=ax, keepdims=keep)  # (np.sum's own reduction, without its ~3 us of wrapping)
    fused = _SPECIALIZE_FUSED.get(op)
    if fused is not None and dt.np in _FLOATS:
        return fused(step)
    if op == "permute":
        dims = [d % max(len(meta[0][0]), 1) for d in step.attrs["dims"]]
        return lambda a: np.transpose(a, dims)
    if op == "expand":
        shape = tuple(step.shape)
        if math.prod(meta[0][0]) == 1:  # one value everywhere: the view made directly (np.broadcast_to: ~4 us)
            zeros = (0,) * len(shape)
            return lambda a: _broadcast_one(a, shape, zeros)
        return lambda a: np.broadcast_to(a, shape)
    return None


# the fused kernels of a training step (its loss, an optimizer's updates, a ReLU's backward) as callables of their
# arrays: the generic kernel's helpers with its constants and dtype checks taken once, when the step is specialized
# (a straight-line runner runs under np.errstate(all="ignore"), as the kernels do)

def _same_dtypes(step) -> bool:
    """Whether every input of ``step`` has its result's dtype (its kernel computes in it, no cast)."""
    dt = step.dtype.np
    return all(m[1].np == dt for m in step.in_meta)


def _spec_adam_exp_avg(step):
    a = step.attrs
    if not _same_dtypes(step) or (a.get("weight_decay", 0) and len(step.in_meta) > 2):
        return None
    c = step.dtype.np.type(1 - a.get("beta1", 0))
    return lambda m, g, *_: _exp_avg(m, g, c)


def _spec_adam_exp_avg_sq(step):
    a = step.attrs
    if not _same_dtypes(step) or (a.get("weight_decay", 0) and len(step.in_meta) > 2):
        return None
    b2 = a.get("beta2", 0)
    c, b2 = step.dtype.np.type(1 - b2), step.dtype.np.type(b2)
    return lambda v, g, *_: _exp_avg_sq(v, g, c, b2)


def _spec_adam_param(step):
    n = len(step.in_meta)
    if not _same_dtypes(step) or n not in (5, 6):
        return None
    eps = step.dtype.np.type(step.attrs.get("eps", 0))
    if n == 6:  # AdamW's: the parameter decayed first (``p * (1 - lr wd)``), as the generic kernel does
        return lambda p, m, v, step_size, bc2_sqrt, decay: _adam_new_param(p * decay, m, v, step_size, bc2_sqrt,
                                                                           eps)
    return lambda p, m, v, step_size, bc2_sqrt: _adam_new_param(p, m, v, step_size, bc2_sqrt, eps)


def _spec_cross_entropy(step):
    meta = step.in_meta
    if meta[0][1] is not step.dtype or len(meta[0][0]) != 2:
        return None
    a, ct, red = step.attrs, step.dtype.np, step.attrs.get("reduction", "mean")
    return lambda x, t: _ce_loss((x, t), a, ct, red)


def _spec_cross_entropy_grad(step):
    meta = step.in_meta
    if meta[0][1] is not step.dtype or meta[2][1] is not step.dtype or len(meta[0][0]) != 2:
        return None
    a, ct, mean = step.attrs, step.dtype.np, step.attrs.get("reduction", "mean") == "mean"
    return lambda x, t, g: _ce_grad((x, t, g), a, ct, mean)


def _spec_where(step):
    meta, rt = step.in_meta, step.dtype.np
    it = _SAME_SIZE_INT.get(rt.itemsize)
    if meta[0][1] is not D.bool_ or meta[1][1].np != rt or meta[2][1].np != rt:
        return None
    if math.prod(meta[0][0]) < _WHERE_BITS_MIN or it is None:
        return np.where
    shape = tuple(step.shape)
    return lambda c, x, y: _where_bits(c, x, y, shape, it, rt)


_SPECIALIZE_FUSED = {"adam_exp_avg": _spec_adam_exp_avg, "adam_exp_avg_sq": _spec_adam_exp_avg_sq,
                     "adam_param": _spec_adam_param, "cross_entropy_index": _spec_cross_entropy,
                     "cross_entropy_index_grad": _spec_cross_entropy_grad, "where": _spec_where}


def _broadcast_one(a, shape: tuple, zeros: tuple) -> np.ndarray:
    """``np.broadcast_to(a, shape)`` of a one-element ``a``: a read-only view of its value, whose base is an array
    (a full reduction's numpy scalar is made one first, as broadcast_to makes it: the quota counts the view as the
    memory it reads, 4 bytes, not as its shape's)."""
    if type(a) is not np.ndarray:
        a = np.asarray(a)
    v = np.ndarray(shape, a.dtype, a, 0, zeros)
    v.flags.writeable = False
    return v


def _linear_fn(x_shape: tuple, w_shape: tuple, bias: bool):
    """:func:`_linear` of operands of one dtype, not a half type, ``x`` at most 2-D, as a callable ``f(x, w[, b])``."""
    mm = np.multiply if _outer_product(x_shape, w_shape[::-1]) else blas.matmul_for(x_shape, w_shape[::-1])
    if not bias:
        return lambda x, w: mm(x, w.T)

    def linear(x, w, b):
        y = mm(x, w.T)
        y += b
        return y

    return linear


# batch norm -------------------------------------------------------------------------------------
#
# The composites of protocol/ops/nn.py in a few numpy calls each: the input viewed as [N, C, L], per-channel sums taken
# in float64 (the batch axis first, as whole rows, then each channel's row: numpy's pairwise summation), the
# normalisation as ``x * a + b`` per channel as torch's CPU kernel computes it.

def _bn3(x: np.ndarray) -> np.ndarray:
    """``x`` [N, C, ...] as [N, C, L]."""
    return x.reshape(x.shape[0], x.shape[1], math.prod(x.shape[2:]))


def _bn_sum(v: np.ndarray) -> np.ndarray:
    """Per-channel float64 sums of a [N, C, L] array: the batch axis first (in the array's dtype for a batch of up to
    64, ~3x faster than converting each row to float64; its error stays within float32's tolerance), then each
    channel's row pairwise in float64."""
    rows = np.add.reduce(v, axis=0) if v.shape[0] <= 64 else np.add.reduce(v, axis=0, dtype=np.float64)
    return np.add.reduce(rows, axis=1, dtype=np.float64)


def _bn_moments(x3: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and biased variance (float64) of [N, C, L], two passes as torch's CPU (the C kernel's where
    it applies: ``host_c.bn_moments``)."""
    got = host_c.bn_moments(x3)
    if got is not None:
        return got
    cnt = max(x3.shape[0] * x3.shape[2], 1)
    mean = _bn_sum(x3) / cnt
    xc = x3 - _bn_col(mean, x3.dtype, x3.shape[2])
    np.multiply(xc, xc, out=xc)
    return mean, _bn_sum(xc) / cnt


#: the longest rows of a [N, C, L] batch-norm input whose per-channel ops take the channel values as a [C, L] block
_BN_BLOCK_ROWS = 256


def _bn_col(v: np.ndarray, ct: np.dtype, length: int) -> np.ndarray:
    """A per-channel [C] vector in ``ct`` for an op against a [N, C, length] array: a [C, length] block where the rows
    are short (numpy then runs the op as N passes over C*length contiguous values; against a [C, 1] column it runs
    N*C rows of ``length``, with DCGAN's [32, 64, 4, 4] ~1.6x slower), else that column. The same values either
    way."""
    col = v.astype(ct)[:, None]
    return np.repeat(col, length, axis=1) if 1 < length <= _BN_BLOCK_ROWS else col


def _bn_affine(ins: list, a: dict) -> tuple:
    """(weight, bias) inputs in float64, None where the op has none."""
    it = iter(ins)
    w = np.asarray(next(it), np.float64) if a.get("has_weight") else None
    b = np.asarray(next(it), np.float64) if a.get("has_bias") else None
    return w, b


@kernel("batch_norm")
def _batch_norm(ins, a, shape, dt):
    ct = _compute(dt)
    x3 = _bn3(_arr(ins[0], ct))
    eps = a.get("eps", 1e-5)
    if a.get("training") and a.get("has_stats"):  # (the batch statistics given: batch_norm_stats's [2C])
        mean, scale = _bn_stats(ins[1], x3.shape[1], eps)
        rest = ins[2:]
    else:
        if a.get("training"):
            mean, var = _bn_moments(x3)
            rest = ins[1:]
        else:
            mean, var = np.asarray(ins[1], np.float64), np.asarray(ins[2], np.float64)
            rest = ins[3:]
        scale = 1.0 / np.sqrt(var + eps)
    w, b = _bn_affine(rest, a)
    if w is not None:
        scale = scale * w
    shift = -mean * scale if b is None else b - mean * scale
    y = host_c.bn_apply(x3, scale.astype(ct), shift.astype(ct))  # (in C where it applies: the same bits)
    if y is None:
        y = x3 * _bn_col(scale, ct, x3.shape[2])
        y += _bn_col(shift, ct, x3.shape[2])
    return _out(y.reshape(shape), dt)


@kernel("batch_norm_stats")
def _batch_norm_stats(ins, a, shape, dt):
    mean, var = _bn_moments(_bn3(_arr(ins[0], dt.np)))  # (dt: the statistics' dtype, float32 for 16-bit inputs)
    return np.concatenate([mean, var]).astype(dt.np)


def _bn_stats(stats: np.ndarray, c: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(mean, rstd) in float64 from a [2C] statistics vector."""
    s = np.asarray(stats, np.float64)
    return s[:c], 1.0 / np.sqrt(s[c:] + eps)


@kernel("batch_norm_grad_stats")
def _batch_norm_grad_stats(ins, a, shape, dt):
    ct = dt.np  # the statistics' dtype: float32 for 16-bit inputs
    g3, x3 = _bn3(_arr(ins[0], ct)), _bn3(_arr(ins[1], ct))
    mean, rstd = _bn_stats(ins[2], x3.shape[1], a.get("eps", 1e-5))
    sums = host_c.bn_grad_sums(g3, x3, mean)  # (one pass in C where it applies)
    if sums is None:
        xc = x3 - _bn_col(mean, ct, x3.shape[2])
        np.multiply(xc, g3, out=xc)
        sums = _bn_sum(g3), _bn_sum(xc)
    return np.concatenate([sums[0], sums[1] * rstd]).astype(dt.np)


@kernel("batch_norm_grad")
def _batch_norm_grad(ins, a, shape, dt):
    ct = _compute(dt)
    g3, x3 = _bn3(_arr(ins[0], ct)), _bn3(_arr(ins[1], ct))
    c = x3.shape[1]
    mean, rstd = _bn_stats(ins[2], c, a.get("eps", 1e-5))
    training = a.get("training")
    rest = ins[4:] if training else ins[3:]
    k = rstd * np.asarray(rest[0], np.float64) if a.get("has_weight") else rstd
    ln = x3.shape[2]
    if not training:
        return _out((g3 * _bn_col(k, ct, ln)).reshape(shape), dt)
    gs = np.asarray(ins[3], np.float64)
    n = max(x3.shape[0] * x3.shape[2], 1)
    # k (g - sum_g / n - (x - mean) rstd sum_gx / n)
    f, sub = -k * rstd * gs[c:] / n, k * gs[:c] / n
    dx = host_c.bn_grad_input(g3, x3, k.astype(ct), mean.astype(ct), f.astype(ct), sub.astype(ct))
    if dx is None:  # (numpy's spelling: the same operations, so the same bits)
        dx = g3 * _bn_col(k, ct, ln)
        xc = x3 - _bn_col(mean, ct, ln)
        xc *= _bn_col(f, ct, ln)
        dx += xc
        dx -= _bn_col(sub, ct, ln)
    return _out(dx.reshape(shape), dt)


@kernel("batch_norm_update")
def _batch_norm_update(ins, a, shape, dt):
    running = np.asarray(ins[0], np.float64)
    stats = np.asarray(ins[1], np.float64)
    c = running.shape[0]
    f = 1.0 / float(ins[2]) if len(ins) > 2 else float(a["momentum"])  # (a cumulative average: 1 / count)
    n = int(a.get("n", 2))
    stat = stats[:c] if a["which"] == "mean" else stats[c:] * (n / (n - 1) if n > 1 else 1.0)
    return ((1.0 - f) * running + f * stat).astype(dt.np)


# layer norm's and GELU's backward ----------------------------------------------------------------

@kernel("layer_norm_grad")
def _layer_norm_grad(ins, a, shape, dt):
    """rstd * (g - mean(g) - y * mean(g * y)) over the last ``ndim`` dims, rstd from x (two passes, as the forward).
    As rows of the normalised size, each row's mean a product with a column of 1 / k: at a GPT's [B*T, C] sizes a
    BLAS product takes ~1 us where a ufunc reduce along short rows takes ~4 (``ndarray.mean`` ~6)."""
    ct = _compute(dt)
    lead = len(shape) - int(a.get("ndim", 1))
    rows, k = math.prod(shape[:lead]), math.prod(shape[lead:])
    g, x, y = (_arr(t, ct).reshape(rows, k) for t in ins)
    avg = np.full((k, 1), 1 / max(k, 1), ct)
    xc = x - blas.matmul(x, avg)
    xc *= xc
    rstd = blas.matmul(xc, avg)
    rstd += ct.type(a.get("eps", 1e-5))
    np.sqrt(rstd, out=rstd)
    np.reciprocal(rstd, out=rstd)
    gy = g * y
    dx = g - blas.matmul(g, avg)
    y = y * blas.matmul(gy, avg)
    dx -= y
    dx *= rstd
    return _out(dx.reshape(shape), dt)


@kernel("gelu_grad")
def _gelu_grad(ins, a, shape, dt):
    """g * (Phi(x) + x phi(x)): exact GELU's input gradient (float32 in C where the host library has it:
    ``host_c.gelu_grad_f32``, the same arithmetic, its exponential libmvec's)."""
    ct = _compute(dt)
    g, x = _arr(ins[0], ct), _arr(ins[1], ct)
    if dt.np == np.float32:
        got = host_c.gelu_grad_f32(g, x)  # (None unless both are float32 of one shape and the part is built)
        if got is not None:
            return got
    cdf = _erf_any(x * ct.type(_SQRT_HALF))
    cdf += ct.type(1)
    cdf *= ct.type(0.5)
    pdf = x * x
    pdf *= ct.type(-0.5)
    pdf = np.exp(pdf)
    pdf *= ct.type(_INV_SQRT_2PI)
    pdf *= x
    pdf += cdf
    pdf *= g
    return _out(pdf, dt)
