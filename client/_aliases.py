"""Cheap aliases and in-place rebinding of tensors, below :mod:`tensorwire.tensor` (it imports nothing of the
package): ``x.data = y``, ``out=`` resizing (:func:`tensorwire.combine.write_out`), the optimizers, ``init`` and
``load_state_dict`` use them; ``tensorwire.nn._tensors`` gives them to the nn and optim packages.

Buffers on the cluster are immutable, so "updating a parameter in place" means recording the new value and
rebinding the same Python object to it (its id changes; everybody holding the object sees the new value, as with
torch's shared storage). :func:`rebind` does that without autograd bookkeeping: the callers (optimizers,
``load_state_dict``, ``init``) run where torch would run under ``no_grad``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tensor import Tensor


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
