"""Convolution and pooling composites of ``tw.nn.functional``: window geometry, im2col, conv2d, conv2d's gradients and
max/avg pooling.

conv2d's gradients (its VJP rule records one op per input, where differentiating the im2col decomposition records
~40): composites, so every backend runs them through these decompositions (im2col / matmul / setslice) and they stay
differentiable (double backward); the CPU backend has native kernels.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from ..errors import DTypeError, ProtocolError, ShapeError
from ..shapes import check_shape
from .attrs import a_bool, a_int, a_ints
from .table import _scalar, composite


def _pair_attr(attrs, key, default):
    v = a_ints(attrs, key, default)
    if len(v) != 2:
        raise ProtocolError(f"attribute {key!r} must hold 2 ints, got {list(v)}")
    return v


def _window_out(n: int, k: int, s: int, p: int, d: int, ceil: bool = False) -> int:
    """Output length of a sliding window (torch's formula, ceil_mode included)."""
    if k < 1 or s < 1 or d < 1 or p < 0:
        raise ShapeError(f"window: kernel {k}, stride {s}, padding {p} and dilation {d} are invalid")
    span = n + 2 * p - d * (k - 1) - 1
    if span < 0:
        raise ShapeError(f"window: input size {n} (padded {n + 2 * p}) is smaller than the kernel extent "
                         f"{d * (k - 1) + 1}")
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def _window_geometry(shape, attrs, ceil=False):
    kh, kw = _pair_attr(attrs, "kernel", None)
    sh, sw = _pair_attr(attrs, "stride", [kh, kw])
    ph, pw = _pair_attr(attrs, "padding", [0, 0])
    dh, dw = _pair_attr(attrs, "dilation", [1, 1])
    if len(shape) != 4:
        raise ShapeError(f"expected a 4-D input (N, C, H, W), got shape {list(shape)}")
    oh = _window_out(shape[2], kh, sh, ph, dh, ceil)
    ow = _window_out(shape[3], kw, sw, pw, dw, ceil)
    return (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow)


def _padded_size(geom, h: int, w: int) -> tuple[int, int]:
    """Height and width of an h x w input as the windows read it: torch's padding on both sides, and more on the
    high side where ceil_mode's last window runs past that."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow) = geom
    return max(h + 2 * ph, (oh - 1) * sh + dh * (kh - 1) + 1), max(w + 2 * pw, (ow - 1) * sw + dw * (kw - 1) + 1)


def _window_slices(geom) -> list[tuple[slice, slice]]:
    """The (row, column) slices of the padded input that each kernel position reads, row-major over the kernel
    (torch's order): its value at every output position."""
    (kh, kw), (sh, sw), _, (dh, dw), (oh, ow) = geom
    return [(slice(i * dh, i * dh + (oh - 1) * sh + 1, sh), slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))
            for i in range(kh) for j in range(kw)]


def _windows(g, x, geom, value=0.0):
    """The kh*kw strided slices [N, C, oh, ow] of x padded with `value` (one per kernel position)."""
    _, (sh, sw), (ph, pw), _, (oh, ow) = geom
    n, c, h, w = x.shape
    hp, wp = _padded_size(geom, h, w)
    if (hp, wp) != (h, w):
        x = g.op("pad", x, pads=[0, 0, 0, 0, ph, hp - h - ph, pw, wp - w - pw], value=value)
    out = []
    for r, q in _window_slices(geom):
        if (oh, ow) == (hp, wp) and (r.start, q.start) == (0, 0) and (sh, sw) == (1, 1):
            out.append(x)
            continue
        out.append(g.op("slice", x, starts=[0, 0, r.start, q.start], stops=[n, c, r.stop, q.stop],
                        steps=[1, 1, sh, sw]))
    return out


def _window_max(g, ws):
    """The elementwise maximum of the windows (a NaN propagates)."""
    out = ws[0]
    for v in ws[1:]:
        out = g.op("maximum", out, v)
    return out


def _im2col_infer(metas, attrs):
    (s, d), = metas
    (kh, kw), _, _, _, (oh, ow) = _window_geometry(s, {"stride": [1, 1], **attrs})  # torch's unfold: stride 1
    return check_shape((s[0], s[1] * kh * kw, oh * ow)), d


@composite("im2col", 1, _im2col_infer, attrs=("kernel", "stride", "padding", "dilation"))
def _im2col(g, x, attrs):
    """torch's F.unfold: [N, C, H, W] -> [N, C*kh*kw, L] (rows ordered channel, then kernel row, then column)."""
    geom = _window_geometry(x.shape, {"stride": [1, 1], **attrs})
    (kh, kw), _, _, _, (oh, ow) = geom
    n, c = x.shape[0], x.shape[1]
    cols = [g.op("reshape", v, shape=[n, c, 1, oh * ow]) for v in _windows(g, x, geom)]
    stacked = cols[0] if len(cols) == 1 else g.op("cat", *cols, dim=2)
    return g.op("reshape", stacked, shape=[n, c * kh * kw, oh * ow])


def _conv2d_infer(metas, attrs):
    if len(metas) not in (2, 3):
        raise ProtocolError(f"op conv2d takes 2 or 3 inputs (input, weight[, bias]), got {len(metas)}")
    (s, d), (sw_, dw_) = metas[0], metas[1]
    groups = a_int(attrs, "groups", 1)
    if len(sw_) != 4:
        raise ShapeError(f"conv2d: expected a 4-D weight (out, in/groups, kh, kw), got {list(sw_)}")
    if len(s) != 4:
        raise ShapeError(f"conv2d: expected a 4-D input (N, C, H, W), got {list(s)}")
    if d is not dw_:
        raise DTypeError(f"conv2d: input type ({d.name}) and weight type ({dw_.name}) should be the same")
    if groups < 1 or s[1] % groups or sw_[0] % groups or s[1] // groups != sw_[1]:
        raise ShapeError(f"conv2d: expected input{list(s)} to have {sw_[1] * groups} channels (weight {list(sw_)}, "
                         f"groups={groups}), but got {s[1]} channels instead")
    if len(metas) == 3:
        sb, db = metas[2]
        if tuple(sb) != (sw_[0],):
            raise ShapeError(f"conv2d: expected a bias of shape {[sw_[0]]}, got {list(sb)}")
        if db is not d:
            raise DTypeError(f"conv2d: input type ({d.name}) and bias type ({db.name}) should be the same")
    geom_attrs = {**attrs, "kernel": list(sw_[2:]), "stride": attrs.get("stride", [1, 1])}
    _, _, _, _, (oh, ow) = _window_geometry(s, geom_attrs)
    return check_shape((s[0], sw_[0], oh, ow)), d


@composite("conv2d", None, _conv2d_infer, attrs=("stride", "padding", "dilation", "groups"))
def _conv2d(g, x, w, *rest):
    """Cross-correlation as torch's conv2d: im2col, then a (grouped) matmul with the weight (+ the bias [O] per
    output channel)."""
    *b, attrs = rest
    o, cg, kh, kw = w.shape
    groups = a_int(attrs, "groups", 1)
    ia = {"kernel": [kh, kw], "stride": list(attrs.get("stride", [1, 1])),
          "padding": list(attrs.get("padding", [0, 0])), "dilation": list(attrs.get("dilation", [1, 1]))}
    n = x.shape[0]
    cols = g.op("im2col", x, **ia)  # [N, C*kh*kw, L]
    L = cols.shape[2]
    (_, _, _, _, (oh, ow)) = _window_geometry(x.shape, ia)
    k = cg * kh * kw
    if groups == 1:
        y = g.op("matmul", g.op("reshape", w, shape=[o, k]), cols)  # [N, O, L]
    else:
        cols = g.op("reshape", cols, shape=[n, groups, k, L])
        y = g.op("matmul", g.op("reshape", w, shape=[groups, o // groups, k]), cols)  # [N, G, O/G, L]
    y = g.op("reshape", y, shape=[n, o, oh, ow])
    return g.op("add", y, g.op("reshape", b[0], shape=[1, o, 1, 1])) if b else y

# conv2d's gradients (its VJP rule records one op per input, where differentiating the im2col decomposition records
# ~40): composites, so every backend runs them through these decompositions (im2col / matmul / setslice) and they
# stay differentiable (double backward); the CPU backend has native kernels.

def _conv_grad_check(what, sx, sw_, sg, attrs, dts):
    """(kernel, stride, padding, dilation, groups, (oh, ow)) of the conv2d with input shape sx, weight shape sw_ and
    output shape sg, after checking that they fit together."""
    groups = a_int(attrs, "groups", 1)
    if any(not d.is_floating_point for d in dts) or any(d is not dts[0] for d in dts):
        raise DTypeError(f"{what}: expected floating inputs of one dtype, got {[d.name for d in dts]}")
    if len(sx) != 4 or len(sw_) != 4 or len(sg) != 4:
        raise ShapeError(f"{what}: expected 4-D shapes, got input {list(sx)}, weight {list(sw_)}, grad {list(sg)}")
    if groups < 1 or sx[1] % groups or sw_[0] % groups or sx[1] // groups != sw_[1]:
        raise ShapeError(f"{what}: input {list(sx)} and weight {list(sw_)} do not fit groups={groups}")
    ia = {"kernel": [sw_[2], sw_[3]], "stride": list(_pair_attr(attrs, "stride", [1, 1])),
          "padding": list(_pair_attr(attrs, "padding", [0, 0])),
          "dilation": list(_pair_attr(attrs, "dilation", [1, 1]))}
    _, _, _, _, (oh, ow) = _window_geometry(sx, ia)
    if tuple(sg) != (sx[0], sw_[0], oh, ow):
        raise ShapeError(f"{what}: expected an output gradient of shape {[sx[0], sw_[0], oh, ow]}, got {list(sg)}")
    return ia, groups, (oh, ow)


def _conv_grad_input_infer(metas, attrs):
    (sg, dg), (sw_, dw_) = metas
    h, w = _pair_attr(attrs, "input_size", None)
    sx = (sg[0] if len(sg) == 4 else 0, (sw_[1] if len(sw_) == 4 else 0) * a_int(attrs, "groups", 1), h, w)
    _conv_grad_check("conv2d_grad_input", sx, sw_, sg, attrs, (dg, dw_))
    return check_shape(sx), dg


def _conv_grad_weight_infer(metas, attrs):
    (sx, dx), (sg, dg) = metas
    kh, kw = _pair_attr(attrs, "kernel", None)
    groups = a_int(attrs, "groups", 1)
    sw_ = (sg[1] if len(sg) == 4 else 0, sx[1] // max(groups, 1) if len(sx) == 4 else 0, kh, kw)
    _conv_grad_check("conv2d_grad_weight", sx, sw_, sg, attrs, (dx, dg))
    return check_shape(sw_), dx


@composite("conv2d_grad_input", 2, _conv_grad_input_infer,
           attrs=("stride", "padding", "dilation", "groups", "input_size"))
def _conv2d_grad_input(g, gy, w, attrs):
    """The gradient of conv2d with respect to its input [N, C, H, W] (H, W = input_size), given the output gradient
    gy [N, O, oh, ow] and the weight: the columns W^T @ gy, each kernel position's [N, C, oh, ow] slice added at
    its strided place in the padded input (col2im), the padding cropped."""
    o, cg, kh, kw = w.shape
    h, wd = _pair_attr(attrs, "input_size", None)
    n = gy.shape[0]
    ia, groups, (oh, ow) = _conv_grad_check("conv2d_grad_input", (n, cg * a_int(attrs, "groups", 1), h, wd), w.shape,
                                            gy.shape, attrs, (gy.dtype, w.dtype))
    (sh, sw), (ph, pw), (dh, dw) = ia["stride"], ia["padding"], ia["dilation"]
    c, k = cg * groups, cg * kh * kw
    wt = g.op("permute", g.op("reshape", w, shape=[groups, o // groups, k]), dims=[0, 2, 1])  # [G, k, O/G]
    cols = g.op("matmul", wt, g.op("reshape", gy, shape=[n, groups, o // groups, oh * ow]))  # [N, G, k, L]
    cols = g.op("reshape", cols, shape=[n, c, kh, kw, oh, ow])
    hp, wp = h + 2 * ph, wd + 2 * pw
    zero = g.op("expand", _scalar(g, 0, gy.dtype), shape=[n, c, hp, wp])
    out = None
    for i in range(kh):
        for j in range(kw):
            piece = g.op("reshape", g.op("slice", cols, starts=[0, 0, i, j, 0, 0], stops=[n, c, i + 1, j + 1, oh, ow],
                                         steps=[1] * 6), shape=[n, c, oh, ow])
            a, b = i * dh, j * dw
            placed = g.op("setslice", zero, piece, starts=[0, 0, a, b],
                          stops=[n, c, a + (oh - 1) * sh + 1, b + (ow - 1) * sw + 1], steps=[1, 1, sh, sw])
            out = placed if out is None else g.op("add", out, placed)
    if ph or pw:
        out = g.op("slice", out, starts=[0, 0, ph, pw], stops=[n, c, ph + h, pw + wd], steps=[1, 1, 1, 1])
    return out


@composite("conv2d_grad_weight", 2, _conv_grad_weight_infer,
           attrs=("stride", "padding", "dilation", "groups", "kernel"))
def _conv2d_grad_weight(g, x, gy, attrs):
    """The gradient of conv2d with respect to its weight [O, C/groups, kh, kw] (kh, kw = kernel), given the input x
    and the output gradient gy: gy @ im2col(x)^T per group, summed over the batch."""
    n, c = x.shape[0], x.shape[1]
    o = gy.shape[1]
    kh, kw = _pair_attr(attrs, "kernel", None)
    groups = a_int(attrs, "groups", 1)
    cg = c // groups
    ia, _, (oh, ow) = _conv_grad_check("conv2d_grad_weight", x.shape, (o, cg, kh, kw), gy.shape, attrs,
                                       (x.dtype, gy.dtype))
    cols = g.op("im2col", x, **ia)  # [N, C*kh*kw, L]
    k, L = cg * kh * kw, oh * ow
    cols = g.op("reshape", g.op("permute", g.op("reshape", cols, shape=[n, groups, k, L]), dims=[1, 0, 3, 2]),
                shape=[groups, n * L, k])
    gm = g.op("reshape", g.op("permute", g.op("reshape", gy, shape=[n, groups, o // groups, L]), dims=[1, 2, 0, 3]),
              shape=[groups, o // groups, n * L])
    return g.op("reshape", g.op("matmul", gm, cols), shape=[o, cg, kh, kw])



def _pool_infer(metas, attrs):
    (s, d), = metas
    a_bool(attrs, "ceil_mode", False)
    geom = _window_geometry(s, attrs, a_bool(attrs, "ceil_mode", False))
    (kh, kw), _, (ph, pw), _, (oh, ow) = geom
    if ph * 2 > kh or pw * 2 > kw:
        raise ShapeError(f"pad should be at most half of effective kernel size, but got pad={[ph, pw]}, "
                         f"kernel_size={[kh, kw]}")
    return (s[0], s[1], oh, ow), d


def _lowest(dt: D.DType):
    if dt.is_floating_point:
        return -math.inf
    if dt is D.bool_:
        return False
    return int(np.iinfo(dt.np).min)


@composite("max_pool2d", 1, _pool_infer, attrs=("kernel", "stride", "padding", "dilation", "ceil_mode"))
def _max_pool2d(g, x, attrs):
    """Elementwise maximum over the kh*kw strided windows (padding is -inf, as torch)."""
    geom = _window_geometry(x.shape, attrs, a_bool(attrs, "ceil_mode", False))
    return _window_max(g, _windows(g, x, geom, _lowest(x.dtype)))


def _max_pool_grad_infer(metas, attrs):
    (sx, dx), (sg, dg) = metas
    if not dx.is_floating_point or dg is not dx:
        raise DTypeError(f"max_pool2d_grad: expected a floating input and an output gradient of its dtype, got "
                         f"{dx.name} and {dg.name}")
    sy, _ = _pool_infer([(sx, dx)], attrs)
    if tuple(sg) != tuple(sy):
        raise ShapeError(f"max_pool2d_grad: expected an output gradient of shape {list(sy)}, got {list(sg)}")
    return tuple(sx), dx


@composite("max_pool2d_grad", 2, _max_pool_grad_infer,
           attrs=("kernel", "stride", "padding", "dilation", "ceil_mode"))
def _max_pool2d_grad(g, x, gy, attrs):
    """The gradient of max_pool2d with respect to its input x, given the output gradient gy: each window's
    gradient goes to the first position holding its maximum (a NaN counts as the maximum), as torch's
    max_pool2d backward routes it through the saved indices. Windows are visited in order; a position is
    taken once per window, and overlapping windows add up."""
    geom = _window_geometry(x.shape, attrs, a_bool(attrs, "ceil_mode", False))
    _, (sh, sw), (ph, pw), _, _ = geom
    n, c, h, w = x.shape
    ws = _windows(g, x, geom, _lowest(x.dtype))
    y = _window_max(g, ws)
    hp, wp = _padded_size(geom, h, w)
    zero = _scalar(g, 0, x.dtype)
    canvas = g.op("expand", zero, shape=[n, c, hp, wp])
    taken = out = None
    for k, (v, (r, q)) in enumerate(zip(ws, _window_slices(geom))):
        hit = g.op("logical_or", g.op("eq", v, y), g.op("ne", v, v))  # v is the window's max, or a NaN
        if taken is not None:
            hit = g.op("logical_and", hit, g.op("logical_not", taken))
        if k < len(ws) - 1:
            taken = hit if taken is None else g.op("logical_or", taken, hit)
        placed = g.op("setslice", canvas, g.op("where", hit, gy, zero), starts=[0, 0, r.start, q.start],
                      stops=[n, c, r.stop, q.stop], steps=[1, 1, sh, sw])
        out = placed if out is None else g.op("add", out, placed)
    if (hp, wp) != (h, w):
        out = g.op("slice", out, starts=[0, 0, ph, pw], stops=[n, c, ph + h, pw + w], steps=[1, 1, 1, 1])
    return out


def _avg_pool_infer(metas, attrs):
    a_bool(attrs, "count_include_pad", True)
    if attrs.get("divisor_override") is not None:
        a_int(attrs, "divisor_override")
    s, d = _pool_infer(metas, attrs)
    if not d.is_floating_point and d is not D.int64:
        raise DTypeError(f'"avg_pool2d" is not implemented for {d.name} (as in torch): pool a floating or int64 '
                         f"tensor (x.float())")
    return s, d


@composite("avg_pool2d", 1, _avg_pool_infer,
           attrs=("kernel", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"))
def _avg_pool2d(g, x, attrs):
    """Sum over the windows divided by the window size (or the count of non-padding elements, as torch). An
    int64 input averages as torch's does, its quotient truncated towards zero (summed in float64: exact below
    2**53)."""
    if x.dtype.is_floating_point:
        return _avg_pool_float(g, x, attrs)
    y = _avg_pool_float(g, g.op("cast", x, dtype=D.float64.name), attrs)
    return g.op("cast", g.op("trunc", y), dtype=x.dtype.name)


def _avg_pool_float(g, x, attrs):
    ceil = a_bool(attrs, "ceil_mode", False)
    geom = _window_geometry(x.shape, attrs, ceil)
    ws = _windows(g, x, geom, 0.0)
    total = ws[0]
    for v in ws[1:]:
        total = g.op("add", total, v)
    div = attrs.get("divisor_override")
    (kh, kw), _, (ph, pw), _, (oh, ow) = geom
    if div is not None:
        return g.op("div", total, _scalar(g, float(div), x.dtype))
    include = a_bool(attrs, "count_include_pad", True)
    if (include and not ceil) or (not ph and not pw and not ceil):
        return g.op("div", total, _scalar(g, float(kh * kw), x.dtype))
    # per-position counts: pool a map of ones (padding counted as ones when count_include_pad, except the
    # extra high-side padding that ceil_mode adds, which torch never counts)
    h, w = x.shape[2], x.shape[3]
    ones = g.op("full", shape=[1, 1, h, w], dtype=x.dtype.name, value=1.0)
    if include:
        ones = g.op("pad", ones, pads=[0, 0, 0, 0, ph, ph, pw, pw], value=1.0)
        geom = (geom[0], geom[1], (0, 0), geom[3], geom[4])
    cnt = _windows(g, ones, geom, 0.0)
    c = cnt[0]
    for v in cnt[1:]:
        c = g.op("add", c, v)
    return g.op("div", total, c)
