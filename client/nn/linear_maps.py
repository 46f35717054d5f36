"""``tw.nn.functional``'s linear maps: ``linear``, ``bilinear``, the convolutions (``conv1d``, ``conv2d`` and
their transposes: one ``conv2d`` / ``conv2d_grad_input`` op each), ``unfold`` (im2col) and ``fold`` (col2im).
:mod:`tensorwire.nn.functional` re-exports them; :mod:`.pooling_nd` builds ``conv3d`` on ``conv2d``."""

from __future__ import annotations

import numpy as np

from tensorwire.padding import pad
from tensorwire.protocol.errors import ShapeError
from tensorwire.tensor import Tensor


def _pair(v, n: int = 2, name: str | None = None) -> list[int]:
    """``v`` (an int, or a list or tuple of 1 or ``n`` ints) as ``n`` ints; ``name``: the argument an error names."""
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return [int(v[0])] * n
        if len(v) != n:
            raise ValueError(f"expected {n} values, got {list(v)}" if name is None else
                             f"{name} must be an int or a tuple of {n} ints, got {list(v)}")
        return [int(x) for x in v]
    return [int(v)] * n



def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input @ weight.T + bias`` (one ``linear`` op)."""
    ins = [input, weight] if bias is None else [input, weight, bias]
    return input._rec("linear", ins)


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``y[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o]``."""
    o, i, j = weight.shape
    lead = input1.shape[:-1]
    x1 = input1.reshape(-1, i)
    x2 = input2.reshape(-1, j)
    t = (x1 @ weight.permute(1, 0, 2).reshape(i, o * j)).reshape(-1, o, j)
    y = (t * x2.unsqueeze(1)).sum(-1)
    if bias is not None:
        y = y + bias
    return y.reshape(*lead, o)


def _conv_padding(padding, k, dilation, n):
    if isinstance(padding, str):
        if padding == "valid":
            return [0] * n, None
        if padding == "same":
            total = [d * (kk - 1) for kk, d in zip(k, dilation)]
            lo = [t // 2 for t in total]
            extra = [t - 2 * lo_ for t, lo_ in zip(total, lo)]
            return lo, extra if any(extra) else None
        raise ValueError(f"Invalid padding string {padding!r}, should be one of ['valid', 'same']")
    return _pair(padding, n), None


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,  # noqa: A002
           groups: int = 1) -> Tensor:
    """2-D cross-correlation as torch (``padding`` may be an int, a pair, ``"same"`` or ``"valid"``)."""
    unbatched = input.ndim == 3
    if unbatched:
        input = input.unsqueeze(0)  # noqa: A001
    stride, dilation = _pair(stride), _pair(dilation)
    if isinstance(padding, str) and padding == "same" and any(s != 1 for s in stride):
        raise ValueError("padding='same' is not supported for strided convolutions")
    pad_, extra = _conv_padding(padding, weight.shape[2:], dilation, 2)
    if extra is not None:  # asymmetric 'same': the extra goes at the end, as torch
        input = input._rec("pad", [input], {"pads": [0, 0, 0, 0, 0, extra[0], 0, extra[1]], "value": 0})  # noqa: A001
    ins = [input, weight] if bias is None else [input, weight, bias]  # conv2d adds a bias [O] itself
    y = input._rec("conv2d", ins, {"stride": stride, "padding": pad_, "dilation": dilation, "groups": int(groups)})
    return y.squeeze(0) if unbatched else y


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,  # noqa: A002
           groups: int = 1) -> Tensor:
    """1-D cross-correlation (a conv2d over a height-1 image)."""
    unbatched = input.ndim == 2
    if unbatched:
        input = input.unsqueeze(0)  # noqa: A001
    s, d = _pair(stride, 1)[0], _pair(dilation, 1)[0]
    if isinstance(padding, str):
        pad_, extra = _conv_padding(padding, weight.shape[2:], [d], 1)
        if extra is not None:
            input = input._rec("pad", [input], {"pads": [0, 0, 0, 0, 0, extra[0]], "value": 0})  # noqa: A001
        p = pad_[0]
    else:
        p = _pair(padding, 1)[0]
    y = conv2d(input.unsqueeze(2), weight.unsqueeze(2), bias, (1, s), (0, p), (1, d), groups).squeeze(2)
    return y.squeeze(0) if unbatched else y


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,  # noqa: A002
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """2-D transposed convolution as torch (``weight`` is ``[C_in, C_out / groups, kh, kw]``): the gradient of a
    conv2d with respect to its input, i.e. one ``conv2d_grad_input`` op whose ``input_size`` is the output size
    ``(H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1``."""
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"conv_transpose2d: expected a 3-D or 4-D input and a 4-D weight, got input "
                         f"{list(input.shape)} and weight {list(weight.shape)}")
    s, p, op, d = _pair(stride), _pair(padding), _pair(output_padding), _pair(dilation)
    groups = int(groups)
    if groups < 1 or weight.shape[0] % groups or x.shape[1] != weight.shape[0]:
        raise ShapeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected input{list(x.shape)} to "
                         f"have {weight.shape[0]} channels, but got {x.shape[1]} channels instead (groups={groups})")
    if any(o >= max(si, di) for o, si, di in zip(op, s, d)):
        raise ValueError(f"output padding must be smaller than either stride or dilation, but got output_padding "
                         f"{op}, stride {s}, dilation {d}")
    size = [(n - 1) * si - 2 * pi + di * (k - 1) + 1
            for n, si, pi, di, k in zip(x.shape[2:], s, p, d, weight.shape[2:])]
    if any(n + o < 1 for n, o in zip(size, op)):
        raise ShapeError(f"Given input size per channel: {list(x.shape[2:])}. Calculated output size: "
                         f"{[n + o for n, o in zip(size, op)]}. Output size is too small")
    # conv2d_grad_input checks that a conv2d of the output size gives the input's size, which holds for an
    # output_padding below the stride. A larger one (allowed below the dilation) reaches into the high-side
    # padding, whose first positions hold real values: run with the padding cut by it (q = p - o, at least 0),
    # drop the p - q extra leading positions, and pad with zeros what still lies past the full output (o - p)
    big = [o >= si for o, si in zip(op, s)]
    q = [max(pi - o, 0) if b else pi for pi, o, b in zip(p, op, big)]
    y = x._rec("conv2d_grad_input", [x, weight], {"stride": s, "padding": q, "dilation": d, "groups": groups,
                                                  "input_size": [n + 2 * (pi - qi) + (0 if b else o) for n, pi, qi,
                                                                 o, b in zip(size, p, q, op, big)]})
    lead = [pi - qi for pi, qi in zip(p, q)]
    if any(lead):
        y = y[:, :, lead[0]:, lead[1]:]
    tail = [max(o - pi, 0) if b else 0 for o, pi, b in zip(op, p, big)]
    if any(tail):
        y = pad(y, (0, tail[1], 0, tail[0]))
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return y.squeeze(0) if unbatched else y


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,  # noqa: A002
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """1-D transposed convolution (``conv_transpose2d`` over a height-1 image); ``weight`` is
    ``[C_in, C_out / groups, k]``."""
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    if x.ndim != 3 or weight.ndim != 3:
        raise ShapeError(f"conv_transpose1d: expected a 2-D or 3-D input and a 3-D weight, got input "
                         f"{list(input.shape)} and weight {list(weight.shape)}")
    y = conv_transpose2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, _pair(stride, 1)[0]),
                         (0, _pair(padding, 1)[0]), (0, _pair(output_padding, 1)[0]), groups,
                         (1, _pair(dilation, 1)[0])).squeeze(2)
    return y.squeeze(0) if unbatched else y


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:  # noqa: A002
    """im2col: ``[N, C, H, W] -> [N, C * kh * kw, L]`` (torch's ordering), or unbatched ``[C, H, W] -> [C * kh * kw,
    L]`` (a batch of one, as torch's)."""
    if input.ndim not in (3, 4):
        raise ShapeError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.ndim}D)")
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    y = x._rec("im2col", [x], {"kernel": _pair(kernel_size), "stride": _pair(stride),
                               "padding": _pair(padding), "dilation": _pair(dilation)})
    return y.squeeze(0) if unbatched else y



def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:  # noqa: A002
    """col2im, :func:`unfold`'s adjoint: ``[N, C * kh * kw, L] -> [N, C, H, W]`` (or unbatched), each block's values
    added at the positions it came from (overlaps summed). It is the transposed convolution of the blocks (seen as
    an ``[N, C * kh * kw, Lh, Lw]`` image) with a one-hot kernel per channel group (``groups=C``): one
    ``conv2d_grad_input`` op, differentiable as such. The products with the kernel's zeros are exact zeros, so the
    sums are torch's, except that an infinite value also makes NaN at the other positions of its block's window."""
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    if x.ndim != 3:
        raise ShapeError(f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported (got "
                         f"{input.ndim}D)")
    out, k = _pair(output_size, 2, "output_size"), _pair(kernel_size, 2, "kernel_size")
    d, p, s = _pair(dilation, 2, "dilation"), _pair(padding, 2, "padding"), _pair(stride, 2, "stride")
    kk = k[0] * k[1]
    if x.shape[1] % kk:
        raise ShapeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                         f"got input.size(1)={x.shape[1]} and kernel_size={tuple(k)}")
    blocks = [(o + 2 * pp - dd * (kd - 1) - 1) // ss + 1 for o, pp, dd, kd, ss in zip(out, p, d, k, s)]
    if min(blocks) < 1 or blocks[0] * blocks[1] != x.shape[2]:
        raise ShapeError(f"Given output_size={tuple(out)}, kernel_size={tuple(k)}, dilation={tuple(d)}, "
                         f"padding={tuple(p)}, stride={tuple(s)}, expected size of input's dimension 2 to match the "
                         f"calculated number of sliding blocks {blocks[0]} * {blocks[1]} = {blocks[0] * blocks[1]}, "
                         f"but got input.size(2)={x.shape[2]}.")
    c = x.shape[1] // kk
    onehot = np.zeros((c * kk, 1, k[0], k[1]), dtype=x.dtype.np)
    for i in range(k[0]):
        for j in range(k[1]):
            onehot[i * k[1] + j::kk, 0, i, j] = 1
    base = [(b - 1) * ss - 2 * pp + dd * (kd - 1) + 1 for b, ss, pp, dd, kd in zip(blocks, s, p, d, k)]
    y = conv_transpose2d(x.reshape(x.shape[0], x.shape[1], blocks[0], blocks[1]), x._operand(onehot, x.dtype), None,
                         s, p, [o - b for o, b in zip(out, base)], c, d)
    return y.squeeze(0) if unbatched else y
