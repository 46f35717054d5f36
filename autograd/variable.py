"""``torch.autograd.Variable``: the legacy wrapper, kept for old scripts. Since torch 0.4 every tensor is a Variable:
``isinstance(t, Variable)`` is True for any tensor, and ``Variable(t, requires_grad=False)`` returns a new tensor
holding ``t``'s value without its history (torch's detached alias) that requires grad as asked."""

from __future__ import annotations

import warnings

import tensorwire as _tw
from tensorwire._factories import TensorBase

__all__ = ["Variable"]


class _VariableMeta(type):
    def __instancecheck__(cls, other) -> bool:
        return isinstance(other, TensorBase)


class Variable(metaclass=_VariableMeta):
    """``Variable(data=None, requires_grad=False, volatile=False)``: ``data`` detached (a new tensor, sharing nothing
    of its graph) with ``requires_grad`` set; no ``data``: an empty tensor. ``volatile`` is ignored with torch's
    warning."""

    def __new__(cls, data=None, requires_grad: bool = False, volatile: bool = False):
        if volatile:
            warnings.warn("volatile was removed and now has no effect. Use `with torch.no_grad():` instead.",
                          stacklevel=2)
        if data is None:
            out = _tw.empty(0)  # (the package's lazy name: the client's creation module, loaded at this first use)
        elif not isinstance(data, TensorBase):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        else:
            out = data.detach()
        out.requires_grad = bool(requires_grad)
        return out
