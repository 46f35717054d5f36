"""torch's remaining creation functions in the torch namespace: ``tw.range`` (torch's deprecated end-inclusive
``range``), ``tw.asarray``, ``tw.frombuffer`` and ``tw.vander``."""

from __future__ import annotations

import math
import warnings

import numpy as np

from tensorwire.protocol import dtypes as D

from . import creation as _creation
from . import linalg as _linalg
from .combine import write_out
from .tensor import Tensor, device_name

_RANGE_WARNING = ("torch.range is deprecated and will be removed in a future release because its behavior is "
                  "inconsistent with Python's range builtin. Instead, use torch.arange, which produces values in "
                  "[start, end).")


def range(start, end, step=1, *, out=None, dtype=None, layout=None, device=None,  # noqa: A001 - torch's name
          requires_grad: bool = False) -> Tensor:
    """``start, start + step, ...`` up to ``end`` INCLUSIVE (torch.range, deprecated in torch, which warns as this
    does: use :func:`tw.arange`, whose ``end`` is exclusive). ``floor((end - start) / step) + 1`` values, each
    ``start + i * step``; the default dtype is the default floating dtype, whatever the arguments' types (torch's)."""
    warnings.warn(_RANGE_WARNING, UserWarning, stacklevel=2)
    values = []
    for name, v in (("start", start), ("end", end), ("step", step)):
        if isinstance(v, Tensor):
            v = v.item()
        if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool):
            raise TypeError(f"range(): argument '{name}' must be Number, not {type(v).__name__}")
        values.append(float(v))
    start, end, step = values
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if not (math.isfinite(start) and math.isfinite(end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if layout is not None and str(layout) != "strided":
        raise RuntimeError(f"range is implemented for strided tensors only, got: {layout}")
    n = int(math.floor((end - start) / step)) + 1
    dt = D.get_default_dtype() if dtype is None else D.get(dtype)
    # arange's values are start + i * step, computed wide and rounded to dt, as torch's range kernel; the exclusive
    # bound half a step past the last value gives exactly n of them
    if dt.is_floating_point:
        t = _creation.arange(start, start + (n - 0.5) * step, step, dtype=dt, device=device)
    else:  # (torch's integer kernel: int(start) + i * int(step))
        t = (_creation.arange(n, dtype=D.int64, device=device) * int(step) + int(start)).to(dt)
    if requires_grad:
        t.requires_grad_(True)
    return write_out(out, t)


def asarray(obj, *, dtype=None, device=None, copy: bool | None = None, requires_grad: bool | None = None) -> Tensor:
    """``obj`` as a tensor (torch.asarray): a tensor, a numpy array or scalar, anything with ``__array__`` (a torch
    tensor), a (nested) sequence of numbers, or a number.

    A tensor is returned as it is when ``dtype`` and ``device`` match it (``copy=True``: a copy), else converted
    (``copy=False`` then raises ValueError, as torch's). Anything else is copied to the cluster: tensorwire's tensors
    live in the workers, so they never share memory with a host array, and ``copy=False`` for one raises
    ValueError (where torch would alias a numpy array). dtypes are inferred as ``tw.tensor`` infers them (a numpy
    array keeps its own; floats take the default dtype). ``requires_grad=True`` makes the result require grad;
    unspecified, a tensor keeps its own."""
    if isinstance(obj, Tensor):
        dt = obj.dtype if dtype is None else D.get(dtype)
        dev = obj._dev if device is None else obj._s.check_device(device_name(device))
        if dt is not obj.dtype:
            if copy is False:
                raise ValueError(f"can't alias tensor with dtype {obj.dtype} into dtype {dt}.")
        if dev != obj._dev:
            if copy is False:
                raise ValueError(f"can't alias tensor from device '{obj._dev}' to '{dev}'.")
        out = obj.to(dtype=dt, device=dev)
        if copy and out is obj:
            out = obj.clone()
    else:
        if copy is False:
            what = "a numpy array" if isinstance(obj, (np.ndarray, np.generic)) else "arbitrary sequence"
            raise ValueError(f"can't alias {what} into a tensor: a tensorwire tensor's values live on the cluster, "
                             f"so asarray always copies them (copy=False cannot hold)")
        if not isinstance(obj, (list, tuple, np.ndarray, np.generic, int, float, complex, bool)) \
                and hasattr(obj, "__array__"):
            obj = np.asarray(obj)  # (a torch tensor: its dtype, not a sequence's inferred one)
        out = _creation.tensor(obj, dtype=dtype, device=device)
    if requires_grad and not out.requires_grad:
        out.requires_grad_(True)
    return out


def frombuffer(buffer, *, dtype, count: int = -1, offset: int = 0, requires_grad: bool = False) -> Tensor:
    """A 1-d tensor of ``dtype`` elements read from ``buffer`` (anything with the buffer protocol: ``bytes``,
    ``bytearray``, ``memoryview``, ``array.array``, mmap), starting ``offset`` bytes in, ``count`` elements (-1: to
    the end), as torch.frombuffer (torchvision's MNIST reads its files with it). Unlike torch's, the tensor does
    not share memory with ``buffer``: a tensorwire tensor's values live on the cluster, so it holds the values the
    buffer had at the call (later writes to the buffer do not show in it). torch's checks and messages."""
    dt = D.get(dtype)
    try:
        view = memoryview(buffer)
    except TypeError:
        raise ValueError("object does not implement Python buffer protocol.") from None  # (torch's)
    length, size = view.nbytes, dt.itemsize
    if isinstance(count, bool) or not isinstance(count, int) or isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError("frombuffer(): 'count' and 'offset' must be int")
    if length <= 0 or count == 0:
        raise ValueError(f"both buffer length ({length}) and count ({count}) must not be 0")
    if offset < 0 or offset >= length:
        raise ValueError(f"offset ({offset} bytes) must be non-negative and no greater than buffer length "
                         f"({length} bytes) minus 1")
    if count < 0:
        if (length - offset) % size:
            raise ValueError(f"buffer length ({length - offset} bytes) after offset ({offset} bytes) must be a "
                             f"multiple of element size ({size})")
        count = (length - offset) // size
    elif offset + count * size > length:
        raise ValueError(f"requested buffer length ({count} * {size} bytes) after offset ({offset} bytes) must not "
                         f"be greater than actual buffer length ({length} bytes)")
    raw = np.frombuffer(view.cast("B"), dtype=np.uint8, count=count * size, offset=offset)
    out = _creation.from_numpy(raw.view(dt.np))  # (bytes reinterpreted: any alignment; bfloat16 included)
    if requires_grad:
        out.requires_grad_(True)
    return out


def vander(x: Tensor, N: int | None = None, increasing: bool = False) -> Tensor:  # noqa: N803 - torch's name
    """The Vandermonde matrix of the 1-d ``x``: column ``j`` is ``x ** (N - 1 - j)`` (``increasing``: ``x ** j``), ``N``
    columns (default ``len(x)``), in ``x``'s dtype, as torch's (``tw.linalg.vander`` is the increasing one)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"vander(): argument 'x' must be Tensor, not {type(x).__name__}")
    if x.ndim != 1:
        raise ValueError("x must be a one-dimensional tensor.")
    if N is not None and N < 0:
        raise ValueError("N must be non-negative.")
    out = _linalg.vander(x, N=N)
    return out if increasing else out.flip(-1)
