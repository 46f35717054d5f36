"""``tw.nn.utils``: gradient clipping (computed and applied on the cluster, no sync) and parameter/vector
conversion."""

from __future__ import annotations

import math

from tensorwire.creation import tensor
from tensorwire.functions import cat, stack
from tensorwire.tensor import Tensor

from ._tensors import no_grad, rebind

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "parameters_to_vector", "vector_to_parameters"]


def _grads(parameters) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """The ``norm_type``-norm of the norms of ``tensors`` (a 0-d tensor on the first tensor's device)."""
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    if not tensors:
        return tensor(0.0)
    norm_type = float(norm_type)
    dev = tensors[0]._dev
    norms = [t.norm(norm_type).to(dev) for t in tensors]
    total = norms[0] if len(norms) == 1 else stack(norms).norm(norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """Scale the gradients so their total norm is at most ``max_norm``; returns the total norm (a tensor).

    Like torch, the scale is ``min(1, max_norm / (total + 1e-6))`` applied unconditionally (no sync)."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = _grads(params)
    if not grads:
        return tensor(0.0)
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for p in params:
        if p.grad is not None:
            p.grad = p.grad * coef.to(p.grad._dev).to(p.grad.dtype)
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient to ``[-clip_value, clip_value]``."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for p in params:
        if p.grad is not None:
            p.grad = p.grad.clamp(-clip_value, clip_value)

def parameters_to_vector(parameters) -> Tensor:
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected a tw.Tensor, but got: {type(vec).__name__}")
    i = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            rebind(p, vec[i:i + n].reshape(p.shape).to(p.dtype).clone())
            i += n
