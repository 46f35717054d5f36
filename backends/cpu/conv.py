"""Native CPU kernels of ``conv2d`` and its two gradients, ``conv2d_grad_weight`` and ``conv2d_grad_input`` (which is
also ``F.conv_transpose2d``'s forward). A float32 conv of at most 64 channels runs on the register-blocked direct C
kernels (``host_c.conv2d_direct``, ``host_c.conv2d_grad_weight_direct``; strided ones over the input's phases,
``conv_phases.py``) where its shape suits them (:func:`_direct_fits`, :func:`_phases_fit`). Otherwise each is one or
a few BLAS gemms over columns copied from the input; the layout of those columns is chosen per call from the
convolution's shape (:func:`_layout`):

* ``dense``: the window covers the whole unpadded input, so the output is 1x1 and the convolution IS a product:
  ``x [N, C*kh*kw] @ w [O, C*kh*kw]^T``, each operand and result a reshape of the NCHW buffers (no im2col);
* ``channels_last``: strided convolutions with at least ``_CHANNELS_LAST_MIN`` input channels, and stride-1 ones
  with a kernel larger than 1x1 and at least ``_CHANNELS_LAST_MIN_STRIDE_1`` (measured, session 39: ResNet's 3x3
  convs at 7x7 to 2x2 ran their forward and both gradients in 0.55-0.65x the flat layout's time, 32x32 to 64x64
  images at 16-128 channels in 0.55-0.85x; at 8 channels and 5x5 the flat forward was faster). The input goes
  zero-padded into [N, Hp, Wp, C], where a window's row is ONE contiguous run of kw*C values, so the im2col copy
  moves runs of kw*C (channel-major it moves single values at the stride, ~1.5x slower); the gemms write positions
  by channels ([N*oh*ow, O]), and one copy transposes the result back to NCHW. The input gradient's col2im adds the
  columns of a kernel row's stride kernel columns at once, computed apart: their targets make one run of
  ow*stride*C values per output row (:func:`_cl_col2im_runs`; stride x stride positions at a time otherwise);
* ``flat``: everything else (1x1 or few channels at stride 1, grouped, few channels), channel-major on the flat
  grid described below. A
  strided conv there whose kernel is a multiple of its stride (DCGAN's first layer) runs its forward and weight
  gradient as the stride-1 conv of the input's space-to-depth (:func:`_space_to_depth`), whose columns are
  (kh/sh)*(kw/sw) copies of unit-stride windows a block where the strided windows took kh*kw copies at the stride
  (DCGAN's first layer: 4 copies instead of 16; its forward ~15%, its weight gradient ~30% faster).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tensorwire.protocol import dtypes as D
from tensorwire.protocol.ops.conv import _window_slices

from . import blas, conv_phases, host_c
from .kernels import _arr, _compute, _out, kernel
from .scratch import scratch, scratch_copy, scratch_zeros

_CHANNELS_LAST_MIN = 8  # input channels from which a strided conv runs channels-last (runs of kw*C values)
_CHANNELS_LAST_MIN_STRIDE_1 = 16  # ... and a stride-1 conv whose kernel is not 1x1 (1x1: the flat grid is the input)
_CHANNELS_LAST_BLOCK = 1 << 21  # bytes of columns per gemm in the channels-last layout (whole images)
#: the direct kernels (``_direct_fits``) for stride-1 convs of at most this many channels in and out ...
_DIRECT_MAX_CHANNELS = 64
#: ... whose outputs are at least this wide (the forward's blocks are 16 columns: 8 wasted half of each); narrower
#: ones take blocks of rows of 8 columns (2 rows, 4 under AVX-512): an input gradient's from 7 wide
#: (:data:`_DIRECT_NARROWEST`), where the gemms' col2im is slow (ResNet's 64 channels at 8x8: 4.3 ms against 7.3),
#: and a forward's at 8
_DIRECT_MIN_WIDTH = 12
#: the narrowest outputs, below :data:`_DIRECT_MIN_WIDTH`, each kernel takes (forward and input gradient: the forward
#: kernel's; weight gradient: none). A forward at 8 wide (session 48, ResNet's [100, 64, 8, 8] on one thread): 4.2 ms
#: against the gemms' 5.4 with AVX-512 (blocks of 4 rows of 8 columns in 16 lanes), 5.7 with 8 lanes; 2 threads 3.2
#: against 4.3. At 7 wide a forward's blocks waste a column in 8: on one thread 4.2 against 4.1 ms with AVX-512, 5.8
#: against 4.1 with 8 lanes (left on the gemms)
_DIRECT_NARROWEST = {"forward": 8, "input gradient": 7, "weight gradient": _DIRECT_MIN_WIDTH}
#: a strided conv's input gradient runs on its phases (``conv_phases.py``) from this many input channels: with fewer,
#: each phase's correlation fills blocks of 4 channels mostly wasted (an RGB or grey stem's: the gemms' col2im was
#: ~1.5-2x faster there), while at 16 and more it took half the col2im's time
_PHASES_MIN_GRAD_CHANNELS = 8


def _layout(n: int, c: int, h: int, wd: int, kh: int, kw: int, a: dict) -> str:
    """``"dense"``, ``"channels_last"`` or ``"flat"``: how a conv2d of an input [n, c, h, wd] and a kernel kh x kw
    with attributes ``a`` (or either of its gradients) runs; see the module's docstring."""
    (sh, sw), (ph, pw), (dh, dw), groups = _conv_geom(a)
    if groups != 1:
        return "flat"
    if (ph, pw) == (0, 0) and (kh, kw) == (h, wd) and (dh == 1 or kh == 1) and (dw == 1 or kw == 1):
        return "dense"
    if (sh, sw) != (1, 1) and c >= _CHANNELS_LAST_MIN:
        return "channels_last"
    if (sh, sw) == (1, 1) and c >= _CHANNELS_LAST_MIN_STRIDE_1 and (kh, kw) != (1, 1):
        return "channels_last"
    return "flat"


def _padded_nhwc(x: np.ndarray, ph: int, pw: int, ct: np.dtype) -> np.ndarray:
    """x [N, C, H, W] zero-padded into a contiguous [N, H + 2ph, W + 2pw, C] (only the border is zeroed)."""
    n, c, h, wd = x.shape
    xp = scratch("pad", (n, h + 2 * ph, wd + 2 * pw, c), ct)
    if ph:
        xp[:, :ph] = 0
        xp[:, ph + h:] = 0
    if pw:
        xp[:, ph:ph + h, :pw] = 0
        xp[:, ph:ph + h, pw + wd:] = 0
    xp[:, ph:ph + h, pw:pw + wd] = x.transpose(0, 2, 3, 1)
    return xp


class _ChannelsLast:
    """A channels-last conv2d: input [n, c, h, wd] padded to [n, hp, wp, c], kernel kh x kw, output [n, ., oh, ow];
    the columns of a block of whole images are [b*oh*ow, kh*kw*c], ordered (i, j, c) like the weight's
    ``[O, kh, kw, C]`` transpose."""

    def __init__(self, n: int, c: int, h: int, wd: int, kh: int, kw: int, oh: int, ow: int, a: dict, ct: np.dtype):
        self.stride, (self.ph, self.pw), self.dilation, _ = _conv_geom(a)
        self.n, self.c, self.h, self.wd, self.kh, self.kw, self.oh, self.ow, self.ct = n, c, h, wd, kh, kw, oh, ow, ct
        self.k = kh * kw * c
        per = max(_CHANNELS_LAST_BLOCK // max(oh * ow * self.k * ct.itemsize, 1), 1)
        self.blocks = [(s, min(s + per, n)) for s in range(0, n, per)]
        self.rows = (self.blocks[0][1] - self.blocks[0][0]) * oh * ow  # column rows of the largest block

    def windows(self, xp: np.ndarray) -> np.ndarray:
        """The read-only view [n, oh, ow, kh, kw, c] of xp's windows (a window's row: one run of kw*c values)."""
        sn, sy, sx, sc = xp.strides
        (sh, sw), (dh, dw) = self.stride, self.dilation
        # (a view on xp's buffer, xp contiguous: ~8x cheaper than as_strided's)
        win = np.ndarray((xp.shape[0], self.oh, self.ow, self.kh, self.kw, self.c), xp.dtype, xp, 0,
                         (sn, sh * sy, sw * sx, dh * sy, dw * sx, sc))
        win.flags.writeable = False  # (the windows overlap)
        return win

    def column_blocks(self, x: np.ndarray):
        """``(first image, stop image, columns [rows, k])`` of x's im2col columns, a block of images at a time."""
        win = self.windows(_padded_nhwc(x, self.ph, self.pw, self.ct))
        buf = scratch("cols", self.rows * self.k, self.ct)
        for s, e in self.blocks:
            cols = buf[:(e - s) * self.oh * self.ow * self.k].reshape(e - s, self.oh, self.ow, self.kh, self.kw,
                                                                      self.c)
            np.copyto(cols, win[s:e])
            yield s, e, cols.reshape(-1, self.k)

    def weight_rows(self, w: np.ndarray) -> np.ndarray:
        """w [O, C, kh, kw] as [O, kh*kw*C], the columns' order."""
        return np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(w.shape[0], self.k)

    def col2im(self, gp: np.ndarray, cols: np.ndarray) -> None:
        """Adds cols [b, oh, ow, kh, kw, c] at their windows' places in gp [b, hp, wp, c]: stride x stride kernel
        positions at once where their targets tile (dilation 1, stride <= kernel), else one position at a time."""
        (sh, sw), (dh, dw) = self.stride, self.dilation
        kh, kw, oh, ow, c = self.kh, self.kw, self.oh, self.ow, self.c
        sn, sy, sx, sc = gp.strides
        b = gp.shape[0]
        if dh == dw == 1 and sh <= kh and sw <= kw:
            for i0 in range(0, kh, sh):
                for j0 in range(0, kw, sw):
                    di, dj = min(sh, kh - i0), min(sw, kw - j0)
                    dst = as_strided(gp[:, i0:, j0:], (b, oh, di, ow, dj, c), (sn, sh * sy, sy, sw * sx, sx, sc))
                    dst += cols[:, :, :, i0:i0 + di, j0:j0 + dj].transpose(0, 1, 3, 2, 4, 5)
            return
        for i in range(kh):
            for j in range(kw):
                dst = as_strided(gp[:, i * dh:, j * dw:], (b, oh, ow, c), (sn, sh * sy, sw * sx, sc))
                dst += cols[:, :, :, i, j]


def _cl_conv2d(x, w, b, a, shape, dt, ct):
    n, o, oh, ow = shape
    _, c, h, wd = x.shape
    cl = _ChannelsLast(n, c, h, wd, w.shape[2], w.shape[3], oh, ow, a, ct)
    wt = cl.weight_rows(w).T  # [k, O]
    y = scratch("out", (n * oh * ow, o), ct)
    for s, e, cols in cl.column_blocks(x):
        blas.matmul(cols, wt, out=y[s * oh * ow:e * oh * ow])
    if b is not None:
        y += b
    return _conv_emit(y.reshape(n, oh, ow, o).transpose(0, 3, 1, 2), shape, dt)


def _cl_conv2d_grad_weight(x, gy, a, shape, dt, ct):
    o, _, kh, kw = shape
    n, c, h, wd = x.shape
    oh, ow = gy.shape[2:]
    cl = _ChannelsLast(n, c, h, wd, kh, kw, oh, ow, a, ct)
    g = scratch_copy("grad", gy.transpose(1, 0, 2, 3)).reshape(o, n * oh * ow)
    acc = None  # gy^T [O, rows] @ columns [rows, k]
    for s, e, cols in cl.column_blocks(x):
        t = blas.matmul(g[:, s * oh * ow:e * oh * ow], cols)
        acc = t if acc is None else np.add(acc, t, out=acc)
    return _out(np.ascontiguousarray(acc.reshape(o, kh, kw, c).transpose(0, 3, 1, 2)), dt)


def _cl_conv2d_grad_input(gy, w, a, shape, dt, ct):
    n, c, h, wd = shape
    o, _, kh, kw = w.shape
    oh, ow = gy.shape[2:]
    cl = _ChannelsLast(n, c, h, wd, kh, kw, oh, ow, a, ct)
    g = scratch_copy("grad", gy.transpose(0, 2, 3, 1)).reshape(n * oh * ow, o)
    gp = scratch_zeros("pad", (n, h + 2 * cl.ph, wd + 2 * cl.pw, c), ct)
    buf = scratch("cols", cl.rows * cl.k, ct)
    if cl.dilation[1] == 1 and kw % cl.stride[1] == 0:
        _cl_col2im_runs(cl, g, w, gp, buf)
        return _conv_emit(gp[:, cl.ph:cl.ph + h, cl.pw:cl.pw + wd].transpose(0, 3, 1, 2), shape, dt)
    wt = cl.weight_rows(w)  # [O, k]
    for s, e in cl.blocks:  # the columns gy @ w of a block of images, added at their windows' places
        cols = buf[:(e - s) * oh * ow * cl.k].reshape((e - s) * oh * ow, cl.k)
        blas.matmul(g[s * oh * ow:e * oh * ow], wt, out=cols)
        cl.col2im(gp[s:e], cols.reshape(e - s, oh, ow, kh, kw, c))
    return _conv_emit(gp[:, cl.ph:cl.ph + h, cl.pw:cl.pw + wd].transpose(0, 3, 1, 2), shape, dt)


def _cl_col2im_runs(cl: _ChannelsLast, g: np.ndarray, w: np.ndarray, gp: np.ndarray, buf: np.ndarray) -> None:
    """The input gradient's col2im in runs: adds gy @ w at the windows' places in gp [n, hp, wp, c], for a conv whose
    kernel width is a multiple of its column stride sw (dilation 1 across). The columns of kernel row i and the sw
    kernel columns j0..j0+sw of a position (v) land on sw*c consecutive values of gp's row, and those of the
    positions v = 0, 1, ... follow each other, so each (i, j0) group's columns, computed apart ([rows, sw*c], one
    gemm of a batch), are added as ONE contiguous run of ow*sw*c values per output row, where
    :meth:`_ChannelsLast.col2im` adds runs of sw*c (its columns interleave the groups): ~ow times fewer, longer runs
    (DCGAN's strided layers' input gradients took ~15% less time; numpy's strided adds cost per run)."""
    (sh, sw), (dh, _) = cl.stride, cl.dilation
    o, c, kh, kw = w.shape
    oh, ow, gj = cl.oh, cl.ow, kw // sw
    # w [O, C, kh, kw] as [kh * gj, O, sw * C]: group (i, q) holds w[:, :, i, q*sw:(q+1)*sw] ordered (dj, c)
    wg = np.ascontiguousarray(w.reshape(o, c, kh, gj, sw).transpose(2, 3, 0, 4, 1)).reshape(kh * gj, o, sw * c)
    sn, sy, sx, sc = gp.strides
    run = ow * sw * c
    for s, e in cl.blocks:
        rows = (e - s) * oh * ow
        cols = buf[:kh * gj * rows * sw * c].reshape(kh * gj, rows, sw * c)
        blas.matmul(g[s * oh * ow:e * oh * ow], wg, out=cols)
        gb = gp[s:e]  # (contiguous: the views below are made on its buffer, ~8x cheaper than as_strided's)
        for i in range(kh):
            for q in range(gj):
                dst = np.ndarray((e - s, oh, run), gp.dtype, gb, i * dh * sy + q * sw * sx, (sn, sh * sy, sc))
                dst += cols[i * gj + q].reshape(e - s, oh, run)


# The flat layout: im2col into a contiguous column buffer, then ONE BLAS gemm per block of positions (a batched
# matmul over the groups). Everything is channel-major with the positions last, so no gemm operand needs a transpose
# copy: x [N, C, H, W] goes zero-padded into [C, N, hr, wr] and the columns of b positions are [C*kh*kw, b].
# At stride 1 the positions are the flat grid of that buffer (n*hr*wr + y*wr + x; the ones that are not outputs are
# computed and dropped, or get a zero gradient), so each kernel position's columns are ONE shifted slice of it, a fast
# copy; images and rows share their zero padding (a window running off a row wraps into the next row's leading
# zeros), which keeps the grid small. Strided convs take strided slices over the outputs [N, oh, ow] instead.
# Blocks keep the columns ~1 MiB, in cache: OpenBLAS runs these skinny gemms at half speed out of memory.

_CONV_BLOCK = 1 << 20  # bytes of columns per gemm
# ... and the im2col columns of conv2d and its weight gradient at most this many positions: with few rows (a 4x4
# kernel over 1 channel: 16) a block of 1 MiB held 16k positions, whose gemm result ([O, positions]) no longer fit
# in cache with them; OpenBLAS ran that [16, 16] @ [16, 8192] at half the speed of four blocks of 2048 (DCGAN's first
# layer; the col2im paths keep their larger blocks, whose Python loops cost more than the cache saves)
_CONV_BLOCK_POSITIONS = 2048
_CONV_COL2IM = 1 << 23  # conv2d_grad_input: the largest column buffer of its one-gemm col2im


def _conv_geom(a):
    (sh, sw), (ph, pw), (dh, dw) = (tuple(a.get(k, d)) for k, d in (("stride", (1, 1)), ("padding", (0, 0)),
                                                                      ("dilation", (1, 1))))
    return (sh, sw), (ph, pw), (dh, dw), a.get("groups", 1)


class _ConvGrid:
    """Where the positions of a conv2d with input [n, c, h, wd] and output [n, ., oh, ow] live (see above)."""

    def __init__(self, n: int, c: int, h: int, wd: int, kh: int, kw: int, oh: int, ow: int, a: dict, ct: np.dtype,
                 flat: bool | None = None):
        (sh, sw), (ph, pw), (dh, dw), self.groups = _conv_geom(a)
        self.oh, self.ow, self.ct = oh, ow, ct
        self.pad = (ph, pw)
        self.flat = sh == sw == 1 if flat is None else flat  # (False: windows over the outputs, stride 1 or not)
        if self.flat:  # ph zero rows between images (more where the outputs overhang the input), pw between rows
            self.hr, self.wr = h + max(ph, oh - h), wd + max(pw, ow - wd)
            self.hg, self.wg = self.hr, self.wr
            self.offs = [i * dh * self.wr + j * dw for i in range(kh) for j in range(kw)]
        else:
            self.hr, self.wr, self.hg, self.wg, self.offs = h + 2 * ph, wd + 2 * pw, oh, ow, [0]
            self.windows = _window_slices(((kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow)))
        self.extra = self.offs[-1]  # zeros after the grid, read by the last windows
        self.m = n * self.hg * self.wg

    def blocks(self, rows: int, most: int | None = None) -> list:
        """Position ranges whose columns (rows each) take about _CONV_BLOCK bytes, ``most`` positions at most; whole
        images when not flat."""
        per = max(min(_CONV_BLOCK // (rows * self.ct.itemsize), most or self.m), 1)
        img = self.hg * self.wg
        step = max(per, 256) if self.flat else max(per // img, 1) * img
        return [(s, min(s + step, self.m)) for s in range(0, self.m, step)]

    def padded(self, x: np.ndarray):
        """x [N, C, H, W] zero-padded into [C, n*hr*wr + extra], and its [C, N, hr, wr] view."""
        n, c, h, wd = x.shape
        (ph, pw), hr, wr = self.pad, self.hr, self.wr
        size = n * hr * wr
        if hr == h and wr == wd and not self.extra:
            buf = scratch_copy("pad", x.transpose(1, 0, 2, 3)).reshape(c, size)
            return buf, buf.reshape(c, n, hr, wr)
        buf = scratch_zeros("pad", (c, size + self.extra), self.ct)
        v = buf[:, :size].reshape(c, n, hr, wr)
        v[:, :, ph:ph + h, pw:pw + wd] = x.transpose(1, 0, 2, 3)
        return buf, v

    def out_grid(self, gy: np.ndarray, lead: int = 0) -> np.ndarray:
        """gy [N, O, oh, ow] at the output positions of [O, lead + m], zeros elsewhere."""
        n, o, oh, ow = gy.shape
        if not lead and self.hg == oh and self.wg == ow:
            return scratch_copy("grad", gy.transpose(1, 0, 2, 3)).reshape(o, self.m)
        buf = scratch_zeros("grad", (o, lead + self.m), self.ct)
        buf[:, lead:].reshape(o, n, self.hg, self.wg)[:, :, :oh, :ow] = gy.transpose(1, 0, 2, 3)
        return buf

    def cols(self, buf: np.ndarray, v, offs: list, s: int, e: int, cb: np.ndarray) -> np.ndarray:
        """The columns [rows * k, e - s] of positions s:e, in cb's memory: flat, buf [rows, .]'s slices shifted by
        offs (k = len(offs)); else the strided windows of v [rows, N, hr, wr] (k = kh*kw)."""
        b = e - s
        if self.flat:
            if len(offs) == 1:  # 1x1: the buffer itself
                return buf[:, s + offs[0]:e + offs[0]]
            cols = cb[:buf.shape[0] * len(offs) * b].reshape(buf.shape[0], len(offs), b)
            for t, off in enumerate(offs):
                cols[:, t] = buf[:, s + off:e + off]
            return cols.reshape(-1, b)
        oh, ow = self.oh, self.ow
        n0, n1 = s // (oh * ow), e // (oh * ow)
        cols = cb[:v.shape[0] * len(self.windows) * b].reshape(v.shape[0], len(self.windows), n1 - n0, oh, ow)
        for t, (r, q) in enumerate(self.windows):
            cols[:, t] = v[:, n0:n1, r, q]
        return cols.reshape(-1, b)


def _s2d_factor(a: dict, kh: int, kw: int) -> tuple[int, int] | None:
    """The stride ``(sh, sw)`` by which a flat-layout conv2d (or its weight gradient) with attributes ``a`` and a kh x
    kw kernel runs as the stride-1 conv of its input's space-to-depth, or None (stride 1, dilated, grouped, or a
    kernel that is not a multiple of the stride)."""
    (sh, sw), _, (dh, dw), groups = _conv_geom(a)
    if (sh, sw) == (1, 1) or (dh, dw) != (1, 1) or groups != 1 or kh % sh or kw % sw:
        return None
    return sh, sw


def _space_to_depth(x: np.ndarray, a: dict, oh: int, ow: int, kh: int, kw: int, ct: np.dtype) -> np.ndarray:
    """x [N, C, H, W] zero-padded by ``a``'s padding, as [N, C*sh*sw, hq, wq] with channel (c, pi, pj) at (p, q)
    holding the padded input at (p*sh + pi, q*sw + pj): the conv with stride (sh, sw) and kernel kh x kw is the
    stride-1 conv of this with kernel kh/sh x kw/sw (:func:`_s2d_weight`), whose outputs [:oh, :ow] are its own.
    A scratch buffer (slot ``s2d``)."""
    n, c, h, wd = x.shape
    (sh, sw), (ph, pw), _, _ = _conv_geom(a)
    hq, wq = oh + kh // sh - 1, ow + kw // sw - 1  # (the windows of the outputs: the rest of the input is unread)
    out = scratch_zeros("s2d", (c, sh, sw, n, hq, wq), ct).transpose(3, 0, 1, 2, 4, 5)  # (the grid's order)
    for pi in range(sh):
        p0 = -(-(ph - pi) // sh) if ph > pi else 0  # the first row p whose input row p*sh + pi - ph is >= 0
        p1 = min(hq, (h - 1 + ph - pi) // sh + 1)
        for pj in range(sw):
            q0 = -(-(pw - pj) // sw) if pw > pj else 0
            q1 = min(wq, (wd - 1 + pw - pj) // sw + 1)
            if p1 > p0 and q1 > q0:
                y0, x0 = p0 * sh + pi - ph, q0 * sw + pj - pw
                out[:, :, pi, pj, p0:p1, q0:q1] = x[:, :, y0:y0 + (p1 - p0 - 1) * sh + 1:sh,
                                                    x0:x0 + (q1 - q0 - 1) * sw + 1:sw]
    return out.reshape(n, c * sh * sw, hq, wq)  # (a view)


def _s2d_weight(w: np.ndarray, sh: int, sw: int) -> np.ndarray:
    """w [O, C, kh, kw] as the space-to-depth conv's [O, C*sh*sw, kh/sh, kw/sw] (see :func:`_space_to_depth`)."""
    o, c, kh, kw = w.shape
    return w.reshape(o, c, kh // sh, sh, kw // sw, sw).transpose(0, 1, 3, 5, 2, 4).reshape(o, c * sh * sw, kh // sh,
                                                                                          kw // sw)


def _s2d_weight_back(g: np.ndarray, sh: int, sw: int) -> np.ndarray:
    """The inverse of :func:`_s2d_weight`: a [O, C*sh*sw, kh/sh, kw/sw] gradient as [O, C, kh, kw]."""
    o, cs, qh, qw = g.shape
    return g.reshape(o, cs // (sh * sw), sh, sw, qh, qw).transpose(0, 1, 4, 2, 5, 3).reshape(o, cs // (sh * sw),
                                                                                           qh * sh, qw * sw)


_STRIDE_1 = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1}


def _conv_emit(y: np.ndarray, shape, dt: D.DType) -> np.ndarray:
    out = np.empty(shape, dt.np)
    out[...] = y  # one copy that transposes, crops and casts
    return out


def _input_column_blocks(gr, x: np.ndarray, k: int, ct):
    """``(start, stop, columns)`` of x's im2col columns, one cache-sized block of output positions at a time (the
    forward and the weight gradient read the same columns)."""
    buf, v = gr.padded(x)
    bl = gr.blocks(k, _CONV_BLOCK_POSITIONS)
    cb = scratch("cols", k * (bl[0][1] - bl[0][0]), ct)
    for s, e in bl:
        yield s, e, gr.cols(buf, v, gr.offs, s, e, cb)


# Taps that read only padding. Where the padding is as wide as the kernel's reach (a 3x3 kernel with padding 1 over
# a 1x1 input: ResNet's last stage on 28- or 32-pixel images), the kernel's outer taps multiply zeros for every output:
# the im2col paths computed them all, and the flat grid's padding besides (the 1x1 case did 36x the work, 7x torch's
# time). Such a conv is the conv of the taps that read the input (their hull, a sub-kernel) over the input window
# they read, without padding: a 1x1 input makes it a product ("dense").


class _TapCrop:
    """The sub-problem of a conv2d whose outer taps read only padding: kernel rows ``i0:i1`` and columns ``j0:j1``,
    over the input window of rows ``y0:y1`` and columns ``x0:x1`` (in input coordinates, partly outside the input
    where padding is still read), with no padding."""

    def __init__(self, rows: tuple, cols: tuple, win_rows: tuple, win_cols: tuple, a: dict):
        (self.i0, self.i1), (self.j0, self.j1) = rows, cols
        (self.y0, self.y1), (self.x0, self.x1) = win_rows, win_cols
        self.attrs = {**a, "padding": [0, 0]}

    def weight(self, w: np.ndarray) -> np.ndarray:
        """The sub-kernel, contiguous (gathered by the taps' flat indices: numpy's strided copy of runs of a few
        values took ~6x longer, 1.3 ms for a [512, 256, 3, 3] kernel's 2x2 corner)."""
        o, cg, kh, kw = w.shape
        if (self.i1 - self.i0) * (self.j1 - self.j0) == 1:
            return np.ascontiguousarray(w[:, :, self.i0:self.i1, self.j0:self.j1])
        return w.reshape(o, cg, kh * kw)[:, :, self._taps(kw)].reshape(o, cg, self.i1 - self.i0, self.j1 - self.j0)

    def _taps(self, kw: int) -> np.ndarray:
        """The sub-kernel's taps' flat indices in a kernel row of ``kw`` taps."""
        return np.add.outer(np.arange(self.i0, self.i1) * kw, np.arange(self.j0, self.j1)).ravel()

    def weight_back(self, g: np.ndarray, shape) -> np.ndarray:
        """The sub-kernel's gradient ``g`` in the whole kernel's ``shape`` (zeros for the taps that read padding)."""
        o, cg, kh, kw = shape
        out = np.zeros((o, cg, kh * kw), g.dtype)
        out[:, :, self._taps(kw)] = g.reshape(o, cg, -1)
        return out.reshape(shape)

    def window_shape(self, n: int, c: int) -> tuple:
        return (n, c, self.y1 - self.y0, self.x1 - self.x0)

    def _overlap(self, h: int, wd: int) -> tuple:
        """The input's rows and columns inside the window, and where they sit in it."""
        ya, yb, xa, xb = max(self.y0, 0), min(self.y1, h), max(self.x0, 0), min(self.x1, wd)
        return (slice(ya, yb), slice(xa, xb)), (slice(ya - self.y0, yb - self.y0), slice(xa - self.x0, xb - self.x0))

    def window(self, x: np.ndarray) -> np.ndarray:
        """x's window (zeros where it reaches past the input)."""
        n, c, h, wd = x.shape
        if self.y0 >= 0 and self.x0 >= 0 and self.y1 <= h and self.x1 <= wd:
            return x[:, :, self.y0:self.y1, self.x0:self.x1]
        out = np.zeros(self.window_shape(n, c), x.dtype)
        (ys, xs), (wy, wx) = self._overlap(h, wd)
        out[:, :, wy, wx] = x[:, :, ys, xs]
        return out

    def input_back(self, g: np.ndarray, shape) -> np.ndarray:
        """The window's gradient ``g`` in the input's ``shape`` (zeros where no tap reads)."""
        out = np.zeros(shape, g.dtype)
        (ys, xs), (wy, wx) = self._overlap(shape[2], shape[3])
        out[:, :, ys, xs] = g[:, :, wy, wx]
        return out


def _tap_hull(k: int, d: int, p: int, s: int, size: int, out: int) -> tuple[int, int] | None:
    """The first and last taps (end exclusive) along one dim of a kernel of ``k`` taps (dilation ``d``, padding
    ``p``, stride ``s``) that read the input (``size``) for some of the ``out`` outputs; None when none does."""
    def reads(i: int) -> bool:
        r0 = i * d - p  # the position tap i reads for output 0
        first = -(r0 // s) if r0 < 0 else 0  # the first output whose position is >= 0
        return first < out and r0 + first * s <= size - 1
    taps = [i for i in range(k) if reads(i)]
    return (taps[0], taps[-1] + 1) if taps else None


def _tap_crop(h: int, wd: int, kh: int, kw: int, oh: int, ow: int, a: dict) -> _TapCrop | None:
    """The :class:`_TapCrop` of a conv2d that has taps reading only padding, else None."""
    (sh, sw), (ph, pw), (dh, dw), _ = _conv_geom(a)
    if not (ph or pw):
        return None
    rows, cols = _tap_hull(kh, dh, ph, sh, h, oh), _tap_hull(kw, dw, pw, sw, wd, ow)
    if rows is None or cols is None or (rows == (0, kh) and cols == (0, kw)):
        return None  # (every tap reads the input; or none does: the output is the bias, as the paths below make it)
    y0, x0 = rows[0] * dh - ph, cols[0] * dw - pw
    y1 = (rows[1] - 1) * dh - ph + (oh - 1) * sh + 1
    x1 = (cols[1] - 1) * dw - pw + (ow - 1) * sw + 1
    return _TapCrop(rows, cols, (y0, y1), (x0, x1), a)


def _direct_width(out_width: int, kind: str) -> bool:
    """Whether outputs ``out_width`` wide suit the direct kernels' blocks for a ``kind`` of kernel (``"forward"``,
    ``"input gradient"``, ``"weight gradient"``: see :data:`_DIRECT_MIN_WIDTH`, :data:`_DIRECT_NARROWEST`)."""
    return out_width >= _DIRECT_MIN_WIDTH or _DIRECT_NARROWEST[kind] <= out_width <= 8


def _direct_takes(x: np.ndarray, geo: tuple, o: int, c: int) -> bool:
    """What the direct C kernels need of a conv, whatever its stride: float32, dilation 1, one group, at most
    :data:`_DIRECT_MAX_CHANNELS` channels in and out (``geo``: :func:`_conv_geom`'s)."""
    _, _, (dh, dw), groups = geo
    return x.dtype == np.float32 and (dh, dw, groups) == (1, 1, 1) and max(o, c) <= _DIRECT_MAX_CHANNELS


def _direct_fits(x: np.ndarray, geo: tuple, o: int, c: int, out_width: int, kind: str) -> bool:
    """Whether a stride-1 conv of ``x`` (``o`` output and ``c`` input channels, outputs ``out_width`` wide) runs on
    the blocked direct C kernels (``host_c.conv2d_direct``, ``conv2d_grad_weight_direct``), where they beat im2col +
    gemm: :func:`_direct_takes` and outputs of a width :func:`_direct_width` takes for the ``kind`` of kernel. The
    kernel may still decline: a small call, no C compiler."""
    return geo[0] == (1, 1) and _direct_takes(x, geo, o, c) and _direct_width(out_width, kind)


def _phases_fit(x: np.ndarray, geo: tuple, o: int, c: int, out_width: int) -> bool:
    """Whether a strided conv runs as stride-1 ones over its input's phases on the direct kernels
    (``conv_phases.py``): :func:`_direct_takes`, and outputs at least :data:`_DIRECT_MIN_WIDTH` wide (at 8 wide, a
    ResNet's 32 -> 64 downsampling ran its forward ~1.6x slower on the phases' small sub-kernels than on the gemms)."""
    return geo[0] != (1, 1) and _direct_takes(x, geo, o, c) and out_width >= _DIRECT_MIN_WIDTH


@kernel("conv2d")
def _conv2d(ins, a, shape, dt):
    ct = _compute(dt)
    x, w = _arr(ins[0], ct), _arr(ins[1], ct)
    o, cg, kh, kw = w.shape
    n, _, oh, ow = shape
    c = x.shape[1]
    b = _arr(ins[2], ct) if len(ins) > 2 else None
    if not (x.size and w.size):
        return _out(np.zeros(shape, ct) + (0 if b is None else b[:, None, None]), dt)
    if (cr := _tap_crop(x.shape[2], x.shape[3], kh, kw, oh, ow, a)) is not None:
        return _conv2d([cr.window(x), cr.weight(w), *ins[2:]], cr.attrs, shape, dt)
    geo = _conv_geom(a)
    if (_direct_fits(x, geo, o, c, ow, "forward") and (y := host_c.conv2d_direct(x, w, *geo[1])) is not None) or \
            (_phases_fit(x, geo, o, c, ow) and (y := conv_phases.forward(x, w, geo, oh, ow)) is not None):
        if b is not None:
            y += b[:, None, None]
        return _out(y, dt)
    layout = _layout(n, c, x.shape[2], x.shape[3], kh, kw, a)
    if layout == "dense":
        y = blas.matmul(x.reshape(n, -1), w.reshape(o, -1).T)
        if b is not None:
            y += b
        return _out(y.reshape(shape), dt)
    if layout == "channels_last":
        return _cl_conv2d(x, w, b, a, shape, dt, ct)
    if (f := _s2d_factor(a, kh, kw)) is not None:
        x, w, a = _space_to_depth(x, a, oh, ow, kh, kw, ct), _s2d_weight(w, *f), _STRIDE_1
        o, cg, kh, kw = w.shape
        c = cg
    gr = _ConvGrid(n, c, x.shape[2], x.shape[3], kh, kw, oh, ow, a, ct, False if f is not None else None)
    g = gr.groups
    wm = w.reshape(g, o // g, cg * kh * kw)
    y = scratch("out", (o, gr.m), ct)
    for s, e, cols in _input_column_blocks(gr, x, c * kh * kw, ct):
        blas.matmul(wm, cols.reshape(g, -1, e - s), out=y[:, s:e].reshape(g, o // g, e - s))
    if b is not None:
        y += b[:, None]
    return _conv_emit(y.reshape(o, n, gr.hg, gr.wg)[:, :, :oh, :ow].transpose(1, 0, 2, 3), shape, dt)


@kernel("conv2d_grad_weight")
def _conv2d_grad_weight(ins, a, shape, dt):
    ct = _compute(dt)
    x, gy = _arr(ins[0], ct), _arr(ins[1], ct)
    o, cg, kh, kw = shape
    n, c, h, wd = x.shape
    if not (x.size and gy.size):
        return np.zeros(shape, dt.np)
    if (cr := _tap_crop(h, wd, kh, kw, gy.shape[2], gy.shape[3], a)) is not None:
        sub = (o, cg, cr.i1 - cr.i0, cr.j1 - cr.j0)
        return cr.weight_back(_conv2d_grad_weight([cr.window(x), gy], cr.attrs, sub, dt), shape)
    geo = _conv_geom(a)
    if _direct_fits(x, geo, o, c, gy.shape[3], "weight gradient") and \
            (gw := host_c.conv2d_grad_weight_direct(x, gy, kh, kw, *geo[1])) is not None:
        return _out(gw, dt)
    if _phases_fit(x, geo, o, c, gy.shape[3]) and \
            (gw := conv_phases.grad_weight(x, gy, geo, shape)) is not None:
        return _out(gw, dt)
    layout = _layout(n, c, h, wd, kh, kw, a)
    if layout == "dense":
        return _out(blas.matmul(gy.reshape(n, o).T, x.reshape(n, -1)).reshape(shape), dt)
    if layout == "channels_last":
        return _cl_conv2d_grad_weight(x, gy, a, shape, dt, ct)
    f = _s2d_factor(a, kh, kw)
    if f is not None:
        x, a = _space_to_depth(x, a, gy.shape[2], gy.shape[3], kh, kw, ct), _STRIDE_1
        n, c, h, wd = x.shape
        kh, kw = kh // f[0], kw // f[1]
    gr = _ConvGrid(n, c, h, wd, kh, kw, gy.shape[2], gy.shape[3], a, ct, False if f is not None else None)
    g = gr.groups
    gm = gr.out_grid(gy)
    acc = None  # cols @ gy^T [G, cg*kh*kw, O/G]: OpenBLAS's faster orientation
    for s, e, cols in _input_column_blocks(gr, x, c * kh * kw, ct):
        t = blas.matmul(cols.reshape(g, -1, e - s), gm[:, s:e].reshape(g, o // g, e - s).transpose(0, 2, 1))
        acc = t if acc is None else np.add(acc, t, out=acc)
    gw = acc.transpose(0, 2, 1).reshape(o, c // g, kh, kw)
    return _out(np.ascontiguousarray(_s2d_weight_back(gw, *f)) if f is not None else gw.reshape(shape), dt)


@kernel("conv2d_grad_input")
def _conv2d_grad_input(ins, a, shape, dt):
    ct = _compute(dt)
    gy, w = _arr(ins[0], ct), _arr(ins[1], ct)
    o, cg, kh, kw = w.shape
    n, c, h, wd = shape
    oh, ow = gy.shape[2:]
    if not (gy.size and w.size):
        return np.zeros(shape, dt.np)
    if (cr := _tap_crop(h, wd, kh, kw, oh, ow, a)) is not None:
        return cr.input_back(_conv2d_grad_input([gy, cr.weight(w)], cr.attrs, cr.window_shape(n, c), dt), shape)
    geo = _conv_geom(a)
    if c >= _PHASES_MIN_GRAD_CHANNELS and _phases_fit(gy, geo, o, c, ow) and \
            (gx := conv_phases.grad_input(gy, w, geo, shape)) is not None:
        return _out(gx, dt)
    ph, pw = geo[1]
    if kh - 1 - ph >= 0 and kw - 1 - pw >= 0 and _direct_fits(gy, geo, o, c, wd, "input gradient"):
        # (a stride-1 conv's input gradient: gy's conv with w flipped and transposed, padding k - 1 - p)
        flipped = np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
        if (gx := host_c.conv2d_direct(gy, flipped, kh - 1 - ph, kw - 1 - pw)) is not None:
            return _out(gx, dt)
    layout = _layout(n, c, h, wd, kh, kw, a)
    if layout == "dense":
        return _out(blas.matmul(gy.reshape(n, o), w.reshape(o, -1)).reshape(shape), dt)
    if layout == "channels_last":
        return _cl_conv2d_grad_input(gy, w, a, shape, dt, ct)
    gr = _ConvGrid(n, c, h, wd, kh, kw, oh, ow, a, ct)
    g, og, kk = gr.groups, o // gr.groups, kh * kw
    (ph, pw), hr, wr, m = gr.pad, gr.hr, gr.wr, gr.m
    L = m + gr.extra
    if gr.flat and (cg == 1 or kk * cg * L * ct.itemsize <= _CONV_COL2IM):
        # col2im on the flat grid, a group at a time: its columns w^T @ gy [kh*kw, C/G, L] in one gemm, the rows
        # padded with zeros to the accumulator's channel stride L, so each kernel position's are added at their shift
        # by ONE 1-D add (the zero tails land in the next channel's padding); numpy adds strided 2-D views ~4x slower
        gm = gr.out_grid(gy)
        acc = scratch_zeros("acc", c * L + gr.extra, ct)
        cols = scratch("cols", (kk, cg, L), ct)
        cols[:, :, m:] = 0
        wt = w.transpose(2, 3, 1, 0).reshape(kk * cg, o)  # rows (i, j, c)
        for gi in range(g):
            blas.matmul(wt[:, gi * og:(gi + 1) * og], gm[gi * og:(gi + 1) * og], out=cols.reshape(kk * cg, L)[:, :m])
            for t, off in enumerate(gr.offs):
                acc[gi * cg * L + off:(gi + 1) * cg * L + off] += cols[t].reshape(-1)
        v = acc[:c * L].reshape(c, L)[:, :m].reshape(c, n, hr, wr)
    elif gr.flat:
        # too big for that: the transposed conv as a conv in position blocks, input position p getting
        # w[o, c, i, j] * gy[o, p - off_ij]: the columns are shifted slices of gy's grid led by `extra` zeros
        gb = gr.out_grid(gy, gr.extra)
        wc = w.reshape(g, og, cg, kk).transpose(0, 2, 1, 3).reshape(g, cg, og * kk)
        offs = [gr.extra - off for off in gr.offs]
        y = scratch("out", (c, m), ct)
        bl = gr.blocks(o * kk)
        cb = scratch("cols", o * kk * (bl[0][1] - bl[0][0]), ct)
        for s, e in bl:
            cols = gr.cols(gb, None, offs, s, e, cb)
            blas.matmul(wc, cols.reshape(g, -1, e - s), out=y[:, s:e].reshape(g, cg, e - s))
        v = y.reshape(c, n, hr, wr)
    else:
        # col2im: the columns w^T @ gy [G, C/G*kh*kw, b] of whole images, each kernel position's added at its
        # strided place
        gm = gr.out_grid(gy)
        wt = w.reshape(g, og, cg * kk).transpose(0, 2, 1)
        v = scratch_zeros("acc", (c, n, hr, wr), ct)
        for s, e in gr.blocks(c * kk):
            n0, n1 = s // (oh * ow), e // (oh * ow)
            cols = blas.matmul(wt, gm[:, s:e].reshape(g, og, e - s), out=scratch("cols", (g, cg * kk, e - s), ct))
            cols = cols.reshape(c, kk, n1 - n0, oh, ow)
            for t, (r, q) in enumerate(gr.windows):
                v[:, n0:n1, r, q] += cols[:, t]
    return _conv_emit(v[:, :, ph:ph + h, pw:pw + wd].transpose(1, 0, 2, 3), shape, dt)
