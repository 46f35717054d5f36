"""Ops that run on the client's LAPACK (numpy/scipy), for the linear algebra no backend has a kernel for (issue 33).

A host op is a sync point, as ``unique`` and ``nonzero`` are: its inputs are fetched (all in one round trip), the
factorisation runs here in float64 (the answer torch's float64 would give, rounded once to the input's dtype), and
its results are uploaded to the inputs' device. It is a :class:`~tensorwire.autograd_engine.Function`: its gradient
is written with tensor ops on the lazy gradients, from the outputs and any extra factors the forward saved (an
inverse, so a backward adds no round trip). Why host-run and not backend ops: docs/architecture.md, "Linear algebra".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, TensorwireError

from ._factories import from_data
from .autograd_engine import Function

if TYPE_CHECKING:  # (annotations only: importing Tensor here would load it, and the linear algebra
    # modules that import this one, while this one is half run: client/_install.py)
    from .tensor import Tensor


class LinAlgError(TensorwireError, RuntimeError):
    """A factorisation that does not exist for these values (a singular matrix, one that is not positive-definite):
    torch.linalg.LinAlgError. The ``*_ex`` forms return an ``info`` tensor instead of raising."""


@dataclass(frozen=True)
class HostOp:
    """One host-run op.

    ``compute(attrs, *arrays)`` takes the inputs as numpy arrays (floating ones in float64) and returns
    ``(outputs, saved)``: float64 outputs come back in the first input's dtype, integer ones as they are; ``saved``
    are extra float arrays for the backward. ``grad(ctx, inputs, outputs, saved, grads)`` returns one gradient (or
    ``None``) per input; ``None`` here: not differentiable (a backward that reaches it raises).
    """

    name: str
    compute: Callable
    grad: Callable | None = None


def check_float(name: str, *ts: Tensor) -> None:
    """torch's refusal of a non-floating input to a linalg op."""
    for t in ts:
        if not t.dtype.is_floating_point:
            raise DTypeError(f"{name}: Expected a floating point or complex tensor as input. Got "
                             f"{t.dtype.name.capitalize()}")


def _host_all(ts: tuple) -> list[np.ndarray]:
    """The inputs' values (floating ones in float64), fetched in one round trip (``Session.fetch_all``: a solve's
    two operands cost one, not one each)."""
    for t in ts:
        b = t._base
        if b is not None and b._version != t._base_version:  # (a view whose base changed: as Tensor._numpy)
            t._refresh()
    arrays = ts[0]._s.fetch_all(list(ts)) if ts else []
    out = []
    for t, a in zip(ts, arrays):
        a = np.asarray(a)
        if t.dtype is D.bfloat16 and a.dtype != D.bfloat16.np:
            a = a.view(D.bfloat16.np)
        out.append(a.astype(np.float64) if t.dtype.is_floating_point else a)
    return out


def _upload(a: np.ndarray, like: Tensor) -> Tensor:
    # (a complex result, an eigen-decomposition's: the complex dtype of the input's)
    dtype = like.dtype if a.dtype.kind == "f" else D.to_complex(like.dtype) if a.dtype.kind == "c" else \
        D.from_numpy(a.dtype)
    return from_data(like._s, np.array(a, order="C"), dtype, like._dev)


class _HostRun(Function):
    @staticmethod
    def forward(ctx, op: HostOp, attrs: dict, *inputs):
        outs, saved = op.compute(attrs, *_host_all(inputs))
        like = next(t for t in inputs if t.dtype.is_floating_point)
        outs = [_upload(a, like) for a in outs]
        ctx.op, ctx.attrs, ctx.n_in, ctx.n_out = op, attrs, len(inputs), len(outs)
        ctx.mark_non_differentiable(*[o for o in outs if not o.dtype.is_inexact])
        if op.grad is not None:
            ctx.save_for_backward(*inputs, *outs, *[_upload(a, like) for a in saved])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        op = ctx.op
        if op.grad is None:
            raise NotImplementedError(f"{op.name} is not differentiable in tensorwire (its factors are computed on "
                                      "the client's LAPACK without a gradient); differentiate a form that is")
        saved = ctx.saved_tensors
        inputs, outs, extra = saved[:ctx.n_in], saved[ctx.n_in:ctx.n_in + ctx.n_out], saved[ctx.n_in + ctx.n_out:]
        return (None, None, *op.grad(ctx, inputs, outs, extra, grads))


def host_run(op: HostOp, *inputs: Tensor, **attrs) -> tuple:
    """Run ``op`` on the client's LAPACK: its outputs, as tensors on the first input's device."""
    return _HostRun.apply(op, attrs, *inputs)


def per_matrix(fn: Callable, a: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """``fn(matrix, *other_matrices)`` (which returns a tuple of arrays) over the batch dims of ``a`` (the others
    share them), stacked back: for the LAPACK routines numpy does not batch. The matrices must not be empty (scipy's
    LAPACK wrappers do not take them: the callers answer those themselves)."""
    batch = a.shape[:-2]
    flat = [x.reshape(-1, *x.shape[len(batch):]) for x in (a, *others)]
    results = [fn(*xs) for xs in zip(*flat)]
    if not results:  # an empty batch: one call on zeros gives the shapes
        probe = fn(*[np.zeros(x.shape[1:], x.dtype) for x in flat])
        return [np.zeros((*batch, *r.shape), r.dtype) for r in probe]
    return [np.stack([r[i] for r in results]).reshape(batch + np.shape(results[0][i]))
            for i in range(len(results[0]))]
