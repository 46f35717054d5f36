"""torch's zero gradients for composites that leave the autograd graph (issue 33).

torch gives an op's input a gradient whenever the op's output requires grad: zeros where the op is piecewise
constant in it (``cdist`` with p = 0, ``copysign``'s sign source, ``bernoulli``'s probabilities, ``fill``) or
where the output is empty. A tensorwire composite that computes such a result through non-differentiable ops
(comparisons, casts of bools, random draws, constants) leaves the graph, and its inputs get ``None``: for
``autograd.grad`` an error without ``allow_unused``, for ``backward`` a ``.grad`` left ``None`` (which optimizers
skip, where torch's zeros still meet weight decay and momentum). :func:`zero_grad_from` joins such a result to its
inputs with a zero gradient.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorwire.protocol import dtypes as D

from .autograd_engine import is_grad_enabled

if TYPE_CHECKING:
    from .tensor import Tensor  # (not at run time: Tensor._assign uses this module)


def zero_grad_from(out: Tensor, *inputs) -> Tensor:
    """``out``, with a zero gradient to each tensor of ``inputs`` that requires grad, when grad mode is on and
    ``out`` is floating: ``where(True, out, x.sum())`` (the value is ``out``'s exactly, whatever ``x`` holds: no
    ``0 * inf``; the gradient of ``x`` is ``where``'s zero branch)."""
    if not is_grad_enabled() or not out.dtype.is_floating_point:
        return out
    for x in inputs:
        if getattr(x, "requires_grad", False):  # (a tensor that requires grad; not a number or an array)
            yes = out._s.scalar(True, D.bool_, out._dev)
            out = out._rec("where", [yes, out, x.sum().to(out.dtype)])  # (functions.where's record)
    return out
