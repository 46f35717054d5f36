"""torch's window functions in the torch namespace: ``tw.hann_window``, ``hamming_window``, ``blackman_window``,
``bartlett_window``, ``kaiser_window`` (``window_length, periodic=True, ...``; ``tw.signal.windows`` has the
``M, sym=True`` family of ``torch.signal.windows``).

Each is computed as ATen computes it (``aten/src/ATen/native/TensorFactories.cpp``): an ``arange`` of the window
length in the window's dtype, scaled and put through ``cos`` op by op (so a float16 or bfloat16 window rounds where
torch's does), or for Kaiser's window one expression in float32 (float64 for a float64 window, torch's ``opmath``).
``periodic=True`` computes the symmetric window one longer and drops its last value, as torch does.
"""

from __future__ import annotations

import math

from tensorwire.protocol import dtypes as D

from . import creation as _creation
from .combine import cat
from .special import i0
from .tensor import Tensor


def _checks(name: str, window_length, dtype, layout) -> D.DType:
    """torch's ``window_function_checks``: an int length, not negative; a floating dtype (default: the default
    dtype); the strided layout."""
    if isinstance(window_length, bool) or not isinstance(window_length, int):
        raise TypeError(f"{name}(): argument 'window_length' (position 1) must be int, not "
                        f"{type(window_length).__name__}")
    if window_length < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got window_length={window_length}")
    if layout is not None and str(layout) != "strided":
        raise RuntimeError(f"{name} is not implemented for sparse types, got: {layout}")
    dt = D.get_default_dtype() if dtype is None else D.get(dtype)
    if not dt.is_floating_point:
        raise RuntimeError(f"{name} expects floating point dtypes, got: {dt}")
    return dt


def _short(window_length: int, dtype, device, requires_grad: bool) -> Tensor | None:
    """The empty window (length 0) and the one-value window (``[1.]``, periodic or not), as torch's; None for a
    longer one."""
    if window_length > 1:
        return None
    return _creation.full((window_length,), 1.0, dtype=dtype, device=device, requires_grad=requires_grad)


def _times(w: Tensor, v: float) -> Tensor:
    """``w * v`` with ``v`` rounded to ``w``'s dtype first, as ATen's window code computes it (a half tensor times a
    Python number is computed with the number unrounded, as torch's Python ``*`` does: ``Tensor._binary``)."""
    return w * w._operand(v, w.dtype)


def _finish(window: Tensor, periodic: bool, requires_grad: bool) -> Tensor:
    if periodic:
        window = window[:-1]
    return window.requires_grad_(True) if requires_grad else window


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54, beta: float = 0.46, *,
                   dtype=None, layout=None, device=None, pin_memory: bool = False,
                   requires_grad: bool = False) -> Tensor:
    """The Hamming window ``alpha - beta cos(2π n / (N - 1))`` (torch.hamming_window), ``N`` the window length, or
    one more when ``periodic`` (then the last value is dropped: the window for ``tw.stft``). ``pin_memory`` is
    accepted and changes nothing."""
    dt = _checks("hamming_window", window_length, dtype, layout)
    short = _short(window_length, dt, device, requires_grad)
    if short is not None:
        return short
    n = window_length + 1 if periodic else window_length
    w = _creation.arange(n, dtype=dt, device=device)
    w = _times(_times(w, math.pi * 2.0 / (n - 1)).cos(), -beta) + alpha
    return _finish(w, periodic, requires_grad)


def hann_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None,
                pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """The Hann window ``0.5 - 0.5 cos(2π n / (N - 1))`` (torch.hann_window): :func:`hamming_window` with
    ``alpha = beta = 0.5``."""
    _checks("hann_window", window_length, dtype, layout)
    return hamming_window(window_length, periodic, 0.5, 0.5, dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)


def blackman_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None,
                    pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """The Blackman window ``0.42 - 0.5 cos(2π n / (N - 1)) + 0.08 cos(4π n / (N - 1))`` (torch.blackman_window)."""
    dt = _checks("blackman_window", window_length, dtype, layout)
    short = _short(window_length, dt, device, requires_grad)
    if short is not None:
        return short
    n = window_length + 1 if periodic else window_length
    w = _times(_creation.arange(n, dtype=dt, device=device), math.pi / (n - 1))
    w = _times(_times(w, 4).cos(), 0.08) - _times(_times(w, 2).cos(), 0.5) + 0.42
    return _finish(w, periodic, requires_grad)


def bartlett_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None,
                    pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """The Bartlett (triangular) window ``1 - |2n / (N - 1) - 1|`` (torch.bartlett_window): ``2n / (N - 1)`` up to
    the middle, ``2 - 2n / (N - 1)`` after."""
    dt = _checks("bartlett_window", window_length, dtype, layout)
    short = _short(window_length, dt, device, requires_grad)
    if short is not None:
        return short
    n = window_length + 1 if periodic else window_length
    w = _times(_creation.arange(n, dtype=dt, device=device), 2.0 / (n - 1))
    half = ((n - 1) >> 1) + 1
    w = cat([w[:half], _times(w[half:], -1) + 2]) if half < n else w
    return _finish(w, periodic, requires_grad)


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *, dtype=None, layout=None,
                  device=None, pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """The Kaiser window ``I0(beta sqrt(1 - ((n - a) / a)²)) / I0(beta)``, ``a = (N - 1) / 2``
    (torch.kaiser_window), computed in float32 (float64 for a float64 window) and rounded to ``dtype``."""
    dt = _checks("kaiser_window", window_length, dtype, layout)
    short = _short(window_length, dt, device, requires_grad)
    if short is not None:
        return short
    n = window_length + 1 if periodic else window_length
    ct = D.float64 if dt is D.float64 else D.float32
    a = (n - 1) / 2.0
    x = _creation.arange(n, dtype=ct, device=device)
    b = _creation.full((), float(beta), dtype=ct, device=device)
    w = i0((((x - a) / a) ** 2 * -1 + 1).abs().sqrt() * b) / i0(b)
    return _finish(w.to(dt), periodic, requires_grad)
