"""``tw.func``: torch.func's ``functional_call``, a module called with the tensors given in place of its parameters and
buffers (MAML's inner loop, per-sample code written against ``torch.func``).

torch.func's transforms (``grad``, ``vjp``, ``jacrev``, ``vmap`` ...) are not here: they rest on functorch's levels,
which tell a transform's own inputs from tensors a function closes over, and tensorwire's autograd is one tape. For
gradients of such functions use ``tw.autograd.grad`` or ``tw.autograd.functional`` (``vjp``, ``jacobian``,
``hessian``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .nn.module import Module
from .nn.utils.stateless import _functional_call

__all__ = ["functional_call"]


def functional_call(module: Module, parameter_and_buffer_dicts: dict | Sequence[dict], args: Any = None,
                    kwargs: dict | None = None, *, tie_weights: bool = True, strict: bool = False) -> Any:
    """``module(*args, **kwargs)`` with the tensors of ``parameter_and_buffer_dicts`` (dotted name -> tensor; or a
    sequence of such dicts, no name in two of them) in place of the module's parameters and buffers of those names,
    the module's own restored after the call, when it raises too (torch's ``torch.func.functional_call``). ``args``:
    a tuple of arguments, or one argument. ``tie_weights``: tensors tied in the module (one tensor under several
    names) take the value given for any of their names (ValueError for different values); ``strict``: RuntimeError
    unless the names given are exactly the module's. Gradients flow to the tensors given; a tensor the module
    rebinds during the call (a BatchNorm's running statistics in training mode) is written back to its dict."""
    if isinstance(parameter_and_buffer_dicts, dict):
        parameters_and_buffers = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("Expected all elements of parameter_and_buffer_dicts to be dictionaries")
        counts: dict[str, int] = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                counts[k] = counts.get(k, 0) + 1
        repeated = [k for k, n in counts.items() if n > 1]
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of functional call is ambiguous")
        parameters_and_buffers = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(f"Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, but got "
                         f"{type(parameter_and_buffer_dicts)}")
    return _functional_call(module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict)
