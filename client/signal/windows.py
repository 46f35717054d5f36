"""``tw.signal.windows``: torch.signal.windows' window functions (issue 33), each written as torch writes it (a
``linspace`` of the window's phases through ``exp``, ``sin``, ``cos`` or ``i0``), so the values match torch's."""

from __future__ import annotations

import math
from collections.abc import Iterable

from tensorwire.protocol import dtypes as D

from ..creation import arange, full, linspace, tensor
from ..special import i0
from ..tensor import Tensor

__all__ = ["bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine", "general_hamming",
           "hamming", "hann", "kaiser", "nuttall"]


def _checks(name: str, M: int, dtype, layout) -> D.DType:  # noqa: N803
    dtype = D.get(dtype) if dtype is not None else D.get_default_dtype()
    if M < 0:
        raise ValueError(f"{name} requires non-negative window length, got M={M}")
    if layout not in (None, "strided"):
        raise ValueError(f"{name} is implemented for strided tensors only, got: {layout}")
    if dtype not in (D.float32, D.float64):
        raise ValueError(f"{name} expects float32 or float64 dtypes, got: {dtype.name}")
    return dtype


def _linspace(start, end, steps: int, dtype, device) -> Tensor:
    return linspace(start, end, steps, dtype=dtype, device=device)


def _const(M: int, value: float, dtype, device, requires_grad: bool) -> Tensor:  # noqa: N803
    return full((M,), value, dtype=dtype, device=device, requires_grad=requires_grad)


def _done(t: Tensor, requires_grad: bool) -> Tensor:
    return t.requires_grad_(True) if requires_grad else t


def exponential(M: int, *, center: float | None = None, tau: float = 1.0, sym: bool = True, dtype=None,  # noqa: N803
                layout=None, device=None, requires_grad: bool = False) -> Tensor:
    """exp(-|n - center| / tau)."""
    dtype = _checks("exponential", M, dtype, layout)
    if tau <= 0:
        raise ValueError(f"Tau must be positive, got: {tau} instead.")
    if sym and center is not None:
        raise ValueError("Center must be None for symmetric windows")
    if M == 0:
        return _const(0, 0.0, dtype, device, requires_grad)
    if center is None:
        center = (M if not sym and M > 1 else M - 1) / 2.0
    c = 1 / tau
    k = _linspace(-center * c, (-center + (M - 1)) * c, M, dtype, device)
    return _done((-k.abs()).exp(), requires_grad)


def cosine(M: int, *, sym: bool = True, dtype=None, layout=None, device=None,  # noqa: N803
           requires_grad: bool = False) -> Tensor:
    """sin(π (n + ½) / M)."""
    dtype = _checks("cosine", M, dtype, layout)
    if M == 0:
        return _const(0, 0.0, dtype, device, requires_grad)
    c = math.pi / (M + 1 if not sym and M > 1 else M)
    k = _linspace(0.5 * c, (0.5 + (M - 1)) * c, M, dtype, device)
    return _done(k.sin(), requires_grad)


def gaussian(M: int, *, std: float = 1.0, sym: bool = True, dtype=None, layout=None, device=None,  # noqa: N803
             requires_grad: bool = False) -> Tensor:
    """exp(-(n - (M - 1)/2)² / (2 std²))."""
    dtype = _checks("gaussian", M, dtype, layout)
    if std <= 0:
        raise ValueError(f"Standard deviation must be positive, got: {std} instead.")
    if M == 0:
        return _const(0, 0.0, dtype, device, requires_grad)
    start = -(M if not sym and M > 1 else M - 1) / 2.0
    c = 1 / (std * math.sqrt(2))
    k = _linspace(start * c, (start + (M - 1)) * c, M, dtype, device)
    return _done((-(k ** 2)).exp(), requires_grad)


def kaiser(M: int, *, beta: float = 12.0, sym: bool = True, dtype=None, layout=None, device=None,  # noqa: N803
           requires_grad: bool = False) -> Tensor:
    """I0(β sqrt(1 - (2n/(M-1) - 1)²)) / I0(β)."""
    dtype = _checks("kaiser", M, dtype, layout)
    if beta < 0:
        raise ValueError(f"beta must be non-negative, got: {beta} instead.")
    if M == 0:
        return _const(0, 0.0, dtype, device, requires_grad)
    if M == 1:
        return _const(1, 1.0, dtype, device, requires_grad)
    b = tensor(beta, dtype=dtype, device=device)
    start = -b
    c = 2.0 * b / (M if not sym else M - 1)
    end = b.minimum(start + (M - 1) * c)
    k = _linspace(-beta, float(end.item()), M, dtype, device)
    return _done(i0((b * b - k ** 2).sqrt()) / i0(b), requires_grad)


def general_cosine(M: int, *, a: Iterable, sym: bool = True, dtype=None, layout=None, device=None,  # noqa: N803
                   requires_grad: bool = False) -> Tensor:
    """Σ_i (-1)^i a_i cos(2π i n / (M - 1))."""
    dtype = _checks("general_cosine", M, dtype, layout)
    if M == 0:
        return _const(0, 0.0, dtype, device, requires_grad)
    if M == 1:
        return _const(1, 1.0, dtype, device, requires_grad)
    if not isinstance(a, Iterable):
        raise TypeError("Coefficients must be a list/tuple")
    a = list(a)
    if not a:
        raise ValueError("Coefficients cannot be empty")
    c = 2 * math.pi / (M if not sym else M - 1)
    k = _linspace(0, (M - 1) * c, M, dtype, device)
    a_i = tensor([(-1) ** i * w for i, w in enumerate(a)], dtype=dtype, device=device)
    i = arange(len(a), dtype=dtype, device=device)
    return _done((a_i.unsqueeze(-1) * (i.unsqueeze(-1) * k).cos()).sum(0), requires_grad)


def general_hamming(M: int, *, alpha: float = 0.54, sym: bool = True, dtype=None, layout=None, device=None,  # noqa: N803
                    requires_grad: bool = False) -> Tensor:
    """alpha - (1 - alpha) cos(2π n / (M - 1))."""
    return general_cosine(M, a=[alpha, 1.0 - alpha], sym=sym, dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)


def hamming(M: int, *, sym: bool = True, dtype=None, layout=None, device=None,  # noqa: N803
            requires_grad: bool = False) -> Tensor:
    return general_hamming(M, sym=sym, dtype=dtype, layout=layout, device=device, requires_grad=requires_grad)


def hann(M: int, *, sym: bool = True, dtype=None, layout=None, device=None,  # noqa: N803
         requires_grad: bool = False) -> Tensor:
    return general_hamming(M, alpha=0.5, sym=sym, dtype=dtype, layout=layout, device=device,
                           requires_grad=requires_grad)


def blackman(M: int, *, sym: bool = True, dtype=None, layout=None, device=None,  # noqa: N803
             requires_grad: bool = False) -> Tensor:
    _checks("blackman", M, dtype, layout)
    return general_cosine(M, a=[0.42, 0.5, 0.08], sym=sym, dtype=dtype, layout=layout, device=device,
                          requires_grad=requires_grad)


def bartlett(M: int, *, sym: bool = True, dtype=None, layout=None, device=None,  # noqa: N803
             requires_grad: bool = False) -> Tensor:
    """1 - |2n/(M-1) - 1|."""
    dtype = _checks("bartlett", M, dtype, layout)
    if M == 0:
        return _const(0, 0.0, dtype, device, requires_grad)
    if M == 1:
        return _const(1, 1.0, dtype, device, requires_grad)
    c = 2 / (M if not sym else M - 1)
    k = _linspace(-1, -1 + (M - 1) * c, M, dtype, device)
    return _done(1 - k.abs(), requires_grad)


def nuttall(M: int, *, sym: bool = True, dtype=None, layout=None, device=None,  # noqa: N803
            requires_grad: bool = False) -> Tensor:
    return general_cosine(M, a=[0.3635819, 0.4891775, 0.1365995, 0.0106411], sym=sym, dtype=dtype, layout=layout,
                          device=device, requires_grad=requires_grad)
