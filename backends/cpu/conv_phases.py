"""Strided convolutions as sums of stride-1 ones over the phases of the input, so that the direct C kernels
(``host_c.conv2d_direct``, ``host_c.conv2d_grad_weight_direct``) run them.

At stride ``s`` a kernel tap ``i = s*q + r`` only ever reads padded input rows ``s*(y + q) + r``: the rows of residue
``r``, the *phase* ``x[r::s]``, read at stride 1 by the sub-kernel ``w[r::s]`` (``ceil((k - r) / s)`` taps). So, per
row and column residue (a ResNet's 3x3 stride-2 conv: sub-kernels 2x2, 2x1, 1x2 and 1x1, nine taps in all):

* the forward is the sum of the stride-1 convs of the phases with their sub-kernels (the kernel adds each after the
  first into the output);
* the input gradient of phase ``(r, t)`` is the full stride-1 correlation of the output gradient with that
  sub-kernel flipped and transposed (padding ``taps - 1``), written to the input positions of that residue: the
  phases tile the input, so every position is written once (positions no window reads stay zero);
* the weight gradient of the taps of residue ``(r, t)`` is the stride-1 weight gradient of the phase and the output
  gradient.

Every multiply-add of the three is one of the strided conv's (im2col with a stride copies kh*kw strided windows, and
its col2im adds them back one kernel position at a time: ResNet's downsampling 3x3 convs ran their input gradient at
~13 GFLOP/s there). ``conv._phases_fit`` says which convs come here; each function returns None where the kernels
decline (a small call, no C compiler), and the caller runs the gemms.
"""

from __future__ import annotations

import numpy as np

from . import host_c

#: bytes of phases a call splits the input into at once (a chunk of images; the kernels' scratch keeps them)
PHASE_BYTES = 16 << 20


def _taps(k: int, s: int, r: int) -> int:
    """The taps ``r, r + s, ...`` below ``k``: the sub-kernel of residue ``r`` along an axis (kernel ``k``, stride
    ``s``)."""
    return (k - r + s - 1) // s


def _inside(r: int, s: int, p: int, size: int, reach: int) -> tuple[int, int]:
    """Along one axis (stride ``s``, padding ``p``, input ``size``): the first index ``m`` of residue ``r``'s phase
    whose padded position ``s*m + r`` is inside the input, and how many from there are, below ``reach``."""
    first = max(0, -((r - p) // s))  # (ceil((p - r) / s), at least 0)
    end = min(reach, -(-(size + p - r) // s))
    return first, end - first


def _image_chunks(n: int, per_image: int):
    """``(first, stop)`` image ranges whose phases take at most :data:`PHASE_BYTES` (at least one image each)."""
    step = max(1, PHASE_BYTES // max(per_image, 1))
    return [(s, min(s + step, n)) for s in range(0, n, step)]


def forward(x: np.ndarray, w: np.ndarray, a: tuple, oh: int, ow: int) -> np.ndarray | None:
    """``conv2d(x, w)`` [N, O, oh, ow] at the strides of ``a``, as the sum over the phases (a chunk of images at a
    time)."""
    (sh, sw), (ph, pw), _, _ = a
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    if not host_c.direct_ready(x):
        return None
    th, tw = _taps(kh, sh, 0), _taps(kw, sw, 0)
    rows, width = host_c.direct_extent(oh, ow, th, tw)
    y = np.empty((n, o, oh, ow), np.float32)
    for s, e in _image_chunks(n, sh * sw * c * rows * width * 4):
        ps = host_c.phase_split(x[s:e], sh, sw, ph, pw, rows, width)
        for k, (rh, rw) in enumerate((rh, rw) for rh in range(min(sh, kh)) for rw in range(min(sw, kw))):
            host_c.direct_on(ps[rh * sw + rw], w[:, :, rh::sh, rw::sw], oh, ow, y[s:e], add=k > 0)
    return y


def grad_input(gy: np.ndarray, w: np.ndarray, a: tuple, shape: tuple) -> np.ndarray | None:
    """The input gradient ``shape`` [N, C, H, W] of a strided conv, phase by phase: each phase's full correlation of
    ``gy`` with its sub-kernel flipped, read from one copy of ``gy`` padded for the largest sub-kernel."""
    (sh, sw), (ph, pw), _, _ = a
    _, _, kh, kw = w.shape
    n, o, oh, ow = gy.shape
    h, wd = shape[2:]
    if not host_c.direct_ready(gy):
        return None
    th, tw = _taps(kh, sh, 0), _taps(kw, sw, 0)
    # per phase: its sub-kernel flipped; its output, the input positions of its residue that are not padding as far
    # as the full correlation reaches (from (m0, v0) of the phase's grid, rows x cols); where its view of gy padded
    # by (th - 1, tw - 1) starts, and how far the kernel reads from there
    plan = []
    rows_in, cols_in = oh + 2 * th - 2, ow + 2 * tw - 2
    for rh in range(min(sh, kh)):
        for rw in range(min(sw, kw)):
            sub = w[:, :, rh::sh, rw::sw].transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
            i, j = sub.shape[2:]
            (m0, rows), (v0, cols) = _inside(rh, sh, ph, h, oh + i - 1), _inside(rw, sw, pw, wd, ow + j - 1)
            if rows > 0 and cols > 0:
                r0, c0 = th - i + m0, tw - j + v0
                reach_r, reach_c = host_c.direct_extent(rows, cols, i, j)
                rows_in, cols_in = max(rows_in, r0 + reach_r), max(cols_in, c0 + reach_c)
                plan.append((rh * sw + rw, sub, (m0, v0), (rows, cols), (r0, c0)))
    gp = host_c.placed(gy, th - 1, tw - 1, rows_in, cols_in)
    parts: list = [None] * (sh * sw)
    for p, sub, first, (rows, cols), (r0, c0) in plan:
        parts[p] = first, host_c.direct_on(gp[:, :, r0:, c0:], sub, rows, cols)
    return host_c.phase_merge(parts, shape, sh, sw, ph, pw)


def grad_weight(x: np.ndarray, gy: np.ndarray, a: tuple, shape: tuple) -> np.ndarray | None:
    """The weight gradient ``shape`` [O, C, kh, kw] of a strided conv, its taps a residue at a time (a chunk of
    images at a time, the sums float64 across them)."""
    (sh, sw), (ph, pw), _, _ = a
    o, c, kh, kw = shape
    n = x.shape[0]
    oh, ow = gy.shape[2:]
    if not host_c.direct_ready(x):
        return None
    th, tw = _taps(kh, sh, 0), _taps(kw, sw, 0)
    rows, width = oh + th - 1, host_c.wgrad_row(ow) + tw - 1
    g8 = host_c.rows8(gy)
    sums: dict = {}
    for s, e in _image_chunks(n, sh * sw * c * rows * width * 4):
        ps = host_c.phase_split(x[s:e], sh, sw, ph, pw, rows, width)
        for rh in range(min(sh, kh)):
            for rw in range(min(sw, kw)):
                sums[rh, rw] = host_c.grad_weight_on(ps[rh * sw + rw], g8[s:e], _taps(kh, sh, rh), _taps(kw, sw, rw),
                                                     ow, sums.get((rh, rw)))
    gw = np.empty(shape, np.float32)
    for (rh, rw), part in sums.items():
        gw[:, :, rh::sh, rw::sw] = part
    return gw
