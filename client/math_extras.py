"""torch's derived math functions, each composed of existing tensor methods (so every backend runs them and autograd
differentiates them): inverse hyperbolics, ``logaddexp``, ``xlogy``, ``addmm`` and its family, ``cross``, ``kron``,
``diff``, trapezoid rules, cumulative maxima, ``var_mean``... (issue 33).

:data:`FUNCTIONS` are exported as ``tw.<name>``; :data:`METHODS` become ``Tensor`` methods (:func:`install`).
"""

from __future__ import annotations

import builtins
import math
import sys

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.protocol.shapes import broadcast, norm_dim

from . import _install
from . import autograd_engine as _autograd_engine
from . import combine as _combine
from . import creation as _creation
from ._frames import user_stacklevel
from .complex_ops import angle, conj, conj_physical, isreal, real, resolve_conj, resolve_neg
from .return_types import return_type
from .tensor import Tensor
from .warn_once import warn_once
from .zero_grads import zero_grad_from

_Number = (int, float, bool)


def _t(x, like: Tensor) -> Tensor:
    """``x`` as a tensor on ``like``'s device (Python numbers as 0-d tensors of their own dtype)."""
    return like._operand(x)


def _where(cond: Tensor, a, b) -> Tensor:
    """``a`` where ``cond``, else ``b`` (torch.where)."""
    return _combine.where(cond, a, b)


def to_float(x: Tensor) -> Tensor:
    """``x`` in a floating dtype: integers and bools become the default float, as torch's float ops do. A complex
    tensor is refused (``DTypeError``): the functions composed here are written for real values."""
    if x.dtype.is_complex:
        name = sys._getframe(1).f_code.co_name  # (the function that asked: named in the error)
        raise DTypeError(f"{name} is not implemented for complex tensors in tensorwire yet")
    return x if x.dtype.is_floating_point else x.to(D.get_default_dtype())


def _pair_float(a, b) -> tuple[Tensor, Tensor]:
    """Two operands (either may be a Python number) promoted together, then to a float dtype."""
    ref = a if isinstance(a, Tensor) else b
    ta, tb = _t(a, ref), _t(b, ref)
    rt = D.result_type(*[(x.dtype, x.ndim) if isinstance(x, Tensor) else x for x in (a, b)])
    if not rt.is_floating_point:
        rt = D.get_default_dtype()
    return ta.to(rt), tb.to(rt)


def _refuse_bool(name: str, *xs) -> None:
    for x in xs:
        if isinstance(x, Tensor) and x.dtype is D.bool_:
            raise DTypeError(f"{name}: a bool tensor is not supported here, as in torch; cast it first")


# -- elementwise -----------------------------------------------------------------------------------------------------

def asinh(input: Tensor) -> Tensor:  # noqa: A002
    """sign(x) log1p(|x| + x² / (1 + sqrt(1 + x²)))."""
    x = to_float(input)
    a = x.abs()
    return (a + a * a / (1 + (1 + a * a).sqrt())).log1p() * x.sign()


def acosh(input: Tensor) -> Tensor:  # noqa: A002
    """log1p(t + sqrt(2t + t²)) with t = x - 1 (NaN below 1)."""
    x = to_float(input)
    t = x - 1
    return (t + (2 * t + t * t).sqrt()).log1p()


def atanh(input: Tensor) -> Tensor:  # noqa: A002
    """½ (log1p(x) - log1p(-x)): its gradient ½ (1 / (1 + x) + 1 / (1 - x)) is two well-rounded terms of one sign
    (log1p(2x / (1 - x))'s chain loses digits near ±1)."""
    x = to_float(input)
    return (x.log1p() - (-x).log1p()) * 0.5


def deg2rad(input: Tensor) -> Tensor:  # noqa: A002
    return to_float(input) * (math.pi / 180.0)


def rad2deg(input: Tensor) -> Tensor:  # noqa: A002
    return to_float(input) * (180.0 / math.pi)


def erfc(input: Tensor) -> Tensor:  # noqa: A002
    """1 - erf(x)."""
    return 1 - to_float(input).erf()


def logit(input: Tensor, eps: float | None = None) -> Tensor:  # noqa: A002
    """log(x / (1 - x)), ``x`` clamped to [eps, 1 - eps] when ``eps`` is given."""
    x = to_float(input)
    if eps is not None:
        x = x.clamp(eps, 1 - eps)
    return (x / (1 - x)).log()


def sinc(input: Tensor) -> Tensor:  # noqa: A002
    """sin(πx) / (πx), 1 at 0."""
    x = to_float(input)
    px = x * math.pi
    return _where(x == 0, _t(1.0, x).to(x.dtype), px.sin() / px)


def signbit(input: Tensor) -> Tensor:  # noqa: A002
    """Whether the sign bit is set (true for -0.0)."""
    x = input
    if x.dtype is D.bool_:
        return x.new_zeros(x.shape, dtype=D.bool_)
    if not x.dtype.is_floating_point:
        return x < 0
    return (x < 0) | ((x == 0) & ((1 / x) < 0))


def copysign(input, other) -> Tensor:  # noqa: A002
    """|input| with ``other``'s sign (float result)."""
    a, b = _pair_float(input, other)
    return zero_grad_from(a.abs() * _where(signbit(b), _t(-1.0, a).to(a.dtype), _t(1.0, a).to(a.dtype)), b)


def _nan_ignoring(pick: str):
    def f(input, other) -> Tensor:  # noqa: A002
        a = input if isinstance(input, Tensor) else other._operand(input)
        b = other if isinstance(other, Tensor) else a._operand(other)
        m = getattr(a, pick)(b)
        if not m.dtype.is_floating_point:
            return m
        # torch's mask, which its gradient follows too: ``a`` where it wins or ties, or ``b`` is NaN (both NaN: NaN)
        a, b = a.to(m.dtype), b.to(m.dtype)
        return _where(b.isnan() | ((a >= b) if pick == "maximum" else (a <= b)), a, b)

    f.__name__ = "fmax" if pick == "maximum" else "fmin"
    f.__doc__ = (f"Elementwise {pick} that ignores NaN (torch.{f.__name__}): where one operand is NaN the other is "
                 f"taken; where both are, NaN.")
    return f


fmax = _nan_ignoring("maximum")
fmin = _nan_ignoring("minimum")


def hypot(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """sqrt(a² + b²)."""
    if not input.dtype.is_floating_point:
        raise DTypeError(f"hypot: \"hypot_cpu\" not implemented for '{input.dtype.name}'; use a float tensor")
    a, b = _pair_float(input, other)
    return (a * a + b * b).sqrt()


def heaviside(input: Tensor, values: Tensor) -> Tensor:  # noqa: A002
    """0 where x < 0, ``values`` where x == 0, 1 where x > 0 (both of one dtype, as torch requires)."""
    if isinstance(values, Tensor) and values.dtype is not input.dtype:
        raise DTypeError(f"heaviside is not yet implemented for tensors with different dtypes: {input.dtype.name} "
                         f"and {values.dtype.name}")
    v = _t(values, input).to(input.dtype)
    return _where(input == 0, v, (input > 0).to(input.dtype))


def _check_float_ops(name: str, *xs) -> None:
    for x in xs:
        if isinstance(x, Tensor) and not x.dtype.is_floating_point:
            raise DTypeError(f"{name}: integer and bool inputs are not supported (as torch's CPU kernel); cast "
                             "to a float dtype first")


def logaddexp(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """log(exp(a) + exp(b)), stable: max + log1p(exp(-|a - b|)); equal infinities give themselves."""
    _check_float_ops("logaddexp", input, other)
    a, b = _pair_float(input, other)
    m = a.maximum(b)
    r = m + (-(a - b).abs()).exp().log1p()
    return _where(a.isinf() & (a == b), a, r)


def logaddexp2(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """log2(2^a + 2^b), stable."""
    _check_float_ops("logaddexp2", input, other)
    a, b = _pair_float(input, other)
    m = a.maximum(b)
    r = m + (-(a - b).abs()).exp2().log1p() * (1 / math.log(2.0))
    return _where(a.isinf() & (a == b), a, r)


def _x_times_log(x: Tensor, y: Tensor, log_y: Tensor, positive: Tensor) -> Tensor:
    """``x * log_y`` that is 0 where x == 0 whatever ``log_y`` is, with torch's gradients: ``log_y`` for x (at x == 0
    too, where the logarithm's argument is positive: ``positive``) and ``x / y``'s for y. The logarithm is taken
    only where x != 0 or its argument is positive, and counts 0 elsewhere; an infinite one times x == 0 counts 0 (its
    gradient for x there is 0, where torch's is the infinity)."""
    keep = (x != 0) | positive
    log_kept = _where(keep, log_y, 0.0)
    log_kept = _where((x == 0) & log_kept.isinf(), 0.0, log_kept)
    return _where(y.isnan(), y, x * log_kept)


def xlogy(input, other) -> Tensor:  # noqa: A002
    """x log(y), 0 where x == 0 (NaN where y is NaN); torch's gradients (log y for x, also at x == 0)."""
    x, y = _pair_float(input, other)
    return _x_times_log(x, y, _where((x != 0) | (y > 0), y, 1.0).log(), y > 0)


def xlog1py(input, other) -> Tensor:  # noqa: A002
    """x log1p(y), 0 where x == 0 (NaN where y is NaN); torch's gradients (log1p y for x, also at x == 0)."""
    x, y = _pair_float(input, other)
    return _x_times_log(x, y, _where((x != 0) | (y > -1), y, 0.0).log1p(), y > -1)


def ldexp(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """x · 2^e."""
    x = to_float(input)
    e = _t(other, x)
    return x * (2.0 ** e.to(D.float64)).to(x.dtype) if x.dtype is not D.float64 else x * 2.0 ** e.to(D.float64)


def rsub(input, other, alpha=1) -> Tensor:  # noqa: A002
    """other - alpha · input."""
    x = input if isinstance(input, Tensor) else _t(input, other)
    _refuse_bool("rsub", x, other)
    return _t(other, x).sub(x, alpha=alpha) if isinstance(other, Tensor) else (x * alpha).neg() + other \
        if alpha != 1 else other - x


def positive(input: Tensor) -> Tensor:  # noqa: A002
    if input.dtype is D.bool_:
        raise DTypeError("The `+` operator, on a bool tensor is not supported.")
    return input


# angle, real, conj, conj_physical and isreal: client/complex_ops.py (complex tensors' parts; a real tensor's too)


# -- products --------------------------------------------------------------------------------------------------------

def _scaled_sum(input: Tensor, prod: Tensor, beta, alpha) -> Tensor:
    """beta · input + alpha · prod, broadcast to ``prod``; ``input`` ignored when beta is 0 (NaN included)."""
    if not prod.dtype.is_floating_point and (isinstance(alpha, float) or isinstance(beta, float)):
        raise DTypeError("For integral input tensors, argument alpha/beta must not be a floating point number.")
    shape = broadcast(tuple(input.shape), tuple(prod.shape))
    if shape != tuple(prod.shape):
        raise ShapeError(f"the input of shape {list(input.shape)} does not broadcast to the product's shape "
                         f"{list(prod.shape)}")
    p = prod if alpha == 1 else prod * alpha
    if beta == 0:
        return p.clone() if p is prod else p
    i = input.to(prod.dtype).expand(*shape)
    return i + p if beta == 1 else i * beta + p


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta=1, alpha=1, out=None) -> Tensor:  # noqa: A002
    """beta · input + alpha · (mat1 @ mat2)."""
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise ShapeError(f"addmm: expected 2-D matrices, got {mat1.ndim}-D and {mat2.ndim}-D")
    return _out(out, _scaled_sum(input, mat1.matmul(mat2), beta, alpha))


def addmv(input: Tensor, mat: Tensor, vec: Tensor, *, beta=1, alpha=1, out=None) -> Tensor:  # noqa: A002
    """beta · input + alpha · (mat @ vec)."""
    if mat.ndim != 2 or vec.ndim != 1:
        raise ShapeError(f"addmv: expected a matrix and a vector, got {mat.ndim}-D and {vec.ndim}-D")
    return _out(out, _scaled_sum(input, mat.matmul(vec), beta, alpha))


def addr(input: Tensor, vec1: Tensor, vec2: Tensor, *, beta=1, alpha=1, out=None) -> Tensor:  # noqa: A002
    """beta · input + alpha · outer(vec1, vec2) (bools: logical or/and, as torch)."""
    if vec1.ndim != 1 or vec2.ndim != 1:
        raise ShapeError(f"addr: expected 1-D vectors, got {vec1.ndim}-D and {vec2.ndim}-D")
    if input.dtype is D.bool_ and vec1.dtype is D.bool_ and vec2.dtype is D.bool_:
        o = vec1.unsqueeze(1) & vec2.unsqueeze(0)
        if not alpha:
            o = o & False
        return _out(out, (input & bool(beta)) | o if beta else o)
    return _out(out, _scaled_sum(input, vec1.outer(vec2), beta, alpha))


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta=1, alpha=1, out=None) -> Tensor:  # noqa: A002
    """beta · input + alpha · (batch1 @ batch2), batched."""
    if batch1.ndim != 3 or batch2.ndim != 3:
        raise ShapeError(f"baddbmm: expected 3-D batches, got {batch1.ndim}-D and {batch2.ndim}-D")
    return _out(out, _scaled_sum(input, batch1.matmul(batch2), beta, alpha))


def addbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta=1, alpha=1, out=None) -> Tensor:  # noqa: A002
    """beta · input + alpha · Σ_b batch1[b] @ batch2[b]."""
    if batch1.ndim != 3 or batch2.ndim != 3:
        raise ShapeError(f"addbmm: expected 3-D batches, got {batch1.ndim}-D and {batch2.ndim}-D")
    b, n, k = batch1.shape
    m = batch2.shape[2]
    prod = batch1.permute(1, 0, 2).reshape(n, b * k).matmul(batch2.reshape(b * k, m))
    return _out(out, _scaled_sum(input, prod, beta, alpha))


def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1, out=None) -> Tensor:  # noqa: A002
    """input + value · tensor1 · tensor2."""
    p = tensor1 * tensor2
    return _out(out, input + (p * value if value != 1 else p))


def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1, out=None) -> Tensor:  # noqa: A002
    """input + value · tensor1 / tensor2 (integer division refused, as torch)."""
    if not tensor1.dtype.is_floating_point and not tensor2.dtype.is_floating_point:
        raise DTypeError("Integer division with addcdiv is no longer supported; use addcmul(input, tensor1, "
                         "1 / tensor2) or a float dtype")
    q = tensor1 / tensor2
    return _out(out, input + (q * value if value != 1 else q))


def vdot(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """Σ conj(input) · other over two 1-D tensors of one dtype."""
    if input.ndim != 1 or other.ndim != 1:
        raise ShapeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    if input.dtype is not other.dtype:
        raise DTypeError(f"vdot: expected both vectors to have same dtype, but found {input.dtype.name} and "
                         f"{other.dtype.name}")
    return conj(input).dot(other)  # (the first vector conjugated: for complex ones)


def kron(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """The Kronecker product: every ``input`` element times a block ``other``."""
    n = builtins.max(input.ndim, other.ndim)
    a = input.reshape(*([1] * (n - input.ndim)), *input.shape)
    b = other.reshape(*([1] * (n - other.ndim)), *other.shape)
    sa = [d for s in a.shape for d in (s, 1)]
    sb = [d for s in b.shape for d in (1, s)]
    return (a.reshape(*sa) * b.reshape(*sb)).reshape(*[x * y for x, y in zip(a.shape, b.shape)])


def cross(input: Tensor, other: Tensor, dim: int | None = None) -> Tensor:  # noqa: A002
    """The 3-vector cross product along ``dim`` (``None``: the first dim of size 3, as torch.cross, which warns of
    it once a process as deprecated)."""
    shape = broadcast(tuple(input.shape), tuple(other.shape))
    if dim is None:
        warn_once("cross", "Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the "
                  "dim explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree "
                  "with that of linalg.cross in a future release.", user_stacklevel())
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise ShapeError("no dimension of size 3 in input")
    return linalg_cross(input, other, dim=dim)


def linalg_cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:  # noqa: A002
    """``linalg.cross``: the cross product along ``dim`` (size 3), broadcasting the others."""
    shape = broadcast(tuple(input.shape), tuple(other.shape))
    d = norm_dim(dim, len(shape))
    if input.shape[d - len(shape) + input.ndim] != 3 or other.shape[d - len(shape) + other.ndim] != 3:
        raise ShapeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                         f"{input.shape[d - len(shape) + input.ndim]} and {other.shape[d - len(shape) + other.ndim]}")
    rt = D.result_type((input.dtype, input.ndim), (other.dtype, other.ndim))
    a, b = input.to(rt).expand(*shape), other.to(rt).expand(*shape)
    a0, a1, a2 = (a.select(d, i) for i in range(3))
    b0, b1, b2 = (b.select(d, i) for i in range(3))
    return _combine.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


# -- differences, integrals, scans -----------------------------------------------------------------------------------

def diff(input: Tensor, n: int = 1, dim: int = -1, prepend=None, append=None) -> Tensor:  # noqa: A002
    """The n-th forward difference along ``dim`` (``prepend``/``append`` joined first; bools: ``!=``)."""
    if input.ndim == 0:
        raise ShapeError("diff expects input to be at least one-dimensional")
    d = norm_dim(dim, input.ndim)
    x = input
    if n == 0:
        return x
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        def fit(p):
            if isinstance(p, Tensor):
                return p.expand(*x.shape[:d], p.shape[d] if p.ndim else 1, *x.shape[d + 1:]) if p.ndim == 0 \
                    else p
            return _t(p, x).to(x.dtype).reshape(*([1] * x.ndim)).expand(*x.shape[:d], 1, *x.shape[d + 1:])
        x = _combine.cat([fit(p) if p is not x else p for p in parts], d)
    for _ in range(n):
        if x.shape[d] == 0:
            break
        lo, hi = x.narrow(d, 0, x.shape[d] - 1), x.narrow(d, 1, x.shape[d] - 1)
        x = hi != lo if x.dtype is D.bool_ else hi - lo
    return x


def _trapezoid_args(y: Tensor, x, dx, dim: int):
    d = norm_dim(dim, y.ndim)
    n = y.shape[d]
    return d, n


def trapezoid(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """∫ y along ``dim`` by the trapezoid rule, spacing ``x`` (samples) or ``dx`` (default 1)."""
    d, n = _trapezoid_args(y, x, dx, dim)
    if n == 0:
        return to_float(y).sum(d) if y.dtype.is_floating_point or isinstance(x, Tensor) else y.sum(d)
    lo, hi = y.narrow(d, 0, n - 1), y.narrow(d, 1, n - 1)
    if isinstance(x, Tensor):
        dxs = diff(x, dim=-1 if x.ndim == 1 else dim)
        if x.ndim == 1:
            dxs = dxs.reshape(*dxs.shape, *([1] * (y.ndim - 1 - d)))
        return ((hi + lo) * dxs).sum(d) / 2
    step = 1 if dx is None and x is None else (x if x is not None else dx)
    s = (hi + lo).sum(d)
    return s * (step / 2) if step != 1 or y.dtype.is_floating_point else s / 2


def trapz(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """:func:`trapezoid`'s old name (``trapz(y, x, dim=)`` or ``trapz(y, dx=, dim=)``)."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """The running trapezoid integral along ``dim`` (one element fewer)."""
    d, n = _trapezoid_args(y, x, dx, dim)
    if n == 0:
        return to_float(y).narrow(d, 0, 0)
    lo, hi = y.narrow(d, 0, n - 1), y.narrow(d, 1, n - 1)
    if isinstance(x, Tensor):
        dxs = diff(x, dim=-1 if x.ndim == 1 else dim)
        if x.ndim == 1:
            dxs = dxs.reshape(*dxs.shape, *([1] * (y.ndim - 1 - d)))
        return ((hi + lo) * dxs / 2).cumsum(d)
    step = 1 if dx is None and x is None else (x if x is not None else dx)
    return ((hi + lo) * step / 2).cumsum(d)


def logcumsumexp(input: Tensor, dim: int) -> Tensor:  # noqa: A002
    """log(cumsum(exp(x))) along ``dim``, shifted by the running maximum's final value for stability."""
    x = to_float(input)
    if x.ndim == 0:
        return x.clone()
    d = norm_dim(dim, x.ndim)
    if x.shape[d] == 0:
        return x.clone()
    m = x.amax(d, keepdim=True).detach()
    m = _where(m.isinf(), _t(0.0, m).to(m.dtype), m)
    return (x - m).exp().cumsum(d).log() + m


_MaxIdx = return_type("cummax", ["values", "indices"])


def _cumext(input: Tensor, dim: int, largest: bool):
    """Running max (or min) and the index of its last occurrence, by log2(n) shifted comparisons (NaN wins)."""
    x = input
    if x.ndim == 0:
        return _MaxIdx(x.clone(), x.new_zeros((), dtype=D.int64))
    d = norm_dim(dim, x.ndim)
    n = x.shape[d]
    shape = [1] * x.ndim
    shape[d] = n
    idx = _combine.arange_like(x, 0, n).reshape(*shape).expand(*x.shape)
    v = x
    k = 1
    while k < n:
        pv = _combine.cat([v.narrow(d, 0, 1).expand(*x.shape[:d], k, *x.shape[d + 1:]), v.narrow(d, 0, n - k)], d)
        pi = _combine.cat([idx.narrow(d, 0, 1).expand(*x.shape[:d], k, *x.shape[d + 1:]) * 0 - 1,
                           idx.narrow(d, 0, n - k)], d)
        valid = pi >= 0
        better = (pv > v) if largest else (pv < v)
        if v.dtype.is_floating_point:
            better = (better | (pv.isnan() & ~v.isnan()) | (pv.isnan() & v.isnan() & (pi > idx))) & valid
            tie = (pv == v) & (pi > idx) & valid
        else:
            better = better & valid
            tie = (pv == v) & (pi > idx) & valid
        take = better | tie
        v = _where(take, pv, v)
        idx = _where(take, pi, idx)
        k *= 2
    return v, idx


def cummax(input: Tensor, dim: int):  # noqa: A002
    """The running maximum along ``dim`` and where it was last reached."""
    v, i = _cumext(input, dim, True)
    return _MaxIdx(v, i)


_MinIdx = return_type("cummin", ["values", "indices"])


def cummin(input: Tensor, dim: int):  # noqa: A002
    """The running minimum along ``dim`` and where it was last reached."""
    v, i = _cumext(input, dim, False)
    return _MinIdx(v, i)


# -- statistics ------------------------------------------------------------------------------------------------------

def nanmean(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """The mean over the non-NaN elements."""
    if not input.dtype.is_floating_point and dtype is None:
        raise DTypeError(f"nanmean(): expected input to have floating point dtype but got {input.dtype.name}")
    x = input if dtype is None else input.to(dtype)
    keep = ~x.isnan()
    return x.nansum(dim, keepdim) / keep.sum(dim, keepdim).to(x.dtype)


def var_mean(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):  # noqa: A002
    """(var, mean) of ``input``, with ``var``'s arguments."""
    return (input.var(dim, unbiased, keepdim, correction=correction),
            input.mean(dim if dim is not None and not isinstance(dim, bool) else None, keepdim))


def std_mean(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):  # noqa: A002
    """(std, mean) of ``input``, with ``std``'s arguments."""
    return (input.std(dim, unbiased, keepdim, correction=correction),
            input.mean(dim if dim is not None and not isinstance(dim, bool) else None, keepdim))


def dist(input: Tensor, other: Tensor, p=2) -> Tensor:  # noqa: A002
    """‖input - other‖_p."""
    return (input - other).norm(p)


def renorm(input: Tensor, p, dim: int, maxnorm) -> Tensor:  # noqa: A002
    """Each slice along ``dim`` scaled down to p-norm ``maxnorm`` where it exceeds it."""
    d = norm_dim(dim, input.ndim)
    others = tuple(i for i in range(input.ndim) if i != d)
    n = input.norm(p, dim=others, keepdim=True) if others else input.abs() if p != 0 else (input != 0).to(input.dtype)
    scale = _where(n > maxnorm, maxnorm / (n + 1e-7), _t(1.0, n).to(n.dtype))
    return input * scale


_Median = return_type("median", ["values", "indices"])
_NanMedian = return_type("nanmedian", ["values", "indices"])


def _median(input: Tensor, dim, keepdim: bool, skip_nan: bool):  # noqa: A002
    """The lower median (NaN if the slice has one, unless ``skip_nan``), by sorting (NaN sorts last)."""
    x = input
    if dim is None:
        flat = x.reshape(-1)
        if flat.shape[0] == 0:
            return flat.new_full((), math.nan)
        return _median(flat, 0, False, skip_nan).values
    if x.ndim == 0:
        return _Median(x.clone(), x.new_zeros((), dtype=D.int64))
    d = norm_dim(dim, x.ndim)
    s, i = x.sort(d)
    n = x.shape[d]
    if x.dtype.is_floating_point:
        good = (~x.isnan()).to(D.int64).sum(d, keepdim=True)
        k = (good - 1).clamp(min=0) // 2 if skip_nan else _where(good < n, good, good * 0 + (n - 1) // 2)
    else:
        k = x.new_full([1 if j == d else x.shape[j] for j in range(x.ndim)], (n - 1) // 2, dtype=D.int64)
    v, idx = s.gather(d, k), i.gather(d, k)
    if not keepdim:
        v, idx = v.squeeze(d), idx.squeeze(d)
    return _Median(v, idx)


def median(input: Tensor, dim=None, keepdim: bool = False):  # noqa: A002
    """The lower median of all elements, or ``(values, indices)`` along ``dim`` (NaN wins)."""
    return _median(input, dim, keepdim, False)


def nanmedian(input: Tensor, dim=None, keepdim: bool = False):  # noqa: A002
    """:func:`median` ignoring NaN (NaN only where a slice is all NaN)."""
    r = _median(input, dim, keepdim, True)
    return r if isinstance(r, Tensor) else _NanMedian(*r)


def _quantile(input: Tensor, q, dim, keepdim: bool, interpolation: str, skip_nan: bool) -> Tensor:  # noqa: A002
    if interpolation not in ("linear", "lower", "higher", "midpoint", "nearest"):
        raise ValueError(f"quantile() interpolation must be one of linear, lower, higher, midpoint or nearest. Got "
                         f"{interpolation}")
    if not input.dtype.is_floating_point:
        raise DTypeError(f"quantile() input tensor must be either float or double dtype, got {input.dtype.name}")
    qt = q if isinstance(q, Tensor) else input._operand(float(q) if not isinstance(q, (list, tuple)) else
                                                        [float(v) for v in q]).to(input.dtype)
    if qt.ndim > 1:
        raise ShapeError(f"quantile() q must be a scalar or 1D tensor, got a {qt.ndim}D tensor")
    if isinstance(q, (int, float)) and not 0 <= q <= 1:
        raise ValueError("quantile() q must be in the range [0, 1]")
    x = input.reshape(-1) if dim is None else input
    if x.ndim == 0:
        x = x.reshape(1)
    d = 0 if dim is None else norm_dim(dim, x.ndim)
    s = x.sort(d).values.movedim(d, -1).unsqueeze(-2)  # (..., 1, n)
    n = s.shape[-1]
    if n == 0:
        raise ShapeError("quantile() input tensor must be non-empty")
    qv = qt.reshape(-1)
    nan = s.isnan()
    if skip_nan:
        ranks = qv * ((~nan).to(s.dtype).sum(-1, keepdim=True) - 1)  # (..., 1, 1) * (Q,) -> (..., 1, Q)
        ranks = ranks.clamp(min=0)
    else:
        ranks = qv * (n - 1) + s.new_zeros(s.shape[:-1] + (1,))
        ranks = _where(nan.any(-1, keepdim=True), ranks * 0 + (n - 1), ranks)
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()
    sq = s.squeeze(-2)
    below = ranks.to(D.int64)
    vb = sq.gather(-1, below.squeeze(-2))
    if interpolation in ("linear", "midpoint"):
        w = ranks - below.to(ranks.dtype)
        if interpolation == "midpoint":
            w = _where(w > 0, w * 0 + 0.5, w * 0)
        va = sq.gather(-1, ranks.ceil().to(D.int64).squeeze(-2))
        w = w.squeeze(-2)
        vb = _where(w < 0.5, vb + w * (va - vb), va - (va - vb) * (1 - w))  # torch's lerp
    out = vb.movedim(-1, 0)  # (Q, ...)
    if input.ndim == 0:
        return out.reshape(*qt.shape)
    if keepdim:
        if dim is None:
            out = out.reshape(out.shape[0], *([1] * input.ndim))
        else:
            out = out.unsqueeze(d + 1)
    if qt.ndim == 0:
        out = out.squeeze(0)
    return out


def quantile(input: Tensor, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear") -> Tensor:  # noqa: A002
    """The ``q``-th quantiles along ``dim`` (all elements for ``None``; a 1-D ``q`` adds a leading dim)."""
    return _quantile(input, q, dim, keepdim, interpolation, False)


def nanquantile(input: Tensor, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear") -> Tensor:  # noqa: A002
    """:func:`quantile` ignoring NaN."""
    return _quantile(input, q, dim, keepdim, interpolation, True)


def matrix_exp(input: Tensor) -> Tensor:  # noqa: A002
    """exp of each square matrix (``tw.linalg.matrix_exp``)."""
    return linalg_matrix_exp(input)


def linalg_matrix_exp(A: Tensor) -> Tensor:  # noqa: N803
    """``tw.linalg.matrix_exp``: exp(A) by scaling and squaring: the Taylor series of A / 2^s to degree 18 (in
    float64 for float32 input), squared s times, with s from the largest 1-norm in the batch (a sync point)."""
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError("linalg.matrix_exp: A must be batches of square matrices")
    if not A.dtype.is_floating_point:
        raise DTypeError(f"linalg.matrix_exp: expected a floating point tensor, got {A.dtype.name}")
    n = A.shape[-1]
    if A.numel() == 0:
        return A.clone()
    work = D.float64 if A.dtype in (D.float32, D.float16, D.bfloat16) else A.dtype
    x = A.to(work)
    norm1 = float(x.abs().sum(-2).amax().item())
    s = max(0, math.ceil(math.log2(norm1 / 0.5))) if norm1 > 0.5 and math.isfinite(norm1) else 0
    x = x / (2.0 ** s)

    ident = _creation.eye(n, dtype=work, device=A._dev, session=A._s).expand(*x.shape)
    term, total = ident, ident
    for k in range(1, 19):
        term = term.matmul(x) / k
        total = total + term
    for _ in range(s):
        total = total.matmul(total)
    return total.to(A.dtype)


_Mode = return_type("mode", ["values", "indices"])


def mode(input: Tensor, dim: int = -1, keepdim: bool = False):  # noqa: A002
    """The most frequent value along ``dim`` (the smallest among equally frequent ones) and the index of its last
    occurrence. Composed by comparing every element with every other: memory grows as ``n²`` a slice."""
    x = input
    if x.ndim == 0:
        return _Mode(x.clone(), x.new_zeros((), dtype=D.int64))
    d = norm_dim(dim, x.ndim)
    xs = x.movedim(d, -1)
    n = xs.shape[-1]
    if n == 0:
        raise ShapeError("mode(): Expected reduction dim to have non-zero size.")
    eq = xs.unsqueeze(-1) == xs.unsqueeze(-2)  # (..., n, n)
    counts = eq.to(D.int64).sum(-1)
    best = counts.amax(-1, keepdim=True)
    big = xs.new_full((), math.inf) if xs.dtype.is_floating_point else None
    if big is None:
        cand = _where(counts == best, xs.to(D.float64), xs.new_full((), math.inf, dtype=D.float64))
        value = cand.amin(-1, keepdim=True).to(xs.dtype)
    else:
        value = _where(counts == best, xs, big).amin(-1, keepdim=True)
    pos = _combine.arange_like(xs, 0, n)
    idx = _where(xs == value, pos, pos * 0 - 1).amax(-1, keepdim=True)
    value, idx = value.movedim(-1, d), idx.movedim(-1, d)
    if not keepdim:
        value, idx = value.squeeze(d), idx.squeeze(d)
    return _Mode(value, idx)


_Frexp = return_type("frexp", ["mantissa", "exponent"])


def frexp(input: Tensor):  # noqa: A002
    """(mantissa, exponent) with input = mantissa · 2^exponent, |mantissa| in [½, 1) (0, inf and NaN: themselves
    and 0), exponent int32."""
    if not input.dtype.is_floating_point:
        raise DTypeError("torch.frexp() only supports floating-point dtypes")
    x = input.to(D.float64)
    a = x.abs()
    finite = (a > 0) & ~a.isinf() & ~a.isnan()
    safe = _where(finite, a, a.new_ones(()))
    e = safe.log2().floor() + 1
    two = a.new_full((), 2.0)
    m = safe / two ** e
    e = _where(m >= 1, e + 1, _where(m < 0.5, e - 1, e))
    m = safe / two ** e
    m = _where(finite, m * x.sign(), x)
    e = _where(finite, e, e * 0)
    return _Frexp(m.to(input.dtype), e.to(D.int32))


def histc(input: Tensor, bins: int = 100, min=0, max=0) -> Tensor:  # noqa: A002
    """Counts of ``input`` in ``bins`` equal bins over [min, max] (the data's range when both are 0: a sync point);
    an element's bin is ``floor((x - min) · bins / (max - min))`` in the input's dtype, as torch computes it, the
    maximum in the last bin, elements outside ignored."""
    if not input.dtype.is_floating_point:
        raise DTypeError(f"torch.histc: \"histogram_cpu\" not implemented for '{input.dtype.name}'")
    if bins <= 0:
        raise ValueError("torch.histc(): bins must be > 0")
    lo, hi = float(min), float(max)
    if lo == hi and input.numel():
        lo, hi = float(input.amin().item()), float(input.amax().item())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise ValueError("torch.histc: max must be larger than min")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    x = input.reshape(-1)
    lo_t, hi_t = x._s.scalar(lo, x.dtype, x._dev), x._s.scalar(hi, x.dtype, x._dev)
    pos = ((x - lo_t) * float(bins) / (hi_t - lo_t)).floor()
    valid = (x >= lo_t) & (x <= hi_t)
    pos = _where(valid, _where(pos >= bins, pos.new_full((), bins - 1), pos), pos.new_zeros(()))
    counts = x.new_zeros((bins,))
    if x.shape[0] == 0:
        return counts
    return counts.scatter_add(0, pos.to(D.int64), valid.to(x.dtype))


_Histogram = return_type("histogram", ["hist", "bin_edges"])
_HistogramDD = return_type("histogramdd", ["hist", "bin_edges"])


def _host_values(t):
    """A tensor argument's values as a float64 numpy array (a number or ``None`` as it is)."""
    return np.asarray(t._numpy(), np.float64) if isinstance(t, Tensor) else t


def _histogram_nd(points: np.ndarray, bins: list, ranges: list, weights, density: bool):
    """torch's histogramdd on the host: ``points`` (N, D); per coordinate ``bins`` an int (equal bins over its range,
    the data's by default, widened by 0.5 when it is one value) or edges. A point counts where every coordinate lies
    within its first and last edge (none for edges that do not increase); its bin is the last edge at or below it,
    the last bin taking its right edge."""
    edges = [np.histogram_bin_edges(points[:, i], b, r) if np.ndim(b) == 0 else np.asarray(b, np.float64)
             for i, (b, r) in enumerate(zip(bins, ranges))]
    inside = np.ones(points.shape[0], bool)
    index = []
    for i, e in enumerate(edges):
        x = points[:, i]
        inside &= (x >= e[0]) & (x <= e[-1])
        index.append(np.clip(np.searchsorted(e, x, "right") - 1, 0, max(len(e) - 2, 0)))
    hist = np.zeros([len(e) - 1 for e in edges])
    w = np.ones(points.shape[0]) if weights is None else weights.reshape(-1)
    np.add.at(hist, tuple(ix[inside] for ix in index), w[inside])
    if density:
        volume = np.ones(())
        for e in edges:
            volume = np.multiply.outer(volume, np.diff(e))
        with np.errstate(divide="ignore", invalid="ignore"):
            hist = hist / hist.sum() / volume
    return hist, edges


def _histogram(name: str, input: Tensor, points, bins: list, ranges: list, weight, density: bool):  # noqa: A002
    if not input.dtype.is_floating_point:
        raise DTypeError(f"torch.{name}: expected a floating point input, got {input.dtype.name}")
    hist, edges = _histogram_nd(points, bins, ranges, _host_values(weight), density)
    return (_creation.tensor(hist, dtype=input.dtype, device=input._dev, session=input._s),
            [_creation.tensor(e, dtype=input.dtype, device=input._dev, session=input._s) for e in edges])


def histogram(input: Tensor, bins=100, *, range=None, weight=None, density: bool = False):  # noqa: A002
    """``(hist, bin_edges)`` of ``input``'s values: ``bins`` equal bins over ``range`` (the data's by default) or
    the given edges; the last bin includes its right edge. Computed on the host (a sync point, as ``unique``); no
    gradient, as torch's."""
    hist, edges = _histogram("histogram", input, _host_values(input).reshape(-1, 1), [_host_values(bins)], [range],
                             weight, density)
    return _Histogram(hist, edges[0])


def histogramdd(input: Tensor, bins=10, *, range=None, weight=None, density: bool = False):  # noqa: A002
    """``(hist, bin_edges)`` of the points in ``input``'s last dim (D coordinates each): ``bins`` an int, one int a
    coordinate, or one edges tensor a coordinate; ``range`` a flat ``[lo0, hi0, lo1, hi1, ...]``. On the host, as
    :func:`histogram`."""
    d = input.shape[-1]
    points = _host_values(input).reshape(-1, d)
    b = [_host_values(x) for x in bins] if isinstance(bins, (list, tuple)) else [bins] * d
    ranges = [None] * d if range is None else [(range[2 * i], range[2 * i + 1]) for i in builtins.range(d)]
    hist, edges = _histogram("histogramdd", input, points, b, ranges, weight, density)
    return _HistogramDD(hist, edges)


def gradient(input: Tensor, *, spacing=1, dim=None, edge_order: int = 1) -> tuple:  # noqa: A002
    """The derivative estimated by central differences inside and one-sided ones (of ``edge_order`` 1 or 2) at
    the edges, along each of ``dim`` (every dim for ``None``); ``spacing`` is a step, one step per dim, or one
    coordinate tensor per dim (numpy's formulas for uneven steps, as torch)."""
    if edge_order not in (1, 2):
        raise ValueError("torch.gradient only supports edge_order=1 and edge_order=2.")
    dims = list(range(input.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = [norm_dim(d, input.ndim) for d in dims]
    if spacing is None:
        spacing = 1
    steps = list(spacing) if isinstance(spacing, (list, tuple)) else [spacing] * len(dims)
    if len(steps) == 1 and len(dims) > 1 and not isinstance(steps[0], Tensor):
        steps = steps * len(dims)
    if len(steps) != len(dims):
        raise ValueError(f"torch.gradient expected spacing to be unspecified, a scalar or a list of length "
                         f"{len(dims)}, got {len(steps)}")
    f = to_float(input)
    out = []
    for d, h in zip(dims, steps):
        n = f.shape[d]
        if n < edge_order + 1:
            raise ShapeError("torch.gradient expected each dimension size to be at least edge_order+1")

        def at(i, length=1, d=d, n=n):
            return f.narrow(d, i if i >= 0 else n + i, length)

        if isinstance(h, Tensor):
            shape = [1] * f.ndim
            shape[d] = n - 1
            dx = h.to(f.dtype).diff().reshape(*shape)
            dx1, dx2 = dx.narrow(d, 0, n - 2), dx.narrow(d, 1, n - 2)
            a = -dx2 / (dx1 * (dx1 + dx2))
            b = (dx2 - dx1) / (dx1 * dx2)
            c = dx1 / (dx2 * (dx1 + dx2))
            center = a * at(0, n - 2) + b * at(1, n - 2) + c * at(2, n - 2)
            d0, d1 = dx.narrow(d, 0, 1), dx.narrow(d, 1, 1) if n > 2 else None
            dl, dl2 = dx.narrow(d, n - 2, 1), dx.narrow(d, n - 3, 1) if n > 2 else None
            if edge_order == 1:
                first = (at(1) - at(0)) / d0
                last = (at(-1) - at(-2)) / dl
            else:
                first = (-(2.0 * d0 + d1) / (d0 * (d0 + d1))) * at(0) + ((d0 + d1) / (d0 * d1)) * at(1) \
                    + (-d0 / (d1 * (d0 + d1))) * at(2)
                last = (dl / (dl2 * (dl + dl2))) * at(-3) + (-(dl + dl2) / (dl * dl2)) * at(-2) \
                    + ((2 * dl + dl2) / (dl * (dl + dl2))) * at(-1)
        else:
            h = float(h)
            center = (at(2, n - 2) - at(0, n - 2)) / (2 * h)
            if edge_order == 1:
                first = (at(1) - at(0)) / h
                last = (at(-1) - at(-2)) / h
            else:
                first = (at(0) * -1.5 + at(1) * 2 - at(2) * 0.5) / h
                last = (at(-3) * 0.5 - at(-2) * 2 + at(-1) * 1.5) / h
        out.append(_combine.cat([first, center, last], d))
    return tuple(out)


_MANT = {"float32": (24, -149), "float64": (53, -1074)}


def nextafter(input: Tensor, other) -> Tensor:  # noqa: A002
    """The next representable value after ``input`` towards ``other`` (float32 and float64), by stepping one
    unit in the last place: x ± 2^(exponent - mantissa bits), half that towards zero from a power of two, the
    smallest subnormal from 0."""
    if input.dtype.name not in _MANT:
        raise DTypeError(f"nextafter: \"nextafter_cpu\" not implemented for '{input.dtype.name}' here; use float32 "
                         "or float64")
    y0 = input._operand(other)
    if y0.dtype is not input.dtype:
        raise DTypeError(f"nextafter: expected both inputs to have the same dtype, got {input.dtype.name} and "
                         f"{y0.dtype.name}")
    bits, tiny = _MANT[input.dtype.name]
    x, y = input.to(D.float64), y0.to(D.float64)
    m, e = frexp(x)
    e = e.to(D.float64)
    up = y > x
    step_e = (e - bits).clamp(min=tiny)
    towards_zero = up != (x > 0)
    step_e = _where((m.abs() == 0.5) & towards_zero & (x != 0), (e - bits - 1).clamp(min=tiny), step_e)
    two = x.new_full((), 2.0)
    step = two ** step_e
    r = _where(up, x + step, x - step)
    r = _where(r == 0, x * 0, r)  # stepping onto zero from a tiny value keeps its sign
    r = _where(x == 0, _where(up, x.new_full((), 2.0 ** tiny), x.new_full((), -(2.0 ** tiny))), r)
    big = float(D.finfo_max(input.dtype))
    r = _where(x.isinf(), _where(x > 0, x.new_full((), big), x.new_full((), -big)), r)
    r = _where(x == y, y, r)
    r = _where(x.isnan() | y.isnan(), x.new_full((), math.nan), r)
    return r.to(input.dtype)


# -- the normalisations' ATen forms (output and saved statistics) ---------------------------------------------------

def native_layer_norm(input: Tensor, normalized_shape, weight, bias, eps: float):  # noqa: A002
    """(layer_norm(input), mean, 1 / std) with the statistics shaped like ``input`` with size-1 normalised dims."""
    k = len(normalized_shape)
    dims = tuple(range(input.ndim - k, input.ndim))
    mean = input.mean(dims, keepdim=True) if k else input * 1
    var = input.var(dims, unbiased=False, keepdim=True) if k else input * 0
    rstd = (var + eps).rsqrt()
    out = (input - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def native_batch_norm(input: Tensor, weight, bias, running_mean, running_var, training: bool,  # noqa: A002
                      momentum: float, eps: float):
    """(batch_norm(input), batch mean, 1 / batch std) in training (the running statistics updated in place), or
    with the running statistics and empty saved statistics in evaluation."""
    dims = tuple(d for d in range(input.ndim) if d != 1)
    shape = (1, -1, *([1] * (input.ndim - 2)))
    if training:
        mean = input.mean(dims)
        var = input.var(dims, unbiased=False)
        invstd = (var + eps).rsqrt()
        if running_mean is not None or running_var is not None:
            n = input.numel() // max(input.shape[1], 1)
            with _autograd_engine.no_grad():
                if running_mean is not None:
                    running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
                if running_var is not None:
                    unbiased = var.detach() * (n / (n - 1)) if n > 1 else var.detach()
                    running_var.mul_(1 - momentum).add_(unbiased * momentum)
        out = (input - mean.reshape(*shape)) * invstd.reshape(*shape)
        saved_mean, saved_invstd = mean, invstd
    else:
        out = (input - running_mean.reshape(*shape)) * (running_var.reshape(*shape) + eps).rsqrt()
        saved_mean = saved_invstd = input.new_zeros((0,))
    if weight is not None:
        out = out * weight.reshape(*shape)
    if bias is not None:
        out = out + bias.reshape(*shape)
    return out, saved_mean, saved_invstd


def native_group_norm(input: Tensor, weight, bias, N: int, C: int, HxW: int, group: int, eps: float):  # noqa: A002,N803
    """(group_norm(input), mean, 1 / std) with the statistics of shape (N, group)."""
    x = input.reshape(N, group, (C // group) * HxW)
    mean = x.mean(-1, keepdim=True)
    rstd = (x.var(-1, unbiased=False, keepdim=True) + eps).rsqrt()
    out = ((x - mean) * rstd).reshape(*input.shape)
    shape = (1, -1, *([1] * (input.ndim - 2)))
    if weight is not None:
        out = out * weight.reshape(*shape)
    if bias is not None:
        out = out + bias.reshape(*shape)
    return out, mean.reshape(N, group), rstd.reshape(N, group)


# -- the out= helper -------------------------------------------------------------------------------------------------

def _out(out, result):
    return _combine.write_out(out, result)


FUNCTIONS = {
    "asinh": asinh, "arcsinh": asinh, "acosh": acosh, "arccosh": acosh, "atanh": atanh, "arctanh": atanh,
    "deg2rad": deg2rad, "rad2deg": rad2deg, "erfc": erfc, "logit": logit, "sinc": sinc, "signbit": signbit,
    "copysign": copysign, "fmax": fmax, "fmin": fmin, "hypot": hypot, "heaviside": heaviside,
    "logaddexp": logaddexp, "logaddexp2": logaddexp2,
    "xlogy": xlogy, "ldexp": ldexp, "rsub": rsub, "positive": positive, "angle": angle, "real": real, "conj": conj,
    "conj_physical": conj_physical, "resolve_conj": resolve_conj, "resolve_neg": resolve_neg, "isreal": isreal,
    "addmm": addmm, "addmv": addmv, "addr": addr, "baddbmm": baddbmm, "addbmm": addbmm, "addcmul": addcmul,
    "addcdiv": addcdiv, "vdot": vdot, "kron": kron, "cross": cross, "diff": diff, "trapezoid": trapezoid,
    "trapz": trapz, "cumulative_trapezoid": cumulative_trapezoid, "logcumsumexp": logcumsumexp, "cummax": cummax,
    "cummin": cummin, "nanmean": nanmean, "var_mean": var_mean, "std_mean": std_mean, "dist": dist,
    "renorm": renorm, "matrix_exp": matrix_exp, "median": median,
    "nanmedian": nanmedian, "quantile": quantile, "nanquantile": nanquantile, "native_layer_norm": native_layer_norm,
    "native_batch_norm": native_batch_norm, "native_group_norm": native_group_norm, "mode": mode, "frexp": frexp,
    "histc": histc, "histogram": histogram, "histogramdd": histogramdd, "gradient": gradient, "nextafter": nextafter,
}

#: Tensor methods torch has for these (its function names but for the few that are functions only)
METHODS = {**{n: f for n, f in FUNCTIONS.items()
              if n not in ("trapezoid", "trapz", "cumulative_trapezoid", "var_mean", "std_mean", "rsub", "histogramdd")
              and not n.startswith("native_") and n not in ("gradient", "real")}}


def install(cls=Tensor) -> None:
    """Add :data:`METHODS` to ``Tensor`` (leaving any method it defines itself; ``real`` and ``imag`` are
    properties that client/complex_ops.py installs)."""
    _install.install_methods(cls, METHODS)


install()
_install.register(FUNCTIONS)
_install.loaded(__name__)
