"""``tw.nn.functional.interpolate``: resizing the trailing spatial dims (index gathers with weights computed on
the client). :mod:`tensorwire.nn.functional` re-exports it; ``upsample`` and friends call it."""

from __future__ import annotations

import math

import numpy as np

from tensorwire.creation import tensor as _tensor
from tensorwire.functions import where
from tensorwire.tensor import Tensor

from .linear_maps import _pair
from .pooling_nd import _adaptive


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002
                align_corners: bool | None = None, recompute_scale_factor=None, antialias: bool = False) -> Tensor:
    """Resize the trailing spatial dims: ``nearest``, ``nearest-exact``, ``linear``, ``bilinear``, ``trilinear``,
    ``bicubic`` and ``area`` (index gathers with weights computed on the client; every mode is separable);
    ``antialias=True`` (bilinear and bicubic of a 4-D input, as torch's) filters as torch's antialiased kernels do
    (:func:`_aa_weights`: a weight matrix a dim)."""
    if antialias and (mode not in ("bilinear", "bicubic") or input.ndim != 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a 4-D "
                         "tensor as input")
    nsp = input.ndim - 2
    if nsp < 1:
        raise ValueError("interpolate expects a batched input (N, C, ...)")
    in_sizes = list(input.shape[2:])
    if size is not None:
        out_sizes = _pair(size, nsp)
        scales = [None] * nsp
    elif scale_factor is not None:
        sf = list(scale_factor) if isinstance(scale_factor, (tuple, list)) else [scale_factor] * nsp
        out_sizes = [int(math.floor(n * s)) for n, s in zip(in_sizes, sf)]
        scales = [None if recompute_scale_factor else s for s in sf]
    else:
        raise ValueError("either size or scale_factor should be defined")
    out = input
    for i, (n, m, sc) in enumerate(zip(in_sizes, out_sizes, scales)):
        d = 2 + i
        dst = np.arange(m, dtype=np.float64)
        if antialias:
            w = _aa_weights(n, m, sc, align_corners, 2 if mode == "bilinear" else 4)
            wt = _tensor(w.T.astype(out.dtype.np), device=out._dev, session=out._s)
            out = (out.movedim(d, -1) @ wt).movedim(-1, d)
        elif mode in ("nearest", "nearest-exact"):
            scale = (1.0 / sc) if sc else n / m
            at = dst + 0.5 if mode == "nearest-exact" else dst  # nearest-exact: the pixel centres, as torch
            src = np.minimum(np.floor(at * scale).astype(np.int64), n - 1)
            out = out.index_select(d, _tensor(src, device=out._dev, session=out._s))
        elif mode == "area":  # adaptive average pooling, one dim at a time (a box's mean is separable)
            (pos, ok), = _adaptive([n], [m])
            k = pos.shape[1]
            x = out.movedim(d, -1)
            idx = _tensor(np.where(ok, pos, 0).reshape(-1), device=out._dev, session=out._s)
            win = x.index_select(x.ndim - 1, idx).reshape(*x.shape[:-1], m, k)
            okt = _tensor(ok, device=out._dev, session=out._s)
            total = where(okt, win, win.new_zeros(())).sum(-1)
            out = (total / _tensor(ok.sum(1).astype(np.float64), device=out._dev, session=out._s).to(
                total.dtype)).movedim(-1, d)
        elif mode == "bicubic":  # Keys' cubic convolution (A = -0.75) over 4 clamped neighbours, as torch
            if align_corners:
                pos = dst * ((n - 1) / (m - 1) if m > 1 else 0.0)
            else:
                scale = (1.0 / sc) if sc else n / m
                pos = (dst + 0.5) * scale - 0.5
            base = np.floor(pos)
            t = pos - base
            a_ = -0.75
            ws = [((a_ * (t + 1) - 5 * a_) * (t + 1) + 8 * a_) * (t + 1) - 4 * a_,
                  ((a_ + 2) * t - (a_ + 3)) * t * t + 1,
                  ((a_ + 2) * (1 - t) - (a_ + 3)) * (1 - t) * (1 - t) + 1,
                  ((a_ * (2 - t) - 5 * a_) * (2 - t) + 8 * a_) * (2 - t) - 4 * a_]
            shape = [1] * out.ndim
            shape[d] = m
            acc = None
            for j, wj in enumerate(ws):
                ij = np.clip(base.astype(np.int64) - 1 + j, 0, n - 1)
                g = out.index_select(d, _tensor(ij, device=out._dev, session=out._s))
                term = g * _tensor(wj.astype(out.dtype.np).reshape(shape), device=out._dev, session=out._s)
                acc = term if acc is None else acc + term
            out = acc
        elif mode in ("linear", "bilinear", "trilinear"):
            if align_corners:
                s = (n - 1) / (m - 1) if m > 1 else 0.0
                pos = dst * s
            else:
                scale = (1.0 / sc) if sc else n / m
                pos = np.maximum((dst + 0.5) * scale - 0.5, 0.0)
            i0 = np.minimum(np.floor(pos).astype(np.int64), n - 1)
            i1 = np.minimum(i0 + 1, n - 1)
            lam = (pos - i0).astype(out.dtype.np if out.dtype.is_floating_point else np.float32)
            shape = [1] * out.ndim
            shape[d] = m
            w = _tensor(lam.reshape(shape), device=out._dev, session=out._s)
            a = out.index_select(d, _tensor(i0, device=out._dev, session=out._s))
            b = out.index_select(d, _tensor(i1, device=out._dev, session=out._s))
            out = a + (b - a) * w
        else:
            raise NotImplementedError(f"interpolate mode {mode!r} is not supported")
    return out



def _aa_filter(x: np.ndarray, taps: int) -> np.ndarray:
    """torch's antialiasing filters: the triangle (bilinear, 2 taps) and Keys' cubic with a = -0.5 (bicubic)."""
    x = np.abs(x)
    if taps == 2:
        return np.where(x < 1.0, 1.0 - x, 0.0)
    a = -0.5
    return np.where(x < 1.0, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2.0, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def _aa_weights(n: int, m: int, scale_factor, align_corners, taps: int) -> np.ndarray:
    """The ``[m, n]`` weights of torch's antialiased resize of a dim of ``n`` to ``m``
    (``_compute_indices_min_size_weights_aa``): output ``i`` centred at ``scale * (i + 0.5)``, the filter stretched by
    the scale when downsampling, its taps within the input and normalised to sum to 1."""
    if align_corners:
        scale = (n - 1) / (m - 1) if m > 1 else 0.0
    else:
        scale = (1.0 / scale_factor) if scale_factor else n / m
    support = taps / 2 * scale if scale >= 1.0 else taps / 2
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    w = np.zeros((m, n), dtype=np.float64)
    for i in range(m):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n)
        ws = _aa_filter((np.arange(lo, hi) - center + 0.5) * invscale, taps)
        total = ws.sum()
        w[i, lo:hi] = ws / total if total != 0 else ws
    return w
