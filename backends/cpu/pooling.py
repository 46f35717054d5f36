"""Native CPU kernels of ``max_pool2d`` and its gradient ``max_pool2d_grad``.

Both are composites of the op table (every backend can run their decompositions); these kernels do the same
work in a handful of numpy calls instead of one step per window position. A window is read as a strided slice
of the input, padded with the dtype's lowest value where torch pads.
"""

from __future__ import annotations

import numpy as np

from tensorwire.protocol.ops.conv import _lowest, _padded_size, _window_geometry, _window_slices

from . import host_c
from .kernels import _arr, _compute, _out, kernel

#: bytes of rows :func:`_transposed` copies at a time (at least 8 rows)
_TRANSPOSE_BLOCK = 1 << 17


def _transposed(a: np.ndarray) -> np.ndarray:
    """A contiguous copy of the 2-D ``a``'s transpose, made a block of rows at a time (~128 KiB of them, at least 8:
    the block's columns of the output are then written while its rows stay in cache). numpy's one-call transposing
    copy took 2.4 ms for a [196, 4096] float32 array (a pooling gradient's [H*W, N*C]), the blocks 0.55; 0.66 ms and
    0.30 the other way round."""
    rows, cols = a.shape
    if a.size < 1 << 16:
        return np.ascontiguousarray(a.T)
    out = np.empty((cols, rows), a.dtype)
    step = max(8, _TRANSPOSE_BLOCK // max(cols * a.itemsize, 1))
    for s in range(0, rows, step):
        out[:, s:s + step] = a[s:s + step].T
    return out


def _spatial_first(x: np.ndarray) -> np.ndarray:
    """[N, C, H, W] -> a contiguous [H, W, N*C]: a window position's values are then a slice whose inner axis is
    long (N*C) rather than the output width, which numpy runs several times faster."""
    n, c, h, w = x.shape
    return _transposed(np.ascontiguousarray(x).reshape(n * c, h * w)).reshape(h, w, n * c)


def _batch_first(t: np.ndarray, n: int, c: int) -> np.ndarray:
    """The inverse of :func:`_spatial_first` (``t`` may be a slice: made contiguous first, its rows long runs, which
    costs less than transposing the slice, ~2.5 ms for a [14, 14, 4096] one)."""
    h, w = t.shape[:2]
    return _transposed(np.ascontiguousarray(t).reshape(h * w, n * c)).reshape(n, c, h, w)


def _padded(xs: np.ndarray, geom, fill) -> np.ndarray:
    """[H, W, N*C] with torch's padding (plus the high-side rows/columns that ceil_mode's last window reaches)."""
    _, _, (ph, pw), _, _ = geom
    h, w = xs.shape[:2]
    hp, wp = _padded_size(geom, h, w)
    if (hp, wp) == (h, w):
        return xs
    xp = np.full((hp, wp, xs.shape[2]), fill, xs.dtype)
    xp[ph:ph + h, pw:pw + w] = xs
    return xp


def _running_maxima(xp: np.ndarray, wins) -> tuple[list, list, np.ndarray]:
    """The windows' values per kernel position, the maxima over the positions before each (None for the first),
    and the windows' maxima (a NaN propagates, as torch)."""
    vs = [xp[r, q] for r, q in wins]
    before: list = [None]
    m = vs[0]
    for v in vs[1:]:
        before.append(m)
        m = np.maximum(m, v)
    return vs, before, m


def _tiled_max(x: np.ndarray, geom) -> np.ndarray | None:
    """When the windows tile the input (stride = kernel, no padding or dilation): their maxima, kernel rows first
    (whole output rows at a time: long inner runs), then kernel columns; None otherwise."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow) = geom
    n, c, h, w = x.shape
    if (sh, sw) != (kh, kw) or (ph, pw, dh, dw) != (0, 0, 1, 1) or h < oh * kh or w < ow * kw:
        return None
    v = x[:, :, :oh * kh, :ow * kw].reshape(n * c * oh, kh, ow * kw)
    r = v[:, 0]
    for i in range(1, kh):
        r = np.maximum(r, v[:, i])
    r = r.reshape(n * c * oh, ow, kw)
    m = r[..., 0]
    for j in range(1, kw):
        m = np.maximum(m, r[..., j])  # NaN propagates, as torch
    return (m if m.base is None else m.copy()).reshape(n, c, oh, ow)


@kernel("max_pool2d")
def _max_pool2d(ins, a, shape, dt):
    ct = _compute(dt)
    x = _arr(ins[0], ct)
    geom = _window_geometry(x.shape, a, a.get("ceil_mode", False))
    m = _tiled_max(x, geom)
    if m is not None:
        return _out(m, dt)
    _, _, m = _running_maxima(_padded(_spatial_first(x), geom, _lowest(dt)), _window_slices(geom))
    return _out(_batch_first(m, x.shape[0], x.shape[1]), dt)


@kernel("max_pool2d_grad")
def _max_pool2d_grad(ins, a, shape, dt):
    ct = _compute(dt)
    x, gy = _arr(ins[0], ct), _arr(ins[1], ct)
    geom = _window_geometry(x.shape, a, a.get("ceil_mode", False))
    got = host_c.max_pool2d_grad(x, gy, geom)  # (the C kernel where the CPU compiles: one pass, torch's order)
    if got is not None:
        return _out(got, dt)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), _ = geom
    n, c, h, w = x.shape
    xp = _padded(_spatial_first(x), geom, -np.inf)
    gs = _spatial_first(gy)
    wins = _window_slices(geom)
    vs, before, m = _running_maxima(xp, wins)
    nan = bool(np.isnan(m).any())
    finite = bool(np.isfinite(gs).all())  # then gy * mask is exact; otherwise select (inf * 0 is NaN)
    tiling = sh >= (kh - 1) * dh + 1 and sw >= (kw - 1) * dw + 1  # no two windows share a position
    gp = np.zeros(xp.shape, ct)
    for k, (v, (rows, cols)) in enumerate(zip(vs, wins)):
        # position k holds its window's first maximum: it equals the maximum and every position before is smaller
        # (with NaNs: it is the first NaN), as the decomposition and torch's saved indices have it
        hit = v == m
        if k:
            hit &= before[k] < m
        if nan:
            hit |= np.isnan(v) & ~np.isnan(before[k]) if k else np.isnan(v)
        part = gs * hit if finite else np.where(hit, gs, ct.type(0))
        dst = gp[rows, cols]
        if tiling:  # windows do not overlap: every position is written once
            dst[...] = part
        else:
            dst += part
    if gp.shape[:2] != (h, w):
        gp = gp[ph:ph + h, pw:pw + w]
    return _out(_batch_first(gp, n, c), dt)
