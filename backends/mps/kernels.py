"""MLX kernels for every primitive op, the ``mps`` backend's counterpart of :mod:`tensorwire.backends.cpu.kernels`.

Kernel signature: ``kernel(inputs: list[mx.array], attrs: dict, shape, dtype) -> mx.array``. Kernels only record
MLX operations (MLX is lazy); the device evaluates a fragment's outputs at its end (see :mod:`.runtime`). Buffers
are immutable: a kernel never updates an input in place (MLX's ``a[idx] = v`` rebinds the Python object, so the
scatter kernels assign into a fresh ``mx.array(x)``).

Numerics follow the numpy kernels (the conformance suite's references): float16/bfloat16 math runs in float32 and is
rounded back, as PyTorch does; integer division by zero, negative integer powers and out-of-range indices raise the
numpy kernels' errors. Those checks are values computed lazily with the result (:func:`check`): inside a fragment
they are evaluated together with its outputs, one step on its own evaluates them at once.

Where MLX differs from numpy the kernel says why: MLX's CPU float64 ``exp``/``sin``/``cos``/``erf`` are only
float32-accurate (measured: ``exp(1.0)`` = 2.71828175, ``sin`` off by 5e-3 relative on [-20, 20]), so on the CPU
device those four run in numpy on the evaluated array (zero-copy views); MLX's ``matmul`` takes floats only, so
integer products are a broadcast multiply and sum. The random ops draw :mod:`tensorwire.protocol.random`'s
numbers with numpy and upload them: its ``randn`` and ``randint`` are defined in float64, which the Metal GPU has
not, and the same words on every device is the contract.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import ml_dtypes
import mlx.core as mx
import numpy as np

from tensorwire.backends.array_kernels import axes as _axes
from tensorwire.backends.array_kernels import movement_kernels, registrar, scatter_operands
from tensorwire.backends.cpu.kernels import KERNELS as NUMPY_KERNELS
from tensorwire.backends.cpu.kernels import _erf as erf  # scipy's, else math.erf vectorised
from tensorwire.protocol import dtypes as D
from tensorwire.protocol import random as rng
from tensorwire.protocol.errors import DTypeError, IndexOutOfRange
from tensorwire.protocol.ops import COMPARE, OPS, binary_dtype, scatter_identity

#: tensorwire dtype -> MLX dtype (MLX has every one; float64 only on its CPU device)
MX: dict[D.DType, mx.Dtype] = {D.bool_: mx.bool_, D.uint8: mx.uint8, D.int8: mx.int8, D.int16: mx.int16,
                               D.int32: mx.int32, D.int64: mx.int64, D.float16: mx.float16,
                               D.bfloat16: mx.bfloat16, D.float32: mx.float32, D.float64: mx.float64}
#: MLX dtype -> tensorwire dtype
TW: dict[mx.Dtype, D.DType] = {v: k for k, v in MX.items()}


def dtype_of(x: mx.array) -> D.DType:
    """The tensorwire dtype of an MLX array (a DTypeError for MLX-only dtypes such as complex64)."""
    dt = TW.get(x.dtype)
    if dt is None:
        raise DTypeError(f"MLX dtype {x.dtype} has no tensorwire equivalent")
    return dt


def _compute(dt: D.DType) -> D.DType:
    return D.float32 if dt in D.HALF else dt


def _as(x: mx.array, dt: D.DType) -> mx.array:
    m = MX[dt]
    return x if x.dtype == m else x.astype(m)


def on_gpu() -> bool:
    """Whether kernels run on the Metal GPU (MLX's default device), which has no float64."""
    return mx.default_device() == mx.gpu


def _wide() -> D.DType:
    """The float type for index arithmetic that numpy does in float64 (float32 on the Metal GPU)."""
    return D.float32 if on_gpu() else D.float64


# -- deferred checks ------------------------------------------------------------------------------------------------

_local = threading.local()


class deferred_checks:
    """Collects the checks kernels record while a fragment runs (``with deferred_checks() as checks``): a list of
    ``(bad, make_error)`` with ``bad`` a lazy boolean scalar. Outside such a block :func:`check` evaluates at once."""

    def __enter__(self) -> list:
        self.outer = getattr(_local, "checks", None)
        _local.checks = []
        return _local.checks

    def __exit__(self, *exc) -> None:
        _local.checks = self.outer


def check(bad: mx.array, make_error: Callable[[], Exception]) -> None:
    """Raise ``make_error()`` if the lazy boolean scalar ``bad`` is true: now, or when the fragment is evaluated."""
    pending = getattr(_local, "checks", None)
    if pending is not None:
        pending.append((bad, make_error))
    elif bad.item():
        raise make_error()


def raise_failed(checks: list) -> None:
    """Evaluate the checks in the order the kernels recorded them and raise the first failed one.

    This must come before the fragment's outputs are evaluated: MLX does not bound-check its gathers and scatters,
    so an out-of-range index would read or write outside the arrays (found by the conformance suite: heap corruption
    a few hundred cases later). One check at a time, so a check never evaluates an op that an earlier one guards."""
    for bad, make_error in checks:
        if bad.item():
            raise make_error()


KERNELS: dict = {}
#: ``@kernel(name)``: enters a kernel into :data:`KERNELS`
kernel = registrar(KERNELS)


# -- creation -------------------------------------------------------------------------------------------------------

def _scalar(value, dt: D.DType) -> mx.array:
    """A 0-d array of ``value`` converted as numpy converts it (MLX's ``full`` keeps a Python scalar's own type)."""
    with np.errstate(all="ignore"):
        return upload_numpy(np.asarray(value).astype(dt.np))


@kernel("full")
def _full(ins, a, shape, dt):
    return mx.full(tuple(shape), _scalar(a["value"], dt))


@kernel("arange")
def _arange(ins, a, shape, dt):
    n, start, step = a["n"], a["start"], a["step"]
    if dt.is_floating_point or isinstance(start, float) or isinstance(step, float):
        w = MX[_wide()]
        v = mx.array(start, dtype=w) + mx.arange(n, dtype=w) * mx.array(step, dtype=w)
    else:
        v = mx.array(start, dtype=mx.int64) + mx.arange(n, dtype=mx.int64) * mx.array(step, dtype=mx.int64)
    return _as(v, dt)


def upload_numpy(x: np.ndarray) -> mx.array:
    """An MLX array with ``x``'s contents and tensorwire dtype (bfloat16 travels as its 16-bit words)."""
    if x.dtype == ml_dtypes.bfloat16:
        return mx.array(x.view(np.uint16), dtype=mx.uint16).view(mx.bfloat16)
    return mx.array(x, dtype=MX[D.from_numpy(x.dtype)])


KERNELS["rand"] = lambda ins, a, shape, dt: upload_numpy(rng.uniform(a["seed"], a["offset"], shape, dt.np))
KERNELS["randn"] = lambda ins, a, shape, dt: upload_numpy(rng.normal(a["seed"], a["offset"], shape, dt.np))
KERNELS["randint"] = lambda ins, a, shape, dt: upload_numpy(
    rng.randint(a["seed"], a["offset"], shape, dt.np, a["low"], a["high"]))


# -- elementwise ----------------------------------------------------------------------------------------------------

# Most elementwise kernels are made from the op table (OpDef.array_fn, the MLX function of that name, at the end of this
# section); these are the ops that need more than that (integers' rounding, division by zero, numpy's NaN sign ...).

#: float64 functions MLX's CPU device computes only to float32 accuracy: numpy computes them instead
_NUMPY_FLOAT64 = {"exp": np.exp, "sin": np.sin, "cos": np.cos, "erf": None}


def _numpy_erf(x: np.ndarray) -> np.ndarray:
    return erf(x)


def _host_float64(name: str, x: mx.array) -> mx.array:
    fn = _NUMPY_FLOAT64[name] or _numpy_erf
    with np.errstate(all="ignore"):
        return mx.array(np.asarray(fn(np.asarray(x))), dtype=mx.float64)


def _unary(name, fn, int_identity=False):
    def k(ins, a, shape, dt):
        x = ins[0]
        if int_identity and not dt.is_floating_point:
            return x
        if dt is D.float64 and name in _NUMPY_FLOAT64:
            return _host_float64(name, _as(x, dt))
        return _as(fn(_as(x, _compute(dt))), dt)
    return k


KERNELS["erf"] = _unary("erf", mx.erf)  # (numpy has no erf: not the table's)


@kernel("sign")
def _sign(ins, a, shape, dt):
    x = _as(ins[0], _compute(dt))
    r = mx.sign(x)
    if dt.is_floating_point:  # numpy: sign(nan) is nan (MLX gives 0)
        r = mx.where(mx.isnan(x), x, r)
    return _as(r, dt)


for _n, _f in (("floor", mx.floor), ("ceil", mx.ceil), ("round", mx.round), ("trunc", mx.trunc)):
    KERNELS[_n] = _unary(_n, _f, int_identity=True)


@kernel("isnan")
def _isnan(ins, a, shape, dt):
    return mx.isnan(ins[0]) if dtype_of(ins[0]).is_floating_point else mx.zeros(tuple(shape), mx.bool_)


@kernel("isinf")
def _isinf(ins, a, shape, dt):
    return mx.isinf(ins[0]) if dtype_of(ins[0]).is_floating_point else mx.zeros(tuple(shape), mx.bool_)


KERNELS["logical_not"] = lambda ins, a, s, dt: mx.logical_not(_as(ins[0], D.bool_))
KERNELS["bitwise_not"] = lambda ins, a, s, dt: mx.bitwise_invert(ins[0])


def _binary(fn, compare=False):
    def k(ins, a, shape, dt):
        x, y = ins
        ct = binary_dtype([(x.shape, dtype_of(x)), (y.shape, dtype_of(y))])
        if not compare:
            ct = _compute(dt if dt.is_floating_point else ct)
        r = fn(_as(x, ct), _as(y, ct))
        return r if compare else _as(r, dt)
    return k


def _zero_divisor(what: str):
    def fn(x, y):
        if not dtype_of(x).is_floating_point:
            check(mx.any(mx.equal(y, 0)), lambda: ZeroDivisionError(f"ZeroDivisionError: integer {what} by zero"))
        return mx.floor_divide(x, y) if what == "division" else mx.remainder(x, y)
    return fn


def _pow(x, y):
    if not dtype_of(x).is_floating_point:
        check(mx.any(mx.less(y, 0)), lambda: ValueError("Integers to negative integer powers are not allowed."))
    return mx.power(x, y)


def _shift(left: bool):
    """torch's shift of two arrays of one integer dtype. MLX's shifts are the machine's, which takes the count modulo
    the width on 32- and 64-bit lanes (``mx.left_shift(1, 33)`` is 2 in int32); torch's count below 0 or past the
    width shifts every bit out (0, or the sign's copies for a right shift). So the count is clamped to the width less
    one, where a signed right shift gives the sign's copies, and the other edges select 0."""
    def fn(x, y):
        dt = dtype_of(x)
        top = 8 * dt.itemsize - 1
        bad = mx.greater(y, top)
        if dt.is_signed:
            bad = mx.logical_or(bad, mx.less(y, 0))
        n = mx.where(bad, mx.array(top, dtype=x.dtype), y)
        if left:
            return mx.where(bad, mx.zeros_like(x), mx.left_shift(x, n))
        r = mx.right_shift(x, n)
        return r if dt.is_signed else mx.where(bad, mx.zeros_like(x), r)
    return fn


def _on_host(name: str):
    """The numpy kernel ``name`` on the arrays' (unified) memory: torch's gcd and lcm, which MLX has not."""
    def k(ins, a, shape, dt):
        x, y = (np.asarray(_as(v, dt)) for v in ins)
        return upload_numpy(np.asarray(NUMPY_KERNELS[name]([x, y], a, shape, dt)))
    return k


for _n, _f in (("floor_divide", _zero_divisor("division")), ("remainder", _zero_divisor("modulo")), ("pow", _pow),
               ("bitwise_left_shift", _shift(True)), ("bitwise_right_shift", _shift(False))):
    KERNELS[_n] = _binary(_f)
KERNELS["gcd"], KERNELS["lcm"] = _on_host("gcd"), _on_host("lcm")
for _n, _f in (("logical_and", mx.logical_and), ("logical_or", mx.logical_or),
               ("logical_xor", lambda x, y: mx.not_equal(x, y))):
    KERNELS[_n] = (lambda f: lambda ins, a, s, dt: f(_as(ins[0], D.bool_), _as(ins[1], D.bool_)))(_f)

# the rest: the op table's array function, as the numpy kernels
for _n, _op in OPS.items():
    if _op.array_fn and _op.kind in ("unary", "binary") and _n not in KERNELS:
        _f = getattr(mx, _op.array_fn)
        KERNELS[_n] = _unary(_n, _f) if _op.nin == 1 else _binary(_f, compare=_n in COMPARE)


@kernel("where")
def _where(ins, a, shape, dt):
    return mx.where(_as(ins[0], D.bool_), _as(ins[1], dt), _as(ins[2], dt))


@kernel("cast")
def _cast(ins, a, shape, dt):
    x = ins[0]
    src = dtype_of(x)
    if dt is D.bool_:
        return mx.not_equal(x, 0)
    if src.is_floating_point and not dt.is_floating_point:
        x = mx.trunc(_as(x, _compute(src)))  # toward zero, as numpy's cast
    return _as(x, dt)


# -- reductions -----------------------------------------------------------------------------------------------------

def _reducer(fn, identity):
    def k(ins, a, shape, dt):
        x = _as(ins[0], _compute(dt))
        ax = _axes(a, x.ndim)
        if not ax:
            return _as(x, dt)
        if x.size == 0:  # MLX 0.32's CPU strided reduce over an empty axis can spin forever in nd_loop
            return mx.full(tuple(shape), identity, MX[dt])
        return _as(fn(x, axis=list(ax), keepdims=a.get("keepdim", False)), dt)
    return k


KERNELS["sum"] = _reducer(mx.sum, 0)
KERNELS["prod"] = _reducer(mx.prod, 1)


def _extreme(fn):
    def k(ins, a, shape, dt):
        x = ins[0]
        ax = _axes(a, x.ndim)
        if x.size == 0:
            return mx.zeros(tuple(shape), MX[dt])
        if not ax:
            return x
        return fn(x, axis=list(ax), keepdims=a.get("keepdim", False))  # NaN propagates, as numpy's
    return k


KERNELS["amax"] = _extreme(mx.max)
KERNELS["amin"] = _extreme(mx.min)


def _arg(fn):
    def k(ins, a, shape, dt):
        x = ins[0]
        if dtype_of(x) in D.HALF:
            x = x.astype(mx.float32)
        if x.size == 0:  # nothing to reduce over, and no outputs (the op table refuses the other empty cases)
            return mx.zeros(tuple(shape), mx.int64)
        if a.get("dim") is None or x.ndim == 0:
            x, axis, keep = x.reshape(-1), 0, False
        else:
            axis, keep = a["dim"] % x.ndim, a.get("keepdim", False)
        if dtype_of(x).is_floating_point:  # numpy: the first NaN wins (MLX's argmax skips NaNs)
            nan = mx.isnan(x)
            first_nan = mx.argmax(nan, axis=axis, keepdims=keep)
            r = mx.where(mx.any(nan, axis=axis, keepdims=keep), first_nan, fn(x, axis=axis, keepdims=keep))
        else:
            r = fn(x, axis=axis, keepdims=keep)
        return r.astype(mx.int64).reshape(tuple(shape))
    return k


@kernel("argsort")
def _argsort(ins, a, shape, dt):
    """Stable, NaN last ascending and first descending (torch's order): MLX's ``argsort`` documents neither, so
    the row order comes from numpy's stable sort on the array's (unified) memory, as the CPU backend's does."""
    x = ins[0]
    if dtype_of(x) in D.HALF:
        x = x.astype(mx.float32)
    return mx.array(NUMPY_KERNELS["argsort"]([np.asarray(x)], a, shape, dt), dtype=mx.int64)


KERNELS["argmax"] = _arg(mx.argmax)
KERNELS["argmin"] = _arg(mx.argmin)


def _scan(fn):
    def k(ins, a, shape, dt):
        x = _as(ins[0], _compute(dt))
        if x.ndim == 0:
            return _as(x, dt)
        return _as(fn(x, axis=a["dim"] % x.ndim), dt)
    return k


KERNELS["cumsum"] = _scan(mx.cumsum)
KERNELS["cumprod"] = _scan(mx.cumprod)


# -- movement -------------------------------------------------------------------------------------------------------

KERNELS["reshape"] = lambda ins, a, shape, dt: mx.reshape(ins[0], tuple(shape))
KERNELS.update(movement_kernels(mx))  # permute, expand, copy


def _slices(a) -> tuple:
    return tuple(slice(s, e, st) for s, e, st in zip(a["starts"], a["stops"], a["steps"]))


@kernel("slice")
def _slice(ins, a, shape, dt):
    x = ins[0]
    return x[_slices(a)] if x.ndim else x


@kernel("flip")
def _flip(ins, a, shape, dt):
    x = ins[0]
    if not x.ndim:
        return x
    ax = set(_axes(a, x.ndim))
    return x[tuple(slice(None, None, -1) if i in ax else slice(None) for i in range(x.ndim))]


@kernel("pad")
def _pad(ins, a, shape, dt):
    x = ins[0]
    p = a["pads"]
    if x.ndim == 0:
        return x
    x = x[tuple(slice(max(-p[2 * i], 0), x.shape[i] - max(-p[2 * i + 1], 0)) for i in range(x.ndim))]
    width = [(max(p[2 * i], 0), max(p[2 * i + 1], 0)) for i in range(x.ndim)]
    if not any(lo or hi for lo, hi in width):
        return x
    return mx.pad(x, width, constant_values=_scalar(a.get("value", 0), dt))


@kernel("cat")
def _cat(ins, a, shape, dt):
    return mx.concatenate([_as(x, dt) for x in ins], axis=a["dim"] % len(shape))


# -- indexing -------------------------------------------------------------------------------------------------------

def _check_index(idx: mx.array, n: int, what: str, allow_negative: bool) -> None:
    """An IndexOutOfRange naming the first bad value when ``idx`` leaves ``[0, n)`` (``[-n, n)``)."""
    if idx.size == 0:
        return
    idx = idx.astype(mx.int64)
    lo, hi = mx.min(idx), mx.max(idx)
    floor = -n if allow_negative else 0
    bad = mx.logical_or(mx.greater_equal(hi, n), mx.less(lo, floor))

    def error():
        h = hi.item()
        v = h if h >= n else lo.item()
        return IndexOutOfRange(f"{what}: index {v} is out of bounds for dimension with size {n}")

    check(bad, error)


def _wrap(idx: mx.array, n: int) -> mx.array:
    idx = idx.astype(mx.int64)
    return mx.where(mx.less(idx, 0), idx + n, idx)


@kernel("gather")
def _gather(ins, a, shape, dt):
    x, idx = ins
    if x.ndim == 0:
        return x
    dim = a["dim"] % x.ndim
    _check_index(idx, x.shape[dim], "gather()", False)
    sub = tuple(slice(0, idx.shape[i]) if i != dim else slice(None) for i in range(x.ndim))
    return mx.take_along_axis(x[sub], idx.astype(mx.int64), axis=dim)


def _scatter_index(idx: mx.array, dim: int) -> tuple:
    grids = []
    for i, n in enumerate(idx.shape):
        if i == dim:
            grids.append(idx.astype(mx.int64))
        else:
            grids.append(mx.arange(n, dtype=mx.int64).reshape([n if j == i else 1 for j in range(idx.ndim)]))
    return tuple(grids)


def _scatter_src(src: mx.array, idx: mx.array, dt: D.DType) -> mx.array:
    return _as(src[tuple(slice(0, n) for n in idx.shape)], dt) if src.ndim else _as(src, dt)


@kernel("scatter")
def _scatter(ins, a, shape, dt):
    x, idx, src, dim = scatter_operands(ins, a, "scatter()", _check_index)
    if x.ndim == 0 or idx.size == 0:
        return x if idx.size == 0 else _as(src.reshape(()), dt)
    out = mx.array(x)  # a new array object: item assignment rebinds it, never x
    out[_scatter_index(idx, dim)] = _scatter_src(src, idx, dt)
    return out


@kernel("scatter_add")
def _scatter_add(ins, a, shape, dt):
    x, idx, src, dim = scatter_operands(ins, a, "scatter_add()", _check_index)
    if idx.size == 0:
        return x
    if x.ndim == 0:
        return x + _as(src.reshape(()), dt)
    return x.at[_scatter_index(idx, dim)].add(_scatter_src(src, idx, dt))


@kernel("scatter_reduce")
def _scatter_reduce(ins, a, shape, dt):
    x, idx, src, dim = scatter_operands(ins, a, "scatter_reduce()", _check_index)
    if idx.size == 0:
        return x
    one = x.ndim == 0
    if one:
        x, idx, src = x.reshape(1), idx.reshape(1), src.reshape(1)
    key = _scatter_index(idx, dim)
    out = mx.array(x)  # a new array object: item assignment rebinds it, never x
    if not a["include_self"]:
        out[key] = mx.array(scatter_identity(a["reduce"], dt), MX[dt])
    at = out.at[key]
    fn = {"prod": at.multiply, "amax": at.maximum, "amin": at.minimum}[a["reduce"]]
    out = fn(_scatter_src(src, idx, dt))
    return out.reshape(()) if one else out


def _index_key(x: mx.array, dim: int, idx: list) -> tuple:
    for k, i in enumerate(idx):
        _check_index(i, x.shape[dim + k], "index", True)
    return (slice(None),) * dim + tuple(_wrap(i, x.shape[dim + k]) for k, i in enumerate(idx))


@kernel("index")
def _index(ins, a, shape, dt):
    x, *idx = ins
    if any(i.size == 0 for i in idx):
        return mx.zeros(tuple(shape), MX[dt])
    return x[_index_key(x, a["dim"], idx)].reshape(tuple(shape))


@kernel("index_put")
def _index_put(ins, a, shape, dt):
    x, v, *idx = ins
    if any(i.size == 0 for i in idx):
        return x
    key = _index_key(x, a["dim"], idx)
    val = _as(v, dt)
    if a.get("accumulate"):
        return x.at[key].add(val)
    out = mx.array(x)
    out[key] = val
    return out


@kernel("setslice")
def _setslice(ins, a, shape, dt):
    x, v = ins
    if x.ndim == 0:
        return _as(v, dt)
    out = mx.array(x)
    out[_slices(a)] = _as(v, dt)
    return out


# -- matmul ---------------------------------------------------------------------------------------------------------

@kernel("matmul")
def _matmul(ins, a, shape, dt):
    ct = _compute(dt)
    x, y = _as(ins[0], ct), _as(ins[1], ct)
    if ct.is_floating_point:
        return _as(mx.matmul(x, y), dt)
    # MLX multiplies floats only: integers as a broadcast product summed over K (exact, wrapping as numpy's)
    xv = x.reshape(1, -1) if x.ndim == 1 else x
    yv = y.reshape(-1, 1) if y.ndim == 1 else y
    r = mx.sum(mx.expand_dims(xv, -1) * mx.expand_dims(yv, -3), axis=-2)
    return _as(r.reshape(tuple(shape)), dt)


def refuse_float64(op: str) -> DTypeError:
    """The error of an op that needs float64 on the Metal GPU (PyTorch's MPS refuses float64 the same way)."""
    return DTypeError(f"{op}: the MPS device has no float64 (Metal GPUs do not support it); use float32, or run "
                      "float64 work on another device")
