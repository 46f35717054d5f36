"""``default_collate``, ``default_convert``, ``collate`` and ``default_collate_fn_map``, as torch's
``torch.utils.data._utils.collate``.

:func:`collate` walks the containers of a batch (mappings, named tuples, sequences) and hands each field to the
function :data:`default_collate_fn_map` (or the caller's ``collate_fn_map``) gives its element type: torch's way to
extend :func:`default_collate` (``default_collate_fn_map[MyType] = collate_mytype_fn``). Samples that are numpy
arrays or Python numbers are stacked on the client and uploaded once per field (one buffer per batch, not one per
sample), with the dtype ``torch.tensor(batch)`` infers; samples that are cluster tensors are stacked on their device.
"""

from __future__ import annotations

import collections.abc
import contextvars
import copy
import re
from collections.abc import Callable

import numpy as np

from tensorwire.creation import tensor as _tensor
from tensorwire.functions import stack
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Tensor

__all__ = [
    "collate",
    "collate_float_fn",
    "collate_int_fn",
    "collate_numpy_array_fn",
    "collate_numpy_scalar_fn",
    "collate_str_fn",
    "collate_tensor_fn",
    "default_collate",
    "default_collate_fn_map",
    "default_convert",
]

#: numpy dtype strings that are not numbers (bytes, strings, objects): torch's ``np_str_obj_array_pattern``
np_str_obj_array_pattern = re.compile(r"[SaUO]")

default_collate_err_msg_format = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)

#: where :func:`default_collate`'s ``device=`` (an extension) sends the batch while it collates
_DEVICE: contextvars.ContextVar = contextvars.ContextVar("tensorwire_collate_device", default=None)

CollateFnMap = dict[type | tuple[type, ...], Callable]


def default_convert(data):
    """What the loader does to each sample when automatic batching is off (``batch_size=None``), as torch's: numpy
    arrays and numpy scalars become tensors (arrays of strings or objects stay arrays), mappings and sequences are
    converted element-wise (a tuple becomes a list, as torch's; a named tuple stays one), anything else is returned
    unchanged."""
    elem_type = type(data)
    if isinstance(data, Tensor):
        return data
    if elem_type.__module__ == "numpy" and elem_type.__name__ not in ("str_", "string_"):
        if elem_type.__name__ == "ndarray" and np_str_obj_array_pattern.search(data.dtype.str) is not None:
            return data
        return _tensor(np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({key: default_convert(data[key]) for key in data})
                return clone
            return elem_type({key: default_convert(data[key]) for key in data})
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]  # (torch's "backwards compatibility": a list)
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = default_convert(d)
                return clone
            return elem_type([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate(batch, *, collate_fn_map: CollateFnMap | None = None):
    """Collate ``batch`` (a sequence of samples) as torch's ``collate``: the function ``collate_fn_map`` gives the
    first element's type (its exact type, else the first key it is an instance of, in insertion order) collates the
    batch; otherwise mappings, named tuples and sequences are collated field by field (a tuple's fields come back as
    a list, as torch's), and anything else is a ``TypeError``. Each function is called as
    ``fn(batch, collate_fn_map=collate_fn_map)``."""
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        fn = collate_fn_map.get(elem_type)
        if fn is not None:
            return fn(batch, collate_fn_map=collate_fn_map)
        for collate_type in collate_fn_map:
            if isinstance(elem, collate_type):
                return collate_fn_map[collate_type](batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)  # (an OrderedDict, a defaultdict stays one)
                clone.update({key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem})
                return clone
            return elem_type({key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem})
        except TypeError:
            return {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return elem_type(*(collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))  # (tuples: a field of strings comes back as a tuple, as torch's)
        if isinstance(elem, tuple):
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, samples in enumerate(transposed):
                    clone[i] = collate(samples, collate_fn_map=collate_fn_map)
                return clone
            return elem_type([collate(samples, collate_fn_map=collate_fn_map) for samples in transposed])
        except TypeError:
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
    raise TypeError(default_collate_err_msg_format.format(elem_type))


def collate_tensor_fn(batch, *, collate_fn_map: CollateFnMap | None = None) -> Tensor:
    """Cluster tensors: stacked on their device (a new leading dim); sparse tensors are refused, as torch's."""
    elem = batch[0]
    if elem._sparse:
        raise RuntimeError("Batches of sparse tensors are not currently supported by the default collate_fn; please "
                           "provide a custom collate_fn to handle them appropriately.")
    out = stack(list(batch))
    device = _DEVICE.get()
    return out.to(device) if device is not None else out


def collate_numpy_array_fn(batch, *, collate_fn_map: CollateFnMap | None = None) -> Tensor:
    """Numpy arrays: stacked on the client and uploaded as one tensor (arrays of strings or objects: TypeError)."""
    elem = batch[0]
    if np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(default_collate_err_msg_format.format(elem.dtype))
    if collate_fn_map is None or collate_fn_map.get(Tensor) is collate_tensor_fn:
        return _tensor(np.stack([np.asarray(b) for b in batch]), device=_DEVICE.get())
    # (the map collates tensors its own way: each array goes through it as a tensor, as torch's)
    return collate([_tensor(np.asarray(b)) for b in batch], collate_fn_map=collate_fn_map)


def _inferred_dtype(batch) -> D.DType:
    """The dtype ``torch.tensor(batch)`` gives a list of numbers: each element's (a numpy scalar's own, else bool,
    int64 or the default float or complex dtype), promoted by torch's rules (int with float32 is float32)."""
    out = None
    for t in {type(x) for x in batch}:  # (each type once: a batch is mostly of one; promotion's order is free)
        if issubclass(t, np.generic):
            dt = D.from_numpy(np.dtype(t))
        elif issubclass(t, bool):
            dt = D.bool_
        elif issubclass(t, int):
            dt = D.int64
        elif issubclass(t, float):
            dt = D.get_default_dtype()
        elif issubclass(t, complex):
            dt = D.get_default_complex_dtype()
        else:
            raise RuntimeError(f"Could not infer dtype of {t.__name__}")  # (torch.tensor's error)
        out = dt if out is None else D.promote_types(out, dt)
    return out


def _numbers(batch, dtype: D.DType) -> Tensor:
    return _tensor(np.asarray(batch, dtype=dtype.np), dtype=dtype, device=_DEVICE.get())


def collate_numpy_scalar_fn(batch, *, collate_fn_map: CollateFnMap | None = None) -> Tensor:
    """Numpy scalars (and the numbers after them): ``torch.as_tensor(batch)``, its dtype inferred as torch infers
    it (``[np.float32(1), 2.5]`` is float32, ``[1, np.float64(2)]`` float64)."""
    return _numbers(batch, _inferred_dtype(batch))


def collate_float_fn(batch, *, collate_fn_map: CollateFnMap | None = None) -> Tensor:
    """A batch whose first element is a Python float: float64, as torch's."""
    return _numbers(batch, D.float64)


def collate_int_fn(batch, *, collate_fn_map: CollateFnMap | None = None) -> Tensor:
    """A batch whose first element is a Python int (or bool): ``torch.tensor(batch)``, its dtype inferred from every
    element (``[1, 2]`` int64, ``[1, 2.5]`` the default float dtype, ``[True, False]`` bool)."""
    return _numbers(batch, _inferred_dtype(batch))


def collate_str_fn(batch, *, collate_fn_map: CollateFnMap | None = None):
    """Strings and bytes: the batch as it is."""
    return batch


default_collate_fn_map: CollateFnMap = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch, device=None):
    """Stack a list of samples into a batch with torch's rules (:func:`collate` with
    :data:`default_collate_fn_map`): tensors are stacked (a new leading dim), numpy arrays and numbers become tensors
    (a batch starting with a Python float is float64, one starting with an int gets ``torch.tensor``'s inferred
    dtype), strings stay as they are, mappings and sequences are collated element-wise (every sequence of the batch
    must have the same length), anything else is a ``TypeError``; ``device`` (an extension) says where the batch
    goes."""
    if device is None:
        return collate(batch, collate_fn_map=default_collate_fn_map)
    token = _DEVICE.set(device)
    try:
        return collate(batch, collate_fn_map=default_collate_fn_map)
    finally:
        _DEVICE.reset(token)
