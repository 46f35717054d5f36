"""Sorting and sampling: ``sort``, ``argsort``, ``msort``, ``topk``, ``kthvalue``, ``unique`` and ``multinomial``,
with torch's signatures and results.

Every order comes from one primitive, ``argsort`` (stable: equal elements keep their order; NaN sorts last
ascending and first descending, as torch's); values are gathered with those indices, so gradients flow to the
values as torch's do. ``unique`` is a sync point (its size depends on the data), as ``nonzero`` is.
``multinomial`` draws from the session's counter-based generator: with replacement by inverting the
cumulative weights, without replacement by the exponential-race trick (the ``num_samples`` largest
``weight / Exp(1)`` keys), which samples exactly as sequential draws without replacement do.
"""

from __future__ import annotations

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ShapeError
from tensorwire.protocol.shapes import norm_dim

from . import _install
from . import combine as _combine
from . import creation as _creation
from .return_types import return_type
from .tensor import Tensor

Sort = return_type("sort", ["values", "indices"])
TopK = return_type("topk", ["values", "indices"])
KthValue = return_type("kthvalue", ["values", "indices"])


def argsort(x, dim: int = -1, descending: bool = False, stable: bool = False):
    """The indices that sort ``x`` along ``dim`` (always stable here: ``stable`` is accepted)."""
    if x.ndim == 0:
        return x._s.scalar(0, D.int64, x._dev)
    d = norm_dim(dim, x.ndim)
    return x._rec("argsort", [x], {"dim": d, "descending": bool(descending)})


def sort(x, dim: int = -1, descending: bool = False, stable: bool = False) -> Sort:
    """``(values, indices)`` of ``x`` sorted along ``dim``."""
    idx = argsort(x, dim, descending)
    if x.ndim == 0:
        return Sort(x.clone(), idx)
    return Sort(x.gather(norm_dim(dim, x.ndim), idx), idx)


def msort(x):
    """``sort(x, dim=0).values``."""
    return sort(x, 0).values


def topk(x, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> TopK:  # noqa: A002
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices, largest first (NaN counts as the
    largest, as torch's)."""
    d = norm_dim(dim, max(x.ndim, 1))
    n = x._shape[d] if x.ndim else 1
    if not 0 <= k <= n:
        raise ShapeError(f"selected index k out of range: k={k} for a dimension of size {n}")
    if x.ndim == 0:
        return TopK(x.clone(), x._s.scalar(0, D.int64, x._dev))
    idx = argsort(x, d, descending=largest).narrow(d, 0, k)
    return TopK(x.gather(d, idx), idx)


def kthvalue(x, k: int, dim: int = -1, keepdim: bool = False) -> KthValue:
    """The ``k``-th smallest element (1-based) along ``dim`` and its index."""
    d = norm_dim(dim, max(x.ndim, 1))
    n = x._shape[d] if x.ndim else 1
    if not 1 <= k <= n:
        raise ShapeError(f"kthvalue(): selected number k out of range for dimension {d} of size {n}")
    if x.ndim == 0:
        return KthValue(x.clone(), x._s.scalar(0, D.int64, x._dev))
    idx = argsort(x, d).narrow(d, k - 1, 1)
    vals = x.gather(d, idx)
    if not keepdim:
        vals, idx = vals.squeeze(d), idx.squeeze(d)
    return KthValue(vals, idx)


def unique(x, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
           dim: int | None = None):
    """The distinct values of ``x`` (sorted), and optionally the inverse indices and the counts, as torch.unique.
    A sync point: the result's size depends on the data."""
    a = x._numpy()
    axis = None if dim is None else norm_dim(dim, x.ndim)
    # (each NaN its own value, as torch's: numpy's default merges them)
    vals, inv, counts = np.unique(a, return_inverse=True, return_counts=True, axis=axis, equal_nan=False)
    if axis is None:
        inv = inv.reshape(a.shape)
    out = [_creation.tensor(vals, dtype=x.dtype, device=x._dev, session=x._s)]
    if return_inverse:
        out.append(_creation.tensor(inv.astype(np.int64), device=x._dev, session=x._s))
    if return_counts:
        out.append(_creation.tensor(counts.astype(np.int64), device=x._dev, session=x._s))
    return out[0] if len(out) == 1 else tuple(out)


def multinomial(weights, num_samples: int, replacement: bool = False, *, generator=None, out=None):
    """``num_samples`` category indices per row of ``weights`` (1-D or 2-D, non-negative, not necessarily summing
    to one), drawn with or without replacement."""
    if weights.ndim not in (1, 2):
        raise ShapeError(f"prob_dist must be 1 or 2 dim, got {weights.ndim}")
    if not weights.dtype.is_floating_point:
        raise TypeError(f"multinomial only supports floating-point dtypes for input, got: {weights.dtype.name}")
    n = weights._shape[-1]
    if num_samples <= 0:
        raise ValueError(f"cannot sample n_sample <= 0 samples, got {num_samples}")
    if not replacement and num_samples > n:
        raise ValueError(f"cannot sample n_sample > prob_dist.size(-1) samples without replacement "
                         f"({num_samples} > {n})")
    rows = weights._shape[:-1]
    w = weights.to(D.float64) if weights.dtype is not D.float64 else weights
    if replacement:
        cdf = w.cumsum(-1)
        u = _creation.rand(*rows, num_samples, dtype=D.float64, device=weights._dev, generator=generator,
                           session=weights._s) * cdf.narrow(-1, n - 1, 1)
        idx = (cdf.unsqueeze(-2) <= u.unsqueeze(-1)).sum(-1).clamp(max=n - 1)
    else:
        e = -(1 - _creation.rand(*rows, n, dtype=D.float64, device=weights._dev, generator=generator,
                                 session=weights._s)).log()  # Exp(1)
        idx = argsort(w / e, -1, descending=True).narrow(-1, 0, num_samples)
    return _combine.write_out(out, idx.to(D.int64))


#: Tensor methods (``x.sort()`` ...): these functions with ``x`` first
METHODS = {"sort": sort, "argsort": argsort, "msort": msort, "topk": topk, "kthvalue": kthvalue, "unique": unique,
           "multinomial": multinomial}


def install(cls=Tensor) -> None:
    """Add :data:`METHODS` to ``Tensor`` (leaving any method it defines itself)."""
    _install.install_methods(cls, METHODS)


install()
_install.loaded(__name__)
