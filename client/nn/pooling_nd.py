"""Pooling with indices, adaptive max pooling, 3-D pooling and convolution, and unpooling (issue 33), composed of
existing ops: a pooling window is a gather of the input's flattened spatial positions (computed on the host from
the shapes alone), so max and average pooling of any dimension, their indices (torch's: the flat position in each
input plane, the first maximum of a window) and the adaptive windows all come from one mechanism; ``conv3d`` is a
sum of ``conv2d`` over the kernel's depth. Re-exported by :mod:`tensorwire.nn.functional`."""

from __future__ import annotations

import math

import numpy as np

from tensorwire.creation import rand
from tensorwire.functions import where
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ShapeError
from tensorwire.tensor import Tensor

from ..padding import pad
from .linear_maps import _pair, conv2d, conv_transpose2d

__all__ = ["max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices", "max_pool3d",
           "avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
           "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices",
           "adaptive_avg_pool3d", "conv3d", "max_unpool1d", "max_unpool2d", "max_unpool3d", "fractional_max_pool2d",
           "fractional_max_pool3d", "fractional_max_pool2d_with_indices", "fractional_max_pool3d_with_indices",
           "conv_transpose3d"]


def _out_len(L: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:  # noqa: N803
    span = L + 2 * p - d * (k - 1) - 1
    o = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (o - 1) * s >= L + p:  # the last window must start inside the input or its left padding
        o -= 1
    return o


def _grid(per_dim: list[tuple[np.ndarray, np.ndarray]], spatial) -> tuple[np.ndarray, np.ndarray]:
    """Combine per-dim (positions [o_i, k_i], valid [o_i, k_i]) into flat positions and validity of shape
    [prod(o), prod(k)] over the row-major flattened spatial dims."""
    n = len(per_dim)
    strides = [int(np.prod(spatial[i + 1:])) for i in range(n)]
    flat = np.zeros([1] * (2 * n), dtype=np.int64)
    valid = np.ones([1] * (2 * n), dtype=bool)
    for i, (pos, ok) in enumerate(per_dim):
        shape = [1] * (2 * n)
        shape[i], shape[n + i] = pos.shape
        flat = flat + np.clip(pos, 0, None).reshape(shape) * strides[i]
        valid = valid & ok.reshape(shape)
    o = int(np.prod([p.shape[0] for p, _ in per_dim]))
    k = int(np.prod([p.shape[1] for p, _ in per_dim]))
    flat, valid = np.broadcast_to(flat, [p.shape[0] for p, _ in per_dim] + [p.shape[1] for p, _ in per_dim]), \
        np.broadcast_to(valid, [p.shape[0] for p, _ in per_dim] + [p.shape[1] for p, _ in per_dim])
    return np.where(valid, flat, 0).reshape(o, k), valid.reshape(o, k)


def _sliding(spatial, k, s, p, d, ceil_mode):
    per_dim, outs = [], []
    for L, kk, ss, pp, dd in zip(spatial, k, s, p, d):
        o = _out_len(L, kk, ss, pp, dd, ceil_mode)
        if o <= 0:
            raise ShapeError(f"pooling: the output size is {o} for an input of size {L}, kernel {kk}, stride {ss}, "
                             f"padding {pp}, dilation {dd}: too small")
        pos = np.arange(o)[:, None] * ss - pp + np.arange(kk)[None, :] * dd
        per_dim.append((pos, (pos >= 0) & (pos < L)))
        outs.append(o)
    return per_dim, outs


def _adaptive(spatial, out):
    per_dim = []
    for L, o in zip(spatial, out):
        starts = np.array([(i * L) // o for i in range(o)])
        ends = np.array([-(-((i + 1) * L) // o) for i in range(o)])
        k = int((ends - starts).max()) if o else 0
        pos = starts[:, None] + np.arange(k)[None, :]
        per_dim.append((pos, pos < ends[:, None]))
    return per_dim


def _windows(x: Tensor, n: int, flat: np.ndarray, valid: np.ndarray, fill) -> Tensor:
    """x (B, C, *spatial) -> (B, C, P, K): each output position's window, ``fill`` where it leaves the input."""
    b, c = x.shape[:2]
    xs = x.reshape(b, c, int(np.prod(x.shape[2:])))
    P, K = flat.shape  # noqa: N806
    if xs.shape[2] == 0 or P * K == 0:
        return x.new_full((b, c, P, K), fill)
    w = xs.index_select(2, x._operand(flat.reshape(-1))).reshape(b, c, P, K)
    if valid.all():
        return w
    return where(x._operand(valid), w, x._s.scalar(fill, x.dtype, x._dev))


def _lowest(dtype: D.DType):
    if dtype.is_floating_point:
        return -math.inf
    return False if dtype is D.bool_ else int(np.iinfo(dtype.np).min)


def _batched(x: Tensor, n: int, name: str) -> tuple[Tensor, bool]:
    if x.ndim == n + 1:
        return x.unsqueeze(0), True
    if x.ndim != n + 2:
        raise ShapeError(f"{name}: expected a {n + 1}-D or {n + 2}-D input, got {x.ndim}-D")
    return x, False


def _max_windows(x: Tensor, n: int, per_dim, outs, return_indices: bool, name: str):
    xb, unbatched = _batched(x, n, name)
    spatial = list(xb.shape[2:])
    flat, valid = _grid(per_dim, spatial)
    w = _windows(xb, n, flat, valid, _lowest(xb.dtype))
    vals = w.amax(-1)
    shape = (*xb.shape[:2], *outs)
    vals = vals.reshape(*shape)
    if unbatched:
        vals = vals.squeeze(0)
    if not return_indices:
        return vals
    arg = w.argmax(-1)  # the first maximum of each window (NaN counts as the maximum)
    idx = x._operand(flat).unsqueeze(0).unsqueeze(0).expand(*w.shape).gather(-1, arg.unsqueeze(-1)).squeeze(-1)
    idx = idx.reshape(*shape)
    return vals, idx.squeeze(0) if unbatched else idx


def _max_pool(input: Tensor, n: int, kernel_size, stride, padding, dilation, ceil_mode, return_indices, name):  # noqa: A002
    k = _pair(kernel_size, n, "kernel_size")
    s = k if stride is None or (isinstance(stride, (tuple, list)) and not stride) else _pair(stride, n, "stride")
    p, d = _pair(padding, n, "padding"), _pair(dilation, n, "dilation")
    if any(pp > kk // 2 for pp, kk in zip(p, k)):
        raise ValueError(f"{name}: pad should be at most half of effective kernel size, but got pad={p}, "
                         f"kernel_size={k}")
    xb, _ = _batched(input, n, name)
    per_dim, outs = _sliding(list(xb.shape[2:]), k, s, p, d, ceil_mode)
    return _max_windows(input, n, per_dim, outs, return_indices, name)


# The ``*_with_indices`` forms return ``(values, indices)`` whatever ``return_indices`` says, as torch's (which take
# the argument only to share the pooling functions' signature).

def max_pool1d_with_indices(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode: bool = False, return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """``max_pool1d`` and the index of each maximum in its input row."""
    return _max_pool(input, 1, kernel_size, stride, padding, dilation, ceil_mode, True, "max_pool1d")


def max_pool2d_with_indices(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode: bool = False, return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """``max_pool2d`` and the index of each maximum in its (flattened) input plane."""
    return _max_pool(input, 2, kernel_size, stride, padding, dilation, ceil_mode, True, "max_pool2d")


def max_pool3d_with_indices(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode: bool = False, return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """``max_pool3d`` and the index of each maximum in its (flattened) input volume."""
    return _max_pool(input, 3, kernel_size, stride, padding, dilation, ceil_mode, True, "max_pool3d")


def max_pool3d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,  # noqa: A002
               return_indices: bool = False):
    """3-D max pooling (and the flat index of each maximum in its input volume)."""
    return _max_pool(input, 3, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool3d")


def avg_pool3d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True, divisor_override=None) -> Tensor:
    """3-D average pooling with torch's divisors (the padded window, or its part inside the input)."""
    n = 3
    k = _pair(kernel_size, n, "kernel_size")
    s = k if stride is None or (isinstance(stride, (tuple, list)) and not stride) else _pair(stride, n, "stride")
    p = _pair(padding, n, "padding")
    xb, unbatched = _batched(input, n, "avg_pool3d")
    spatial = list(xb.shape[2:])
    per_dim, outs = _sliding(spatial, k, s, p, [1] * n, ceil_mode)
    flat, valid = _grid(per_dim, spatial)
    w = _windows(xb, n, flat, valid, 0)
    total = w.sum(-1)
    if divisor_override:
        div = np.full(flat.shape[0], float(divisor_override))
    elif count_include_pad:  # the window clipped to the padded extent
        sizes = [np.minimum(pos[:, -1], L + pp - 1) - pos[:, 0] + 1 for (pos, _), L, pp in zip(per_dim, spatial, p)]
        div = sizes[0][:, None, None] * sizes[1][None, :, None] * sizes[2][None, None, :]
        div = div.reshape(-1).astype(np.float64)
    else:
        div = valid.sum(1).astype(np.float64)
    # an integer input's mean truncates, as torch's
    out = (total / xb._operand(div).to(total.dtype) if total.dtype.is_floating_point
           else total.div(xb._operand(div.astype(np.int64)), rounding_mode="trunc"))
    out = out.reshape(*xb.shape[:2], *outs)
    return out.squeeze(0) if unbatched else out


def _adaptive_max(input: Tensor, n: int, output_size, return_indices: bool, name: str):  # noqa: A002
    xb, _ = _batched(input, n, name)
    spatial = list(xb.shape[2:])
    out = _pair(output_size, n, "output_size") if not isinstance(output_size, (tuple, list)) else \
        [spatial[i] if v is None else int(v) for i, v in enumerate(output_size)]
    if any(L == 0 for L in spatial):
        raise ShapeError(f"{name}: expected non-empty spatial dims, got {spatial}")
    return _max_windows(input, n, _adaptive(spatial, out), out, return_indices, name)


def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False):  # noqa: A002
    """Max over torch's adaptive windows (and the flat index of each maximum)."""
    return _adaptive_max(input, 1, output_size, return_indices, "adaptive_max_pool1d")


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):  # noqa: A002
    """Max over torch's adaptive windows (and the flat index of each maximum)."""
    return _adaptive_max(input, 2, output_size, return_indices, "adaptive_max_pool2d")


def adaptive_max_pool3d(input: Tensor, output_size, return_indices: bool = False):  # noqa: A002
    """Max over torch's adaptive windows (and the flat index of each maximum)."""
    return _adaptive_max(input, 3, output_size, return_indices, "adaptive_max_pool3d")


def adaptive_max_pool1d_with_indices(input: Tensor, output_size,  # noqa: A002
                                     return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """:func:`adaptive_max_pool1d` and the index of each maximum in its input row, always (torch's)."""
    return _adaptive_max(input, 1, output_size, True, "adaptive_max_pool1d")


def adaptive_max_pool2d_with_indices(input: Tensor, output_size,  # noqa: A002
                                     return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """:func:`adaptive_max_pool2d` and the flat index of each maximum in its input plane, always (torch's)."""
    return _adaptive_max(input, 2, output_size, True, "adaptive_max_pool2d")


def adaptive_max_pool3d_with_indices(input: Tensor, output_size,  # noqa: A002
                                     return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """:func:`adaptive_max_pool3d` and the flat index of each maximum in its input volume, always (torch's)."""
    return _adaptive_max(input, 3, output_size, True, "adaptive_max_pool3d")


def adaptive_avg_pool3d(input: Tensor, output_size) -> Tensor:  # noqa: A002
    """Mean over torch's adaptive windows."""
    n = 3
    xb, unbatched = _batched(input, n, "adaptive_avg_pool3d")
    spatial = list(xb.shape[2:])
    out = _pair(output_size, n, "output_size") if not isinstance(output_size, (tuple, list)) else \
        [spatial[i] if v is None else int(v) for i, v in enumerate(output_size)]
    flat, valid = _grid(_adaptive(spatial, out), spatial)
    x = xb if xb.dtype.is_floating_point else xb.float()
    w = _windows(x, n, flat, valid, 0)
    r = (w.sum(-1) / x._operand(valid.sum(1).astype(np.float64)).to(x.dtype)).reshape(*xb.shape[:2], *out)
    return r.squeeze(0) if unbatched else r


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,  # noqa: A002
           groups: int = 1) -> Tensor:
    """3-D cross-correlation: for each kernel depth, a ``conv2d`` of the input's depth slices it meets, summed."""
    xb, unbatched = _batched(input, 3, "conv3d")
    s, d = _pair(stride, 3, "stride"), _pair(dilation, 3, "dilation")
    kd, kh, kw = weight.shape[2:]
    if isinstance(padding, str):
        if padding == "valid":
            lo = hi = [0, 0, 0]
        elif padding == "same":
            if any(v != 1 for v in s):
                raise ValueError("padding='same' is not supported for strided convolutions")
            total = [dd * (k - 1) for dd, k in zip(d, (kd, kh, kw))]
            lo = [t // 2 for t in total]
            hi = [t - t // 2 for t in total]
        else:
            raise ValueError(f"Invalid padding string {padding!r}, should be one of 'valid' or 'same'")
    else:
        lo = hi = _pair(padding, 3, "padding")
    x = pad(xb, [lo[2], hi[2], lo[1], hi[1], lo[0], hi[0]]) if any(lo) or any(hi) else xb
    n, c, D_, H, W = x.shape  # noqa: N806
    od = (D_ - d[0] * (kd - 1) - 1) // s[0] + 1
    if od <= 0:
        raise ShapeError(f"conv3d: the kernel ({kd}) is larger than the padded input depth ({D_})")
    # float32 sums in float64 (then rounded): the kd partial sums would otherwise add their rounding to conv2d's
    acc = D.float64 if x.dtype is D.float32 else x.dtype
    xa, wa = x.to(acc), weight.to(acc)
    out = None
    for z in range(kd):
        depths = x._operand(np.arange(od, dtype=np.int64) * s[0] + z * d[0])
        sl = xa.index_select(2, depths).permute(0, 2, 1, 3, 4).reshape(n * od, c, H, W)
        y = conv2d(sl, wa[:, :, z], None, s[1:], 0, d[1:], groups)
        out = y if out is None else out + y
    out = out.to(x.dtype)
    o, oh, ow = out.shape[1:]
    out = out.reshape(n, od, o, oh, ow).permute(0, 2, 1, 3, 4)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1, 1)
    return out.squeeze(0) if unbatched else out


def _max_unpool(input: Tensor, indices: Tensor, n: int, kernel_size, stride, padding, output_size, name):  # noqa: A002
    k = _pair(kernel_size, n, "kernel_size")
    s = k if stride is None else _pair(stride, n, "stride")
    p = _pair(padding, n, "padding")
    xb, unbatched = _batched(input, n, name)
    ib = indices.unsqueeze(0) if unbatched else indices
    spatial = list(xb.shape[2:])
    default = [(L - 1) * ss - 2 * pp + kk for L, ss, pp, kk in zip(spatial, s, p, k)]
    if output_size is None:
        out = default
    else:
        out = [int(v) for v in output_size][-n:]
        for o, dflt, ss in zip(out, default, s):
            if not dflt - ss < o < dflt + ss:
                raise ValueError(f"{name}: invalid output_size {list(output_size)} (expected between "
                                 f"{[v - t for v, t in zip(default, s)]} and {[v + t for v, t in zip(default, s)]})")
    b, c = xb.shape[:2]
    total = int(np.prod(out))
    flat = xb.new_zeros((b, c, total))
    if xb.numel():
        m = int(np.prod(xb.shape[2:]))
        flat = flat.scatter(2, ib.reshape(b, c, m), xb.reshape(b, c, m))
    r = flat.reshape(b, c, *out)
    return r.squeeze(0) if unbatched else r


def max_unpool1d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0,  # noqa: A002
                 output_size=None) -> Tensor:
    """The inverse of ``max_pool1d``: each value written at its index, zeros elsewhere."""
    return _max_unpool(input, indices, 1, kernel_size, stride, padding, output_size, "max_unpool1d")


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0,  # noqa: A002
                 output_size=None) -> Tensor:
    """The inverse of ``max_pool2d``: each value written at its (flat, per plane) index, zeros elsewhere."""
    return _max_unpool(input, indices, 2, kernel_size, stride, padding, output_size, "max_unpool2d")


def max_unpool3d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0,  # noqa: A002
                 output_size=None) -> Tensor:
    """The inverse of ``max_pool3d``: each value written at its (flat, per volume) index, zeros elsewhere."""
    return _max_unpool(input, indices, 3, kernel_size, stride, padding, output_size, "max_unpool3d")


def _intervals(u: np.ndarray, n: int, o: int, k: int) -> np.ndarray:
    """torch's fractional pooling windows' starts for random samples ``u`` (any shape): (..., o)."""
    alpha = (n - k) / (o - 1) if o > 1 else 0.0
    i = np.arange(o)
    seq = (np.floor((i + u[..., None]) * alpha) - np.floor(u[..., None] * alpha)).astype(np.int64)
    seq[..., -1] = n - k
    return seq


def _fractional(input: Tensor, n: int, kernel_size, output_size, output_ratio, return_indices,  # noqa: A002
                _random_samples, name: str):
    xb, unbatched = _batched(input, n, name)
    k = _pair(kernel_size, n, "kernel_size")
    spatial = list(xb.shape[2:])
    if output_size is None:
        if output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
        # (a number: the same ratio for every dim; _pair would truncate it to an int)
        ratio = [float(r) for r in output_ratio] if isinstance(output_ratio, (tuple, list)) else \
            [float(output_ratio)] * n
        ratio = ratio * n if len(ratio) == 1 else ratio
        out = [int(L * r) for L, r in zip(spatial, ratio)]
    else:
        out = _pair(output_size, n, "output_size")
    for L, o, kk in zip(spatial, out, k):
        if o + kk - 1 > L:
            raise ShapeError(f"{name}: output size {o} is too large for input size {L} and pool size {kk}")
    b, c = xb.shape[:2]
    if _random_samples is None:
        _random_samples = rand((b, c, n), dtype=xb.dtype if xb.dtype.is_floating_point else None,
                               device=xb._dev, session=xb._s)
    u = np.asarray(_random_samples.numpy(), dtype=np.float64).reshape(b, c, n)
    # per plane (b, c): positions along each dim, then the flat window index (b, c, prod(out), prod(k))
    strides = [int(np.prod(spatial[i + 1:])) for i in range(n)]
    flat = np.zeros((b, c) + tuple(out) + tuple(k), dtype=np.int64)
    order = [1, 0] if n == 2 else list(range(n))  # torch's 2-D kernel reads the width's sample first
    for dnum in range(n):
        starts = _intervals(u[:, :, order[dnum]], spatial[dnum], out[dnum], k[dnum])  # (b, c, o)
        pos = starts[..., None] + np.arange(k[dnum])  # (b, c, o, k)
        shape = [b, c] + [1] * (2 * n)
        shape[2 + dnum], shape[2 + n + dnum] = out[dnum], k[dnum]
        flat = flat + (pos * strides[dnum]).reshape(shape)
    P, K = int(np.prod(out)), int(np.prod(k))  # noqa: N806
    flat = flat.reshape(b, c, P * K)
    xs = xb.reshape(b, c, int(np.prod(spatial)))
    idx_t = xb._operand(flat)
    w = xs.gather(2, idx_t).reshape(b, c, P, K)
    vals = w.amax(-1).reshape(b, c, *out)
    if unbatched:
        vals = vals.squeeze(0)
    if not return_indices:
        return vals
    arg = w.argmax(-1, keepdim=True)
    idx = idx_t.reshape(b, c, P, K).gather(-1, arg).reshape(b, c, *out)
    return vals, idx.squeeze(0) if unbatched else idx


def fractional_max_pool2d(input: Tensor, kernel_size, output_size=None, output_ratio=None,  # noqa: A002
                          return_indices: bool = False, _random_samples=None):
    """Max pooling over pseudo-random windows (Graham's fractional max pooling, torch's intervals)."""
    return _fractional(input, 2, kernel_size, output_size, output_ratio, return_indices, _random_samples,
                       "fractional_max_pool2d")


def fractional_max_pool3d(input: Tensor, kernel_size, output_size=None, output_ratio=None,  # noqa: A002
                          return_indices: bool = False, _random_samples=None):
    """3-D max pooling over pseudo-random windows (torch's intervals)."""
    return _fractional(input, 3, kernel_size, output_size, output_ratio, return_indices, _random_samples,
                       "fractional_max_pool3d")


def fractional_max_pool2d_with_indices(input: Tensor, kernel_size, output_size=None, output_ratio=None,  # noqa: A002
                                       return_indices: bool = False,
                                       _random_samples: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """:func:`fractional_max_pool2d` and the flat index of each maximum in its input plane, always (torch's)."""
    return _fractional(input, 2, kernel_size, output_size, output_ratio, True, _random_samples,
                       "fractional_max_pool2d")


def fractional_max_pool3d_with_indices(input: Tensor, kernel_size, output_size=None, output_ratio=None,  # noqa: A002
                                       return_indices: bool = False,
                                       _random_samples: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """:func:`fractional_max_pool3d` and the flat index of each maximum in its input volume, always (torch's)."""
    return _fractional(input, 3, kernel_size, output_size, output_ratio, True, _random_samples,
                       "fractional_max_pool3d")


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,  # noqa: A002
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """3-D transposed convolution (``weight`` is ``[C_in, C_out / groups, kd, kh, kw]``): for each kernel depth, a
    ``conv_transpose2d`` of every input depth slice, added at the output depths it reaches, then cropped by
    ``padding``."""
    xb, unbatched = _batched(input, 3, "conv_transpose3d")
    s, d = _pair(stride, 3, "stride"), _pair(dilation, 3, "dilation")
    p, op = _pair(padding, 3, "padding"), _pair(output_padding, 3, "output_padding")
    for o, ss, dd in zip(op, s, d):
        if o >= ss and o >= dd:
            raise ValueError("output padding must be smaller than either stride or dilation, but got "
                             f"output_padding={op}, stride={s}, dilation={d}")
    n, c, D_, H, W = xb.shape  # noqa: N806
    kd = weight.shape[2]
    full = (D_ - 1) * s[0] + d[0] * (kd - 1) + 1 + op[0]
    out_d = full - 2 * p[0]
    if out_d <= 0:
        raise ShapeError(f"conv_transpose3d: the output depth would be {out_d}")
    acc_t = D.float64 if xb.dtype is D.float32 else xb.dtype
    x2 = xb.to(acc_t).permute(0, 2, 1, 3, 4).reshape(n * D_, c, H, W)
    w = weight.to(acc_t)
    acc = None
    for z in range(kd):
        y = conv_transpose2d(x2, w[:, :, z], None, s[1:], p[1:], op[1:], groups, d[1:])
        oc, oh, ow = y.shape[1:]
        y = y.reshape(n, D_, oc, oh, ow)
        if acc is None:
            acc = y.new_zeros((n, full, oc, oh, ow))
        at = x2._operand(np.arange(D_, dtype=np.int64) * s[0] + z * d[0])
        acc = acc.index_add(1, at, y)
    out = acc.narrow(1, p[0], out_d).permute(0, 2, 1, 3, 4).to(xb.dtype)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1, 1)
    return out.squeeze(0) if unbatched else out
