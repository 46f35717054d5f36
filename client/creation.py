"""Tensor creation: ``tensor``, ``zeros``, ``randn`` ... with torch's names, arguments and dtype rules."""

from __future__ import annotations

import functools
import math

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ShapeError

# the module, not its names: a program that imports tensorwire.context first reaches this module half-way through
# it (context -> session -> tensor -> the modules that add Tensor's methods, client/_install.py -> here)
from . import context as _context
from ._factories import arange_attrs as _arange_attrs
from ._factories import from_data as _from_data
from ._factories import full as _full
from ._factories import random as _draw
from ._factories import uniform_keys as _uniform_keys
from .combine import write_out
from .tensor import Tensor, _size, device_name
from .tensor import device as _device


def _ctx(device, session):
    """The session a factory makes its tensor in, and ``device``'s name checked against its cluster's (the session's
    default device for None). A name the cluster has, or a ``device`` object's, is taken as it is, without a call:
    torchvision's ``Normalize`` makes its mean and std with ``device=x.device`` for every image."""
    s = session or _context.current_session()
    if device is None:
        return s, s.default_device
    name = device._name if type(device) is _device else device if type(device) is str else None
    if name is not None and name in s._devices:
        return s, name
    return s, s.check_device(device_name(device))


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        t.requires_grad_(True)
    return t


def _upload(s, arr: np.ndarray, dev: str, dtype: D.DType | None = None, borrowed: bool = False) -> Tensor:
    """Record ``arr`` as a constant. ``borrowed``: ``arr`` is the caller's and may change after we return,
    so the session snapshots it (small arrays are copied; large ones are sent at once, without a copy)."""
    return s.const(arr, dev, dtype, borrowed=borrowed)


def tensor(data, dtype=None, device=None, requires_grad: bool = False, *, session=None) -> Tensor:
    """A tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays)."""
    s, dev = _ctx(device, session)
    t = _from_data(s, data, dtype, dev, not requires_grad)
    return t.requires_grad_(True) if requires_grad else t  # (_finish, inline: as_tensor(mean) for every image)


def as_tensor(data, dtype=None, device=None, *, session=None) -> Tensor:
    """``data`` as a tensor; a tensor already matching ``dtype``/``device`` is returned as is."""
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device)
    s, dev = _ctx(device, session)  # (tensor's work, inline: torchvision's Normalize, for every image)
    return _from_data(s, data, dtype, dev)


def from_numpy(array: np.ndarray, *, device=None, session=None) -> Tensor:
    """A tensor with ``array``'s values and dtype.

    Unlike torch, the tensor does not share memory with ``array``: its values are those ``array`` had
    at the call. (A small array is copied and travels with the next batch; a large one is sent at once,
    without a copy, and the call returns when the bytes have left.)
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    s, dev = _ctx(device, session)
    return s.const(array, dev, D.from_numpy(array.dtype), borrowed=True)  # (_upload, inline: a sample's image)


def full(size, fill_value, *, dtype=None, device=None, requires_grad: bool = False, session=None) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value`` (dtype inferred from the value, as torch)."""
    s, dev = _ctx(device, session)
    t = _full(s, _size((size,)) if not isinstance(size, int) else (size,), fill_value, dtype, dev)
    return t.requires_grad_(True) if requires_grad else t  # (_finish, inline: tw.zeros takes no call more)


def zeros(*size_args, size=None, dtype=None, device=None, requires_grad: bool = False, session=None) -> Tensor:
    """A tensor of zeros (default float dtype)."""
    # (full's work, inline: the size checked once, and one frame less for every recorded op's search of its line)
    s, dev = _ctx(device, session)
    t = _full(s, _size(size_args, size), 0, dtype or D.get_default_dtype(), dev)
    return t.requires_grad_(True) if requires_grad else t


def ones(*size_args, size=None, dtype=None, device=None, requires_grad: bool = False, session=None) -> Tensor:
    """A tensor of ones (default float dtype)."""
    s, dev = _ctx(device, session)
    t = _full(s, _size(size_args, size), 1, dtype or D.get_default_dtype(), dev)
    return t.requires_grad_(True) if requires_grad else t


def empty(*size_args, size=None, dtype=None, device=None, requires_grad: bool = False, session=None) -> Tensor:
    """Like ``torch.empty``, but the contents are zeros (buffers are never left uninitialised)."""
    return zeros(*size_args, size=size, dtype=dtype, device=device, requires_grad=requires_grad, session=session)


def _like(t: Tensor, dtype, device):
    return dict(dtype=dtype or t.dtype, device=device or t._dev, session=t._s)


def zeros_like(input: Tensor, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    return full(input.shape, 0, requires_grad=requires_grad, **_like(input, dtype, device))


def ones_like(input: Tensor, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    return full(input.shape, 1, requires_grad=requires_grad, **_like(input, dtype, device))


def full_like(input: Tensor, fill_value, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    return full(input.shape, fill_value, requires_grad=requires_grad, **_like(input, dtype, device))


def empty_like(input: Tensor, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:  # noqa: A002
    return zeros_like(input, dtype=dtype, device=device, requires_grad=requires_grad)


def arange(start=None, end=None, step=1, *, dtype=None, device=None, requires_grad: bool = False,
           session=None) -> Tensor:
    """Values from ``start`` to ``end`` (exclusive) by ``step``; int64 unless any argument is a float. As torch's:
    ``arange(end)``, ``arange(start, end[, step])`` or by keyword (``arange(end=5)``)."""
    if start is None:
        if end is None:
            raise TypeError('arange() missing 1 required positional arguments: "end"')
        start = 0
    attrs = _arange_attrs(start, end, step, dtype)
    s, dev = _ctx(device, session)
    t = s.record("arange", [], attrs, dev)
    return t.requires_grad_(True) if requires_grad else t


def linspace(start, end, steps: int, *, dtype=None, device=None, requires_grad: bool = False,
             session=None) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive (for an integer dtype, torch's
    integer linspace: truncated bounds, truncated values)."""
    if steps < 0:
        raise ValueError("number of steps must be non-negative")
    dt = D.get(dtype) if dtype is not None else D.get_default_dtype()
    s, dev = _ctx(device, session)
    if not dt.is_inexact:
        return _finish(_upload(s, np.trunc(_integer_linspace(start, end, steps)).astype(dt.np), dev), requires_grad)
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    return _finish(s.record("arange", [], {"start": float(start), "step": float(step), "n": int(steps),
                                           "dtype": dt.name}, dev), requires_grad)


def _integer_linspace(start, end, steps: int) -> np.ndarray:
    """torch's linspace for an integer dtype, in float64 before truncation: the bounds truncated to integers, the
    first half stepped from ``start``, the second back from ``end`` (so the last value is ``end`` exactly)."""
    start, end = (math.trunc(v.item() if isinstance(v, (Tensor, np.generic)) else v) for v in (start, end))
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    i = np.arange(steps, dtype=np.float64)
    return np.where(i < max(steps // 2, 1), start + step * i, end - step * (steps - 1 - i))  # 1 step: start


def logspace(start, end, steps: int, base: float = 10.0, *, dtype=None, device=None, session=None) -> Tensor:
    """``base ** linspace(start, end, steps)``; for an integer dtype torch's: integer bounds, truncated powers."""
    if dtype is not None and not D.get(dtype).is_inexact:
        s, dev = _ctx(device, session)
        powers = np.trunc(np.power(float(base), _integer_linspace(start, end, steps)))
        return _upload(s, powers.astype(D.get(dtype).np), dev)
    return (linspace(start, end, steps, dtype=D.float64, device=device, session=session) * math.log(base)).exp() \
        .to(dtype or D.get_default_dtype())


def eye(n: int, m: int | None = None, *, dtype=None, device=None, requires_grad: bool = False,
        session=None) -> Tensor:
    """The identity matrix (``n`` x ``m``)."""
    s, dev = _ctx(device, session)
    dt = D.get(dtype) if dtype is not None else D.get_default_dtype()
    return _finish(s.record("eye", [], {"n": int(n), "m": int(n if m is None else m), "dtype": dt.name}, dev),
                   requires_grad)


def rand(*size_args, size=None, generator=None, dtype=None, device=None, requires_grad: bool = False,
         session=None) -> Tensor:
    """Uniform on [0, 1) from the counter-based generator (same seed, same numbers on every device)."""
    dt = D.get(dtype) if dtype is not None else D.get_default_dtype()
    if not dt.is_floating_point:
        raise TypeError(f"rand only supports floating point dtypes, got {dt}")
    s, dev = _ctx(device, session)
    return _finish(_draw(s, "rand", _size(size_args, size), dt, dev, generator), requires_grad)


def randn(*size_args, size=None, generator=None, dtype=None, device=None, requires_grad: bool = False,
          session=None) -> Tensor:
    """Standard normal from the counter-based generator."""
    dt = D.get(dtype) if dtype is not None else D.get_default_dtype()
    if not dt.is_floating_point:
        raise TypeError(f"randn only supports floating point dtypes, got {dt}")
    s, dev = _ctx(device, session)
    return _finish(_draw(s, "randn", _size(size_args, size), dt, dev, generator), requires_grad)


def randint(low, high=None, size=None, *, generator=None, dtype=None, device=None, requires_grad: bool = False,
            session=None) -> Tensor:
    """Integers uniform in [low, high): ``randint(high, size)`` or ``randint(low, high, size)``."""
    if size is None:
        if high is None or not isinstance(high, (tuple, list)):
            raise TypeError("randint() missing required argument 'size'")
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    if high <= low:
        raise ValueError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    dt = D.get(dtype) if dtype is not None else D.int64
    s, dev = _ctx(device, session)
    return _finish(_draw(s, "randint", _size(size), dt, dev, generator, low=int(low), high=int(high)),
                   requires_grad)


def rand_like(input: Tensor, *, dtype=None, device=None) -> Tensor:  # noqa: A002
    return rand(input.shape, dtype=dtype or input.dtype, device=device or input._dev, session=input._s)


def randn_like(input: Tensor, *, dtype=None, device=None) -> Tensor:  # noqa: A002
    return randn(input.shape, dtype=dtype or input.dtype, device=device or input._dev, session=input._s)


def randint_like(input: Tensor, low=0, high=None, *, dtype=None, device=None) -> Tensor:  # noqa: A002
    """Integers from ``[low, high)`` in ``input``'s shape: ``randint_like(x, high)``, ``(x, low, high)`` or by
    keyword (``randint_like(x, high=10)``)."""
    if high is None and low == 0:
        raise TypeError('randint_like() missing 1 required positional argument: "high"')
    return randint(low, high, input.shape, dtype=dtype or input.dtype, device=device or input._dev,
                   session=input._s)


def randperm(n: int, *, generator=None, dtype=None, device=None, session=None) -> Tensor:
    """A random permutation of 0..n-1: the stable argsort of ``n`` uniform float64 keys, computed on the client (no
    round trip) from the numbers a ``rand`` of them would draw (:func:`_factories.uniform_keys`), and kept there: a
    dataset that reads its permutation one index at a time (``self.ixes[idx].item()``) reads client memory."""
    s, dev = _ctx(device, session)
    _check((n,))
    dt = D.get(dtype) if dtype is not None else D.int64
    perm = np.argsort(_uniform_keys(n, generator), kind="stable")
    return _upload(s, perm.astype(dt.np, copy=False), dev, dt)  # (the client's own array: kept, known_values)


def _check(size):
    if any(s < 0 for s in size):
        raise ShapeError("negative dimension")


def _accepts_out(fn):
    """torch's ``out=`` on a creation function: the result is written into ``out`` (resized when its shape
    differs), whose dtype and device are the defaults."""
    @functools.wraps(fn)
    def with_out(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        if kwargs.get("dtype") is None:
            kwargs["dtype"] = out.dtype
        if kwargs.get("device") is None:
            kwargs["device"] = out._dev
        kwargs.setdefault("session", out._s)
        return write_out(out, fn(*args, **kwargs))
    return with_out


for _name in ("full", "zeros", "ones", "empty", "arange", "linspace", "logspace", "eye", "rand", "randn", "randint"):
    globals()[_name] = _accepts_out(globals()[_name])
