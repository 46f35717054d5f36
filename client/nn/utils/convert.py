"""``parameters_to_vector`` / ``vector_to_parameters``."""

from __future__ import annotations

from tensorwire.tensor import Tensor

from .._tensors import no_grad, rebind


def parameters_to_vector(parameters) -> Tensor:
    from tensorwire.functions import cat

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
