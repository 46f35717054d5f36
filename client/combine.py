"""torch's joining and selecting functions, ``tw.cat``, ``tw.stack``, ``tw.where`` (and ``hstack``, ``vstack``),
with the ``out=`` writer :func:`write_out`: the few module-level functions that Tensor's own methods build on.

They sit below :mod:`tensorwire.functions` (which gives them as ``tw.<name>``) because the modules that add Tensor's
methods (client/_install.py) import them at module level, while ``tensor`` loads those modules: this module
needs only the class ``Tensor``, not its methods (``functions`` reads their docstrings when it loads), and imports
``creation`` as a module (:func:`arange_like`). Those modules import it as a module too (``from . import combine
as _combine``): it may be the half-run module whose import is loading them.
"""

from __future__ import annotations

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.protocol.shapes import norm_dim

from . import creation as _creation
from .tensor import Tensor
from .zero_grads import zero_grad_from


def _first_tensor(*xs) -> Tensor | None:
    for x in xs:
        if isinstance(x, Tensor):
            return x
    return None


def write_out(out, result):
    """torch's ``out=``: ``result`` written into ``out`` in place (cast to its dtype, refusing a narrower dtype
    category as torch does), or ``out`` resized to ``result``'s shape when it differs; returns ``out``. Tuple
    results (``max(dim=...)``) take a tuple of outs."""
    if out is None:
        return result
    if isinstance(result, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(result):
            raise TypeError(f"out= must be a tuple of {len(result)} tensors here")
        for o, r in zip(out, result):
            write_out(o, r)
        return type(result)(*out) if hasattr(result, "_fields") else tuple(out)
    if not isinstance(out, Tensor):
        raise TypeError(f"out= must be a Tensor, not {type(out).__name__}")
    if out._shape == result._shape:
        return out._assign(result)
    if result.dtype.category > out.dtype.category:
        raise DTypeError(f"result type {result.dtype.name.capitalize()} can't be cast to the desired output type "
                         f"{out.dtype.name.capitalize()}")
    from .nn._tensors import alias, rebind  # lazy: importing tensorwire.nn loads its layers

    return rebind(out, alias(result.to(out.dtype)))


def cat(tensors, dim: int = 0, *, out=None) -> Tensor:
    """Concatenate tensors along ``dim`` (dtypes promote; empty 1-D tensors are skipped, as torch)."""
    tensors = [t for t in tensors]
    if not tensors:
        raise ValueError("cat() expected a non-empty list of Tensors")
    live = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    if len(live) == 1:
        r = live[0].clone()
    else:
        t0 = live[0]
        r = t0._rec("cat", live, {"dim": norm_dim(dim, t0.ndim)})
    if len(live) < len(tensors):  # the skipped ones still get torch's (zero) gradient
        kept = {id(t) for t in live}
        r = zero_grad_from(r, *(t for t in tensors if id(t) not in kept))
    return write_out(out, r)


concat = cat
concatenate = cat


def stack(tensors, dim: int = 0, *, out=None) -> Tensor:
    """Stack same-shaped tensors along a new dim."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack expects a non-empty TensorList")
    s0 = tensors[0].shape
    for t in tensors:
        if t.shape != s0:
            raise ShapeError(f"stack expects each tensor to be equal size, but got {list(s0)} and {list(t.shape)}")
    d = norm_dim(dim, len(s0), allow_end=True)
    if d == len(s0):  # a new last dim (0-d tensors too): each one a column
        return cat([t.unsqueeze(d) for t in tensors], d, out=out)
    # along an existing position: the tensors side by side along dim d are the stack with dims d and d + 1 merged,
    # so one cat and one reshape (two records, not one unsqueeze per tensor and a cat)
    joined = cat(tensors, d)
    shape = s0[:d] + (len(tensors),) + s0[d:]
    return write_out(out, joined._rec("reshape", [joined], {"shape": list(shape)}))


def hstack(tensors) -> Tensor:
    tensors = list(tensors)
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    return cat([t.reshape(1, -1) if t.ndim == 1 else t for t in tensors], 0)


def where(condition, input=None, other=None, *, out=None) -> Tensor:  # noqa: A002
    """``where(cond, x, y)`` elementwise; ``where(cond)`` is ``cond.nonzero(as_tuple=True)``."""
    if input is None and other is None:
        return condition.nonzero(as_tuple=True)
    ref = _first_tensor(input, other, condition)
    x = input if isinstance(input, Tensor) else None
    y = other if isinstance(other, Tensor) else None
    if x is None and y is None:
        dt = D.result_type(input, other)
        x = ref._s.scalar(input, dt, ref._dev)
        y = ref._s.scalar(other, dt, ref._dev)
    elif x is None:
        x = ref._s.scalar(input, D.result_type((y.dtype, y.ndim), input), ref._dev)
    elif y is None:
        y = ref._s.scalar(other, D.result_type((x.dtype, x.ndim), other), ref._dev)
    c = condition if isinstance(condition, Tensor) else ref._operand(condition)
    return write_out(out, ref._rec("where", [c, x, y]))


def arange_like(t: Tensor, start: int, end: int) -> Tensor:
    return _creation.arange(start, end, device=t._dev, session=t._s)
