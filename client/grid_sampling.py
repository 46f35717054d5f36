"""``grid_sample`` (and ATen's ``grid_sampler_2d``/``grid_sampler_3d``), composed of gathers (issue 33): the grid's
normalised coordinates are mapped to pixel positions as torch maps them (``align_corners``, then the padding mode's
clipping or reflection), and each output is a weighted sum of the input at its neighbouring pixels (bilinear or
trilinear, nearest, bicubic in 2-D), taps outside the input counting as 0 for ``padding_mode="zeros"``. And the grids
it samples at: ``affine_grid`` (ATen's ``affine_grid_generator``), each batch's affine map applied to torch's base grid
of normalised output positions.

Below :mod:`tensorwire.tensor` (it needs ``where`` alone, from :mod:`tensorwire.combine`): ``tw.grid_sampler_2d``
(client/array_extras.py) and ``tw.nn.functional.grid_sample``, which re-exports it, both use it."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import numpy as np

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ShapeError

from .combine import where

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["affine_grid", "grid_sample", "grid_sampler_2d", "grid_sampler_3d"]

_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_PADS = {"zeros": 0, "border": 1, "reflection": 2}


def _where(c, a, b):
    return where(c, a, b)


def _reflect(x: Tensor, twice_low: int, twice_high: int) -> Tensor:
    if twice_low == twice_high:
        return x * 0
    lo = twice_low / 2
    span = (twice_high - twice_low) / 2
    x = (x - lo).abs()
    extra = x - (x / span).floor() * span  # fmod of a non-negative x
    flips = (x / span).floor()
    even = (flips - (flips / 2).floor() * 2) == 0
    return _where(even, extra + lo, span - extra + lo)


def _source(coord: Tensor, size: int, padding: int, align_corners: bool, clip: bool = True) -> Tensor:
    """Normalised [-1, 1] coordinates -> pixel positions, with the padding mode's clipping or reflection."""
    x = (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2
    if not clip:
        return x
    return _bound(x, size, padding, align_corners)


def _clip(x: Tensor, size: int) -> Tensor:
    """``x`` clipped to ``[0, size - 1]`` with torch's gradient (``clip_coordinates_set_grad``): 1 strictly inside,
    0 at either limit and beyond. (``clamp``'s gradient passes at the limits: a grid point exactly at -1 or 1 with
    ``align_corners=True``, an identity spatial transformer's corners, got a gradient torch's does not have.)"""
    inside = (x > 0) & (x < size - 1)
    return _where(inside, x, x.detach().clamp(0, size - 1))


def _bound(x: Tensor, size: int, padding: int, align_corners: bool) -> Tensor:
    if padding == 1:
        return _clip(x, size)
    if padding == 2:
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
        return _clip(x, size)
    return x


def _tap(flat: Tensor, sizes, coords, weight: Tensor, valid_needed: bool) -> Tensor:
    """weight · input[coords] for integer-valued coordinate tensors (N, P) per spatial dim (last dim first in
    ``sizes`` order: D, H, W), 0 where a coordinate leaves the input."""
    n, c, _ = flat.shape
    valid = None
    idx = None
    stride = 1
    for size, co in zip(reversed(sizes), reversed(coords)):
        ok = (co >= 0) & (co <= size - 1)
        valid = ok if valid is None else valid & ok
        ci = co.clamp(0, size - 1).to(D.int64)
        idx = ci * stride if idx is None else idx + ci * stride
        stride *= size
    vals = flat.gather(2, idx.unsqueeze(1).expand(n, c, idx.shape[1]))
    w = weight if not valid_needed else _where(valid, weight, weight * 0)
    return vals * w.unsqueeze(1)


def _cubic(t: Tensor) -> list[Tensor]:
    a = -0.75
    x1, x2 = t + 1, 1 - t
    return [((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1,
            ((a * (x2 + 1) - 5 * a) * (x2 + 1) + 8 * a) * (x2 + 1) - 4 * a]


def _sample(input: Tensor, grid: Tensor, mode: int, padding: int, align_corners: bool) -> Tensor:  # noqa: A002
    nd = input.ndim - 2
    if nd not in (2, 3) or grid.ndim != nd + 2 or grid.shape[-1] != nd:
        raise ShapeError(f"grid_sample: expected a 4-D input with a (N, H, W, 2) grid or a 5-D input with a "
                         f"(N, D, H, W, 3) grid, got {list(input.shape)} and {list(grid.shape)}")
    if grid.shape[0] != input.shape[0]:
        raise ShapeError(f"grid_sample: grid and input need the same batch size, got {grid.shape[0]} and "
                         f"{input.shape[0]}")
    if mode == 2 and nd != 2:
        raise ValueError("grid_sample: bicubic interpolation only supports 4D input")
    n, c = input.shape[:2]
    sizes = list(input.shape[2:])  # (D,) H, W
    out_sp = list(grid.shape[1:-1])
    P = math.prod(out_sp)  # noqa: N806
    flat = input.reshape(n, c, math.prod(sizes))
    g = grid.to(input.dtype).reshape(n, P, nd)
    # the grid's last dim is (x, y[, z]): x indexes W, the last spatial dim
    raw = [g[..., nd - 1 - i] for i in range(nd)]  # in (D,) H, W order
    if mode == 2:  # bicubic: taps at floor - 1 .. floor + 2, each bounded by the padding mode
        pos = [_source(r, s, padding, align_corners, clip=False) for r, s in zip(raw, sizes)]
        base = [p.floor() for p in pos]
        wy, wx = _cubic(pos[0] - base[0]), _cubic(pos[1] - base[1])
        out = None
        for i in range(4):
            for j in range(4):
                cy = _bound(base[0] - 1 + i, sizes[0], padding, align_corners)
                cx = _bound(base[1] - 1 + j, sizes[1], padding, align_corners)
                if padding != 0:
                    cy, cx = cy.round(), cx.round()
                term = _tap(flat, sizes, [cy, cx], wy[i] * wx[j], padding == 0)
                out = term if out is None else out + term
    elif mode == 1:  # nearest: round half to even, as torch's nearbyint
        pos = [_source(r, s, padding, align_corners).round() for r, s in zip(raw, sizes)]
        out = _tap(flat, sizes, pos, pos[0] * 0 + 1, True)
    else:  # (bi/tri)linear
        pos = [_source(r, s, padding, align_corners) for r, s in zip(raw, sizes)]
        lo = [p.floor() for p in pos]
        frac = [p - f for p, f in zip(pos, lo)]
        out = None
        for corner in range(2 ** nd):
            coords, w = [], None
            for k in range(nd):
                hi = (corner >> (nd - 1 - k)) & 1
                coords.append(lo[k] + hi)
                wk = frac[k] if hi else 1 - frac[k]
                w = wk if w is None else w * wk
            term = _tap(flat, sizes, coords, w, True)
            out = term if out is None else out + term
    return out.reshape(n, c, *out_sp)


def _align_corners(align_corners: bool | None) -> bool:
    """``align_corners`` as :func:`grid_sample` and :func:`affine_grid` take it: not given (None) is False, with
    torch's warning (on the caller's caller's line)."""
    if align_corners is None:
        warnings.warn("Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. "
                      "Please specify align_corners=True if the old behavior is desired. See the documentation of "
                      "grid_sample for details.", stacklevel=3)
        return False
    return bool(align_corners)


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",  # noqa: A002
                align_corners: bool | None = None) -> Tensor:
    """The input sampled at the grid's normalised positions (torch's ``grid_sample``; ``align_corners`` not given is
    False, with torch's warning)."""
    if mode not in _MODES:
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', "
                         f"but got: '{mode}'")
    if padding_mode not in _PADS:
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    return _sample(input, grid, _MODES[mode], _PADS[padding_mode], _align_corners(align_corners))


def grid_sampler_2d(input: Tensor, grid: Tensor, interpolation_mode: int, padding_mode: int,  # noqa: A002
                    align_corners: bool) -> Tensor:
    """ATen's 2-D grid sampler (modes and paddings by number: bilinear 0, nearest 1, bicubic 2; zeros 0, border
    1, reflection 2)."""
    if input.ndim != 4:
        raise ShapeError(f"grid_sampler_2d(): expected 4D input, got {input.ndim}D")
    return _sample(input, grid, int(interpolation_mode), int(padding_mode), bool(align_corners))


def grid_sampler_3d(input: Tensor, grid: Tensor, interpolation_mode: int, padding_mode: int,  # noqa: A002
                    align_corners: bool) -> Tensor:
    """ATen's 3-D grid sampler (bilinear 0 or nearest 1)."""
    if input.ndim != 5:
        raise ShapeError(f"grid_sampler_3d(): expected 5D input, got {input.ndim}D")
    return _sample(input, grid, int(interpolation_mode), int(padding_mode), bool(align_corners))


# -- affine grids -----------------------------------------------------------------------------------------------------

def _base_line(n: int, align_corners: bool) -> np.ndarray:
    """torch's normalised positions of ``n`` output pixels along one dim (``linspace_from_neg_one``): -1 .. 1, pulled
    in by ``(n - 1) / n`` without ``align_corners`` (pixel centres); a single pixel sits at 0. Host values of the
    size alone."""
    if n <= 1:
        return np.zeros(max(n, 0))
    line = np.linspace(-1.0, 1.0, n)
    return line if align_corners else line * (n - 1) / n


def affine_grid(theta: Tensor, size, align_corners: bool | None = None) -> Tensor:
    """The sampling grid of a batch of affine maps (torch's ``F.affine_grid``): ``theta`` ``(N, 2, 3)`` and ``size``
    ``(N, C, H, W)`` give ``(N, H, W, 2)``; ``(N, 3, 4)`` and ``(N, C, D, H, W)`` give ``(N, D, H, W, 3)``. Each output
    position's normalised coordinates ``(x, y[, z], 1)`` times ``theta``'s rows, for :func:`grid_sample` with the same
    ``align_corners`` (default False, with torch's warning when not given). Differentiable in ``theta``: the base
    coordinates are constants of the size, one line per dim, broadcast against ``theta``'s columns."""
    align_corners = _align_corners(align_corners)
    if not theta.dtype.is_floating_point:
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = [int(v) for v in size]
    nd = len(size) - 2
    if nd not in (2, 3):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {size}.")
    if theta.ndim != 3 or tuple(theta.shape[1:]) != (nd, nd + 1):
        raise ValueError(f"Expected a batch of {nd}D affine matrices of shape Nx{nd}x{nd + 1} for size {size}. Got "
                         f"{list(theta.shape)}.")
    spatial = size[2:]
    if align_corners and min(spatial) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
                      "align_corners=True. This is not an intended use case of affine_grid. See the documentation of "
                      "affine_grid for details.", stacklevel=2)
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    if theta.shape[0] != size[0]:
        raise ShapeError(f"affine_grid: theta holds {theta.shape[0]} affine maps for a batch of {size[0]} (size "
                         f"{size})")
    n = size[0]
    cols = theta.transpose(1, 2).reshape(n, nd + 1, *([1] * nd), nd)  # column k times coordinate k (x, y[, z], 1)
    out = None
    # (summed in torch's order, x first and the constant last); coordinate k runs along spatial dim nd - 1 - k
    for k in range(nd):
        dim = nd - 1 - k
        shape = [1] * (nd + 2)
        shape[1 + dim] = spatial[dim]
        line = theta._operand(_base_line(spatial[dim], align_corners)).to(theta.dtype).reshape(shape)
        term = line * cols[:, k]
        out = term if out is None else out + term
    return out + cols[:, nd]
