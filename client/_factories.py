"""Tensors a session makes from values alone: a constant from data, ``full``, the random draws and ``arange``'s
attributes, below :mod:`tensorwire.tensor` (issue 32).

Each function takes the session and a device name the caller has checked, and records through the session's one
recording call (``s.record``, ``s.const``), so this module imports neither ``tensor`` nor ``context``: Tensor's own
methods (``x.new_zeros``, ``x.fill_``, ``x.uniform_``, ``x.nonzero`` ...) and :mod:`tensorwire.combine` build their
tensors here with their tensor's session, and :mod:`tensorwire.creation` (``tw.tensor``, ``tw.full``, ``tw.randn``
...) with the current one. :class:`TensorBase` is the class ``Tensor`` derives from, so that the modules below
``tensor`` can tell a tensor from a value without importing it.
"""

from __future__ import annotations

import math

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError
from tensorwire.protocol.graph import attrs_key, freeze
from tensorwire.protocol.ops import infer
from tensorwire.protocol.random import counters_used, uniform
from tensorwire.protocol.shapes import check_shape, numel

from . import random as R
from .known_values import SMALL_DATA_NUMBERS
from .memos import remember


class TensorBase:
    """The base of :class:`tensorwire.Tensor` (it holds nothing): ``isinstance(x, TensorBase)`` is true of a tensor
    alone, for the modules ``tensor`` imports."""

    __slots__ = ()


def infer_np(data, dtype) -> np.ndarray:
    """A numpy array for ``data`` (nested lists of numbers or tensors, numbers, numpy arrays, a tensor) with torch's
    dtype inference (Python floats -> the default float dtype), or ``dtype``'s."""
    if isinstance(data, TensorBase):  # (its values, cast as torch's copy is: an integer dtype's wrap)
        arr = data._numpy()
        return arr if dtype is None or arr.dtype == D.get(dtype).np else arr.astype(D.get(dtype).np)
    if isinstance(data, (list, tuple)) and not _numbers(data) and any(isinstance(x, TensorBase) for x in _flat(data)):
        data = _tolist(data)
    arr = np.asarray(data)
    if dtype is not None:
        dt = D.get(dtype)
        bounds = _INT_RANGES.get(dt)
        if bounds is not None and not isinstance(data, np.ndarray):  # (an array's values wrap, as torch's do)
            _check_range(arr, dt, bounds)
        if arr.dtype.kind == "f" and not dt.is_inexact and dt is not D.bool_:
            arr = np.trunc(arr)
        return arr.astype(dt.np) if arr.dtype != dt.np else arr
    if isinstance(data, np.ndarray) or isinstance(data, np.generic):
        if arr.dtype in D.BY_NP:
            return arr
        raise TypeError(f"can't convert np.ndarray of type {arr.dtype}; supported: {', '.join(D.BY_NAME)}")
    if arr.dtype.kind == "f":
        return arr.astype(D.get_default_dtype().np)
    if arr.dtype.kind in "iu":
        _refuse_past_int64(arr)
        return arr.astype(np.int64)
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind == "c":  # Python complex numbers: the default complex dtype, as torch's
        return arr.astype(D.get_default_complex_dtype().np)
    if arr.dtype == object or arr.dtype.kind in "US":
        raise TypeError(f"can't convert {type(data).__name__} of mixed or non-numeric values to a tensor")
    return arr


_INT64_MAX = 2 ** 63 - 1
#: the integer dtypes whose values ``tw.tensor`` checks, as torch's ``checked_convert``, when they come from Python
#: numbers: ``(lowest int, lowest float, highest)``. An unsigned dtype takes a negative int down to ``-max`` (it wraps,
#: two's complement: ``tensor([-1], dtype=uint8)`` is 255) but no negative float; NaN and infinities never fit.
_INT_RANGES: dict = {
    D.uint8: (-255, 0, 255),
    **{dt: (-(2 ** (8 * dt.itemsize - 1)), -(2 ** (8 * dt.itemsize - 1)), 2 ** (8 * dt.itemsize - 1) - 1)
       for dt in (D.int8, D.int16, D.int32, D.int64)},
}


def _check_range(arr: np.ndarray, dt: D.DType, bounds: tuple) -> None:
    """Raise torch's errors when a value of ``arr`` (made of Python numbers) does not fit integer dtype ``dt``."""
    kind = arr.dtype.kind
    if not arr.size or kind not in "fiu":  # (bools always fit; complex numbers fail at the cast)
        return
    if kind == "i" and dt.is_signed and arr.dtype.itemsize <= dt.itemsize:  # (Python ints into int64: all fit)
        return
    _refuse_past_int64(arr)
    lo_int, lo_float, hi = bounds
    lo, top = arr.min(), arr.max()
    if not (lo >= (lo_float if kind == "f" else lo_int) and top <= hi):  # (NaN compares False: it does not fit)
        raise RuntimeError(f"value cannot be converted to type {dt.name} without overflow")


def _refuse_past_int64(arr: np.ndarray) -> None:
    """torch's error for Python ints past int64's range, which it cannot read (numpy made them uint64)."""
    if arr.dtype.kind == "u" and arr.size and arr.max() > _INT64_MAX:
        raise ValueError("Overflow when unpacking long long")


#: the containers of data :func:`from_data` may reuse a tensor of
_SEQUENCES = frozenset((list, tuple))
#: the types of the entries :func:`_numbers` passes
_NUMBER_TYPES = frozenset((int, float, bool))


def _numbers(data) -> bool:
    """Whether every entry of list or tuple ``data`` is a Python int, float or bool (``[k]``, a row of numbers: no
    tensor in it, found without :func:`_flat`'s generators)."""
    for x in data:
        if type(x) not in _NUMBER_TYPES:
            return False
    return True


def _flat(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flat(y)
    else:
        yield x


def _tolist(x):
    if isinstance(x, (list, tuple)):
        return [_tolist(y) for y in x]
    if isinstance(x, TensorBase):
        return x.tolist()
    return x


def from_data(s, data, dtype, dev: str, reuse: bool = True):
    """A tensor on ``dev`` holding a copy of ``data`` (``tw.tensor``'s values and dtype rules). A flat list or tuple
    of a few Python numbers (``Normalize``'s ``as_tensor(mean)``, for every image) is made once a session and
    aliased after (``Session.small_data``), unless ``reuse`` is False (a tensor that will require grad)."""
    if reuse and type(data) in _SEQUENCES and len(data) <= SMALL_DATA_NUMBERS and s._capture is None \
            and (dtype is None or type(dtype) is D.DType) and _numbers(data):
        # (keyed by the dtype asked for, None when inferred, and the default dtype the inference falls back on:
        # ``tensor([1, 2])`` is int64, ``x.new_tensor([1, 2])`` of a float32 ``x`` float32; keyed by ``dtype or the
        # default`` until session 59, the second made the first's tensor float32 from then on)
        t = s.small_data((freeze(data), dtype, D.get_default_dtype(), dev),
                         lambda: from_data(s, data, dtype, dev, False))
        if t is not None:
            return t
    arr = infer_np(data, dtype)
    borrowed = isinstance(data, np.ndarray) and np.may_share_memory(arr, data)  # later writes must not show
    return s.const(arr, dev, borrowed=borrowed)


def full(s, shape: tuple, fill_value, dtype, dev: str):
    """A tensor of ``shape`` filled with ``fill_value`` (dtype inferred from the value when ``dtype`` is None)."""
    shape = check_shape(shape)
    dt = dtype if type(dtype) is D.DType else D.get(dtype) if dtype is not None else D.scalar_dtype(fill_value)
    v = fill_value.item() if isinstance(fill_value, (np.generic, TensorBase)) else fill_value
    if isinstance(v, complex):
        if not dt.is_complex:
            raise DTypeError(f"full: a complex fill value needs a complex dtype, got {dt.name}")
        v = [v.real, v.imag]  # (the wire's form of a complex attribute)
    attrs = {"shape": list(shape), "dtype": dt.name, "value": v}
    tv = type(v)
    if tv is not int and tv is not float and tv is not bool:
        return s.record("full", [], attrs, dev, up=2)  # (2: the search for the user's line starts above this frame)
    # (a real value: the node's attrs key and meta depend on the shape, dtype and the value's type alone, whatever
    # value: found once for them, not by every zeros, ones and full)
    key = (shape, dt, tv)
    known = _FULL_KNOWN.get(key)
    if known is None:
        known = remember(_FULL_KNOWN, key, (attrs_key("full", attrs), infer("full", [], attrs)), MAX_FULL_KNOWN)
    return s.record("full", [], attrs, dev, known, up=2)


#: :func:`full`'s node's ``(attrs key, (shape, dtype))`` (``Session.record``'s ``known``), by its shape, dtype and the
#: fill value's type; emptied when it holds :data:`MAX_FULL_KNOWN` entries
_FULL_KNOWN: dict[tuple, tuple] = {}
MAX_FULL_KNOWN = 4096


def random(s, op: str, shape: tuple, dtype: D.DType, dev: str, generator, **extra):
    """A draw of ``op`` (``rand``, ``randn``, ``randint``) from ``generator`` (the default one when None)."""
    shape = check_shape(shape)
    gen = generator or R.default_generator
    counters = counters_used(op, numel(shape))
    seed, off = gen.take(counters)
    t = s.record(op, [], {"shape": list(shape), "dtype": dtype.name, "seed": seed, "offset": off, **extra}, dev)
    if s._capture is not None:  # tw.compile: a replay draws from the generator as this call did
        s._capture.provide([t], lambda: dict(zip(("seed", "offset"), gen.take(counters))))
    return t


def uniform_keys(n: int, generator) -> np.ndarray:
    """The ``n`` float64 numbers in [0, 1) that ``rand(n, dtype=float64, generator=generator)`` would draw next,
    computed here: the counter-based stream every device computes bit for bit (``protocol/random.py``); the generator
    advances as that draw would advance it."""
    gen = generator or R.default_generator
    seed, off = gen.take(counters_used("rand", n))
    return uniform(seed, off, (n,), np.float64)


def arange_attrs(start, end, step, dtype) -> dict:
    """The ``arange`` op's attributes for ``arange(start, end, step)``: int64 unless any argument is a float (torch's
    rules and errors; ``end`` None counts from 0 to ``start``)."""
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, (TensorBase, np.generic)) else v for v in (start, end, step)]
    start, end, step = vals
    if step == 0:
        raise ValueError("step must be nonzero")
    if (end - start) * step < 0:
        raise ValueError("upper bound and lower bound inconsistent with step sign")
    floating = any(isinstance(v, float) for v in vals)
    dt = D.get(dtype) if dtype is not None else (D.get_default_dtype() if floating else D.int64)
    if dt.is_complex:
        raise DTypeError(f"arange is not implemented for {dt.name} (as in torch)")
    if not dt.is_floating_point:  # torch counts and steps an integer range in integers (each bound truncated)
        start, end, step = (math.trunc(v) for v in vals)
        if step == 0:
            raise ValueError("step must be nonzero (after truncating to an integer dtype)")
    n = max(0, math.ceil((end - start) / step))
    return {"start": start, "step": step, "n": n, "dtype": dt.name}
