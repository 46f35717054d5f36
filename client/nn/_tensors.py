"""Small helpers the nn/optim packages share: grad-mode access, cheap aliases and in-place rebinding.

Buffers on the cluster are immutable, so "updating a parameter in place" means recording the new value
and rebinding the same Python object to it (its id changes; everybody holding the object sees the new
value, as with torch's shared storage). :func:`rebind` does that without autograd bookkeeping: the
callers (optimizers, ``load_state_dict``, ``init``) run where torch would run under ``no_grad``.
"""

from __future__ import annotations

import contextlib

import numpy as np

import tensorwire as tw
from tensorwire.creation import tensor as _tensor
from tensorwire.tensor import Tensor


def no_grad():
    """``tw.no_grad()`` when autograd is available, else a no-op context."""
    ng = getattr(tw, "no_grad", None)
    return ng() if ng is not None else contextlib.nullcontext()


def grad_enabled() -> bool:
    f = getattr(tw, "is_grad_enabled", None)
    return bool(f()) if f is not None else False


def alias(t: Tensor) -> Tensor:
    """A new tensor holding ``t``'s current value, outside autograd (a zero-copy reshape on the worker)."""
    if t._base is not None:
        t._refresh()
    return t._s.record("reshape", [t], {"shape": list(t._shape)}, t._dev)


def rebind(t: Tensor, new: Tensor) -> Tensor:
    """Make ``t`` hold ``new``'s value (shape, dtype and device may change); ``new`` must be a fresh
    tensor that nobody else holds (it takes ``t``'s old id and releases it when it dies)."""
    if new._base is not None:
        new._refresh()
    if new._id == t._id:
        return t
    if t._s._capture is not None:
        t._s._capture.on_swap(t, new)
    t._id, new._id = new._id, t._id
    t._shape, new._shape = new._shape, t._shape
    t.dtype, new.dtype = new.dtype, t.dtype
    t._dev, new._dev = new._dev, t._dev
    t._version += 1
    return t


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
