"""The signature a compiled graph is cached by: what makes two calls record the same graph.

Tensors count by shape, dtype, device, ``requires_grad``, session and which arguments are the same tensor;
Python scalars, strings and other hashable values by value (their type included: ``1`` and ``1.0`` differ; floats
by their bits, :func:`~tensorwire.protocol.graph.freeze`: ``-0.0`` and ``0.0`` differ, a NaN matches itself);
anything else by identity. Grad mode, autocast and the default dtype change what a call records, so they count too.
"""

from __future__ import annotations

from tensorwire import autocast_state as _amp
from tensorwire.autograd_engine import is_grad_enabled
from tensorwire.protocol.dtypes import get_default_dtype
from tensorwire.protocol.graph import freeze
from tensorwire.tensor import Tensor

from .pytree import flatten

#: the structure of ``(args, {})`` for a call of n positional tensors, by n (see :func:`signature`'s quick path)
_TENSOR_ARGS_SPECS: dict[int, tuple] = {}


def signature(args: tuple, kwargs: dict) -> tuple[tuple, list, list[Tensor]]:
    """``(key, leaves, tensors)``: the cache key of a call, its flattened leaves and the tensor leaves in order."""
    if not kwargs and all(type(a) is Tensor for a in args):  # (the common call, its key made without a walk)
        spec = _TENSOR_ARGS_SPECS.get(len(args))
        if spec is None:
            spec = _TENSOR_ARGS_SPECS[len(args)] = flatten((args, kwargs), [])
        leaves = list(args)
    else:
        leaves = []
        spec = flatten((args, kwargs), leaves)
    parts = []
    tensors: list[Tensor] = []
    first: dict[int, int] = {}
    for x in leaves:
        if isinstance(x, Tensor):
            k = first.setdefault(id(x), len(tensors))
            tensors.append(x)
            parts.append((x._shape, x.dtype.name, x._dev, x.requires_grad, id(x._s), k))
            continue
        try:
            hash(x)
        except TypeError:
            parts.append((type(x), id(x)))
            continue
        parts.append((type(x), freeze(x)))  # (floats by their bits: -0.0 is not 0.0, a NaN matches itself)
    amp = tuple(sorted(_amp._state().items())) if _amp._active[0] else ()
    key = (spec, tuple(parts), is_grad_enabled(), amp, get_default_dtype().name)
    return key, leaves, tensors
