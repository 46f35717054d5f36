"""``tw.masked``: torch.masked's reductions and normalisations on strided tensors with a boolean ``mask`` (issue
33): the masked-out elements are replaced by the operation's identity (0 for sums, 1 for products, -inf/+inf or
the integer extremes for max/min...) and the plain operation runs on the result, exactly as torch.masked does for
strided tensors; ``mean``, ``var`` and ``std`` divide by the count of masked-in elements (NaN where there is
none)."""

from __future__ import annotations

import math

import numpy as np

from tensorwire.protocol import dtypes as D

from . import functions as _functions
from . import linalg as _linalg
from . import math_extras as _math_extras
from .tensor import Tensor

__all__ = ["sum", "prod", "cumsum", "cumprod", "amax", "amin", "argmax", "argmin", "mean", "median", "logsumexp",
           "logaddexp", "norm", "var", "std", "softmax", "log_softmax", "softmin", "normalize"]

_SMALL_INTS = ("bool", "uint8", "int8", "int16", "int32")


def _canonical_dim(dim, ndim: int) -> tuple[int, ...]:
    if dim == () or dim is None:
        return tuple(range(ndim))
    n = max(ndim, 1)
    dims = []
    for d in (dim,) if isinstance(dim, int) else dim:
        if d in dims:
            raise ValueError(f"dim={d} appears multiple times in the list of dims")
        if not -n <= d < n:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
        dims.append(d % n)
    return tuple(sorted(dims))


def _input_mask(input: Tensor, mask) -> Tensor:  # noqa: A002
    if mask.ndim > input.ndim:
        raise IndexError("_input_mask expected broadcastable mask (got mask dimensionality higher than of the input)")
    if tuple(mask.shape) != tuple(input.shape):
        mask = mask.expand(*input.shape)
    return mask if mask.dtype is D.bool_ else mask.to(D.bool_)


def _identity(op: str, x: Tensor, ord=None):
    d = x.dtype
    if op in ("sum", "cumsum", "norm"):
        return math.inf if op == "norm" and ord == -math.inf else 0
    if op in ("prod", "cumprod"):
        return 1
    if op in ("amax", "argmax", "logaddexp", "logsumexp"):
        return -math.inf if d.is_floating_point else (False if d is D.bool_ else int(np.iinfo(d.np).min))
    if op in ("amin", "argmin"):
        return math.inf if d.is_floating_point else (True if d is D.bool_ else int(np.iinfo(d.np).max))
    if op == "median":
        return math.nan
    raise NotImplementedError(f"identity of {op} on {d.name} input")


def _combine(op: str, input: Tensor, mask, ord=None) -> Tensor:  # noqa: A002
    """``input`` with the masked-out elements replaced by ``op``'s identity."""
    if mask is None:
        return input

    m = _input_mask(input, mask)
    return _functions.where(m, input, input._s.scalar(_identity(op, input, ord), input.dtype, input._dev))


def _reduced_dtype(input: Tensor, dtype):  # noqa: A002
    if dtype is not None:
        return dtype
    return D.int64 if input.dtype.name in _SMALL_INTS else input.dtype


def sum(input: Tensor, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A001,A002
    """The sum of the masked-in elements (0 where there is none)."""
    dtype = _reduced_dtype(input, dtype)
    return _combine("sum", input, mask).sum(_canonical_dim(dim, input.ndim), bool(keepdim), dtype=dtype)


def prod(input: Tensor, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A002
    """The product of the masked-in elements (1 where there is none)."""
    dtype = _reduced_dtype(input, dtype)
    r = _combine("prod", input, mask).to(dtype)
    for d in reversed(_canonical_dim(dim, input.ndim)):
        r = r.prod(d, keepdim=bool(keepdim))
    return r


def cumsum(input: Tensor, dim: int, *, dtype=None, mask=None) -> Tensor:  # noqa: A002
    dtype = dtype or input.dtype
    return _combine("sum", input, mask).cumsum(_canonical_dim(dim, input.ndim)[0], dtype=dtype).to(dtype)


def cumprod(input: Tensor, dim: int, *, dtype=None, mask=None) -> Tensor:  # noqa: A002
    dtype = dtype or input.dtype
    return _combine("prod", input, mask).cumprod(_canonical_dim(dim, input.ndim)[0], dtype=dtype).to(dtype)


def amax(input: Tensor, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A002
    x = _combine("amax", input, mask)
    return x.amax(_canonical_dim(dim, x.ndim), bool(keepdim)).to(dtype or input.dtype)


def amin(input: Tensor, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A002
    x = _combine("amin", input, mask)
    return x.amin(_canonical_dim(dim, x.ndim), bool(keepdim)).to(dtype or input.dtype)


def argmax(input: Tensor, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A002
    return _combine("argmax", input, mask).argmax(dim, bool(keepdim)).to(dtype or input.dtype)


def argmin(input: Tensor, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A002
    return _combine("argmin", input, mask).argmin(dim, bool(keepdim)).to(dtype or input.dtype)


def mean(input: Tensor, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A002
    """The mean of the masked-in elements (NaN where there is none)."""
    src = "Optional"
    if dtype is None:
        dtype, src = input.dtype, "Input"
    if not dtype.is_floating_point:
        raise ValueError(f"mean(): Could not infer output dtype. {src} dtype must be either a floating point or "
                         f"complex dtype. Got: {dtype.name.capitalize()}")
    if mask is None:
        count = input.new_ones(input.shape, dtype=D.int64)
    else:
        count = _input_mask(input, mask)
    count = count.sum(_canonical_dim(dim, input.ndim), bool(keepdim))
    total = sum(input, dim, keepdim=keepdim, dtype=dtype, mask=mask)
    return total / count


def median(input: Tensor, dim: int = -1, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A002
    """The lower median of the masked-in elements along ``dim`` (NaN where there is none)."""
    dtype = dtype or input.dtype
    d = _canonical_dim(dim, input.ndim)[0]
    is_float = input.dtype.is_floating_point
    x = input if is_float else input.to(D.float32)
    out = _math_extras.nanmedian(_combine("median", x, mask), d, keepdim).values
    if is_float:
        return out
    if bool(out.isnan().any()):
        raise ValueError("masked median expects no fully masked out rows if dtype is not floating point")
    return out.to(dtype)


def logsumexp(input: Tensor, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A002
    x = _combine("logsumexp", input, mask)
    return x.logsumexp(_canonical_dim(dim, input.ndim), keepdim=keepdim).to(dtype or input.dtype)


def logaddexp(input: Tensor, other: Tensor, *, dtype=None, input_mask=None, other_mask=None) -> Tensor:  # noqa: A002
    a = _combine("logaddexp", input, input_mask)
    b = _combine("logaddexp", other, other_mask)
    return _math_extras.logaddexp(a, b).to(dtype or input.dtype)


def norm(input: Tensor, ord=2.0, dim=None, *, keepdim=False, dtype=None, mask=None) -> Tensor:  # noqa: A002
    x = _combine("norm", input, mask, ord)
    return _linalg.vector_norm(x, ord, _canonical_dim(dim, input.ndim), bool(keepdim), dtype=dtype or input.dtype)


def _std_var(input: Tensor, dim, unbiased, correction_opt, keepdim, dtype, mask, take_sqrt: bool) -> Tensor:  # noqa: A002
    correction = 1.0
    if unbiased is not None:
        correction = 1.0 if unbiased else 0.0
    if correction_opt is not None:
        correction = float(correction_opt)
    if dtype is None:
        dtype = input.dtype if input.dtype.is_floating_point else D.float32
    compute = dtype if dtype.is_floating_point else D.float32
    if mask is None:
        inmask = None
        count = sum(input.new_ones(input.shape, dtype=D.int64), dim, keepdim=True)
    else:
        inmask = _input_mask(input, mask)
        count = inmask.sum(_canonical_dim(dim, input.ndim), keepdim=True)
    total = sum(input, dim, keepdim=True, dtype=dtype, mask=inmask)
    x = input - total / count
    t = sum(x * x, dim, keepdim=keepdim, dtype=compute, mask=inmask)
    if not keepdim:
        count = count.reshape(*t.shape)
    if correction != 0:
        count = count.to(compute) - correction
        count = count.maximum(count.new_zeros(()))
    out = (t / count).to(dtype)
    return out.sqrt() if take_sqrt else out


def var(input: Tensor, dim=None, unbiased=None, *, correction=None, keepdim=False, dtype=None,  # noqa: A002
        mask=None) -> Tensor:
    """The variance of the masked-in elements."""
    return _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, False)


def std(input: Tensor, dim=None, unbiased=None, *, correction=None, keepdim=False, dtype=None,  # noqa: A002
        mask=None) -> Tensor:
    """The standard deviation of the masked-in elements."""
    return _std_var(input, dim, unbiased, correction, keepdim, dtype, mask, True)


def softmax(input: Tensor, dim: int, *, dtype=None, mask=None) -> Tensor:  # noqa: A002
    x = _combine("amax", input, mask)
    return x.softmax(_canonical_dim(dim, input.ndim)[0], dtype=dtype or input.dtype)


def log_softmax(input: Tensor, dim: int, *, dtype=None, mask=None) -> Tensor:  # noqa: A002
    x = _combine("amax", input, mask)
    return x.log_softmax(_canonical_dim(dim, input.ndim)[0], dtype=dtype or input.dtype)


def softmin(input: Tensor, dim: int, *, dtype=None, mask=None) -> Tensor:  # noqa: A002
    x = _combine("amin", input, mask)
    return (-x).softmax(_canonical_dim(dim, input.ndim)[0], dtype=dtype or input.dtype)


def normalize(input: Tensor, ord, dim: int, *, eps: float = 1e-12, dtype=None, mask=None) -> Tensor:  # noqa: A002
    """The masked-in elements divided by their ``ord``-norm along ``dim`` (at least ``eps``)."""
    dtype = dtype or input.dtype
    x = _combine("sum", input, mask)
    n = norm(input, ord, dim, keepdim=True, dtype=dtype, mask=mask)
    return x / n.maximum(n.new_full((), eps))
