"""numpy references for the sliding-window composites: the output length of a window, ``im2col``,
``conv2d`` and its input and weight gradients, ``max_pool2d`` and its gradient, ``avg_pool2d``."""

from __future__ import annotations

import numpy as np


def _pool_len(n, k, s, p, d, ceil):
    """torch's output length of a sliding window (ceil_mode: a last window may start in the padding
    on the left/inside, never entirely in the right padding)."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def _im2col_ref(x, kernel, stride=(1, 1), padding=(0, 0), dilation=(1, 1)):
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh, ow = _pool_len(h, kh, sh, ph, dh, False), _pool_len(w, kw, sw, pw, dw, False)
    xp = np.zeros((n, c, h + 2 * ph, w + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + w] = x
    out = np.zeros((n, c, kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            for a in range(oh):
                for b in range(ow):
                    out[:, :, i, j, a, b] = xp[:, :, a * sh + i * dh, b * sw + j * dw]
    return out.reshape(n, c * kh * kw, oh * ow)


def _conv2d_ref(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh, ow = _pool_len(h, kh, sh, ph, dh, False), _pool_len(wd, kw, sw, pw, dw, False)
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for oc in range(o):
        grp = oc // og
        for a in range(oh):
            for b in range(ow):
                patch = xp[:, grp * cg:(grp + 1) * cg, a * sh:a * sh + dh * (kh - 1) + 1:dh,
                           b * sw:b * sw + dw * (kw - 1) + 1:dw]
                out[:, oc, a, b] = np.sum(patch * w[oc], axis=(1, 2, 3))
    return out


def _conv2d_grads_ref(x, w, gy, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """(input gradient, weight gradient) of _conv2d_ref's conv2d given its output gradient gy, window by window."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    gxp = np.zeros_like(xp)
    gw = np.zeros(w.shape)
    og = o // groups
    for oc in range(o):
        grp = oc // og
        for a in range(gy.shape[2]):
            for b in range(gy.shape[3]):
                win = (slice(None), slice(grp * cg, (grp + 1) * cg), slice(a * sh, a * sh + dh * (kh - 1) + 1, dh),
                       slice(b * sw, b * sw + dw * (kw - 1) + 1, dw))
                gxp[win] += gy[:, oc, a, b][:, None, None, None] * w[oc]
                gw[oc] += np.tensordot(gy[:, oc, a, b], xp[win], axes=(0, 0))
    return gxp[:, :, ph:ph + h, pw:pw + wd], gw

def _max_pool_grad_ref(x, gy, kernel, stride, padding, dilation, ceil_mode):
    """max_pool2d's input gradient, window by window: each window's gradient goes to its first maximum (or first
    NaN) among the positions inside the input."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    gx = np.zeros(x.shape)
    for a in range(gy.shape[2]):
        for b in range(gy.shape[3]):
            pos = [(a * sh - ph + i * dh, b * sw - pw + j * dw) for i in range(kh) for j in range(kw)]
            pos = [(r, q) for r, q in pos if 0 <= r < h and 0 <= q < w]
            idx = np.argmax(np.stack([x[:, :, r, q] for r, q in pos]), axis=0)
            for k, (r, q) in enumerate(pos):
                gx[:, :, r, q] += np.where(idx == k, gy[:, :, a, b], 0.0)
    return gx


def _pool_ref(x, kind, kernel, stride=None, padding=(0, 0), dilation=(1, 1), ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    n, c, h, w = x.shape
    (kh, kw), (ph, pw), (dh, dw) = kernel, padding, dilation
    sh, sw = stride or kernel
    oh, ow = _pool_len(h, kh, sh, ph, dh, ceil_mode), _pool_len(w, kw, sw, pw, dw, ceil_mode)
    out = np.zeros((n, c, oh, ow))
    for a in range(oh):
        for b in range(ow):
            if kind == "max":
                rows = [a * sh - ph + i * dh for i in range(kh)]
                cols = [b * sw - pw + j * dw for j in range(kw)]
                vals = [x[:, :, r, q] for r in rows for q in cols if 0 <= r < h and 0 <= q < w]
                out[:, :, a, b] = np.max(vals, axis=0)
                continue
            h0, w0 = a * sh - ph, b * sw - pw  # torch's avg_pool2d window arithmetic
            h1, w1 = min(h0 + kh, h + ph), min(w0 + kw, w + pw)
            size = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
            total = x[:, :, h0:h1, w0:w1].sum(axis=(2, 3))
            div = divisor_override or (size if count_include_pad else (h1 - h0) * (w1 - w0))
            out[:, :, a, b] = total / div
    return out



