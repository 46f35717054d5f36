"""Small helpers the nn/optim packages share: grad-mode access, cheap aliases and in-place rebinding (:func:`alias`
and :func:`rebind` live in ``tensorwire._aliases``, below ``tensor``, which uses them too; see there)."""

from __future__ import annotations

import contextlib

import numpy as np

import tensorwire as tw
from tensorwire._aliases import alias, rebind
from tensorwire.creation import tensor as _tensor
from tensorwire.tensor import Tensor

__all__ = ["alias", "fresh", "grad_enabled", "no_grad", "rebind", "set_value"]


def no_grad():
    """``tw.no_grad()`` when autograd is available, else a no-op context."""
    ng = getattr(tw, "no_grad", None)
    return ng() if ng is not None else contextlib.nullcontext()


def grad_enabled() -> bool:
    f = getattr(tw, "is_grad_enabled", None)
    return bool(f()) if f is not None else False


def fresh(t: Tensor) -> Tensor:
    """``t`` itself if it is a result nobody else will rebind, else an alias: safe to :func:`rebind` into."""
    return alias(t)


def set_value(t: Tensor, value) -> Tensor:
    """``t``'s value becomes ``value`` (a Tensor, numpy array or number) cast to ``t``'s dtype and device."""
    if not isinstance(value, Tensor):
        value = _tensor(np.asarray(value), dtype=t.dtype, device=t._dev, session=t._s)
    if tuple(value._shape) != tuple(t._shape):
        value = value.expand(*t._shape)
    new = value.to(dtype=t.dtype, device=t._dev)
    return rebind(t, alias(new) if new is value else new)
