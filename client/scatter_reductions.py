"""``scatter_reduce`` and ``index_reduce``: torch's five reductions of values into the positions an index names, each
in time and memory linear in the index (a graph network's aggregation of edge messages into nodes).

"prod", "amax" and "amin" are the ``scatter_reduce`` primitive (``protocol/ops/indexing.py``: ``ufunc.at`` on the
CPU's numpy kernels, a scatter kernel elsewhere, as ``scatter_add``; its gradient is torch's, in
``autograd/vjp.py``). "sum" is ``scatter_add``, and "mean" that sum over a count made by another ``scatter_add``;
without ``include_self`` the positions written are zeroed first (a ``scatter``). Their gradients follow from those
ops and are torch's (``self``'s divided by the count, or zero where something was scattered without
``include_self``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.protocol.ops import SCATTER_REDUCES
from tensorwire.protocol.shapes import norm_dim

if TYPE_CHECKING:
    from .tensor import Tensor

#: torch's reductions, as ``scatter_reduce`` names them
REDUCES = ("sum", "prod", "mean", "amax", "amin")


def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,  # noqa: A002
                   include_self: bool = True) -> Tensor:
    """``input`` with each ``src`` element reduced ("sum", "prod", "mean", "amax", "amin") into the position
    ``index`` names along ``dim`` (with ``input``'s own value when ``include_self``); positions nothing is scattered
    to keep ``input``'s value. An integer mean rounds down, as torch's."""
    if reduce not in REDUCES:
        raise ValueError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if input.ndim == 0:
        return scatter_reduce(input.reshape(1), 0, index.reshape(1), src.reshape(1), reduce,
                              include_self=include_self).reshape(())
    if index.ndim != input.ndim:
        raise ShapeError("scatter_reduce(): index tensor must have the same number of dimensions as input tensor")
    d = norm_dim(dim, input.ndim)
    if index.numel() == 0:
        return input.clone()
    src = src.to(input.dtype)
    if reduce in SCATTER_REDUCES:
        return input._rec("scatter_reduce", [input, index, src],
                          {"dim": d, "reduce": reduce, "include_self": bool(include_self)})
    if reduce == "mean" and input.dtype is D.bool_:
        raise DTypeError('"scatter_reduce" with reduce "mean" is not implemented for \'Bool\'')
    base = input if include_self else input.scatter(d, index, 0)
    total = base.scatter_add(d, index, src)
    if reduce == "sum":
        return total
    ones = input._s.scalar(1, input.dtype, input._dev).expand(*index.shape)
    start = input._s.scalar(1 if include_self else 0, input.dtype, input._dev).expand(*input.shape)
    count = start.scatter_add(d, index, ones).clamp(min=1)  # (a position nothing reached: its input over 1)
    return total / count if input.dtype.is_inexact else total // count


def index_reduce(input: Tensor, dim: int, index: Tensor, source: Tensor, reduce: str, *,  # noqa: A002
                 include_self: bool = True) -> Tensor:
    """``input`` with the slices of ``source`` reduced ("prod", "mean", "amax", "amin") into the slices ``index``
    names along ``dim``."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise ValueError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    if input.ndim == 0:
        return index_reduce(input.reshape(1), 0, index.reshape(1), source.reshape(1), reduce,
                            include_self=include_self).reshape(())
    d = norm_dim(dim, input.ndim)
    src = source if source.ndim else source.reshape(1)
    shape = [1] * src.ndim
    shape[d] = index.numel()
    idx = index.reshape(*shape).expand(*src.shape)
    return scatter_reduce(input, d, idx, src, reduce, include_self=include_self)
