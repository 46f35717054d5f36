"""``tw.nn.functional``: PyTorch's functional API on cluster tensors.

Everything records ops (nothing syncs). Activations, normalisation, convolution and pooling are single
composite ops of the op table (``gelu``, ``layer_norm``, ``conv2d``, ``max_pool2d`` ...), so the
client records one node where the worker runs their decomposition (or a native kernel).
"""

from __future__ import annotations

import math

import numpy as np

from tensorwire.creation import arange, ones, rand
from tensorwire.creation import tensor as _tensor
from tensorwire.functions import cat, where
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.protocol.shapes import broadcast
from tensorwire.tensor import Tensor

from ..grid_sampling import grid_sample
from ..padding import pad
from ._tensors import no_grad, rebind
from .pooling_nd import _adaptive, max_pool1d_with_indices, max_pool2d_with_indices

__all__ = [
    "relu", "relu6", "gelu", "silu", "tanh", "sigmoid", "softmax", "log_softmax", "leaky_relu", "softplus", "elu",
    "hardtanh", "mish", "dropout", "linear", "bilinear", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d",
    "max_pool1d", "max_pool2d",
    "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "batch_norm", "layer_norm",
    "group_norm", "rms_norm", "embedding", "one_hot", "pad", "interpolate", "unfold", "normalize",
    "cosine_similarity", "scaled_dot_product_attention", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "softmin", "glu",
    "logsigmoid", "multi_head_attention_forward",
]


def _pair(v, n: int = 2) -> list[int]:
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return [int(v[0])] * n
        if len(v) != n:
            raise ValueError(f"expected {n} values, got {list(v)}")
        return [int(x) for x in v]
    return [int(v)] * n


def _scalar_like(x: Tensor, v, dtype=None) -> Tensor:
    return x._s.scalar(v, dtype or x.dtype, x._dev)


# ------------------------------------------------------------------------------------------------ activations

def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return input.relu_() if inplace else input.relu()


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    out = input._rec("relu6", [input])
    return input._assign(out) if inplace else out


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    """GELU; ``approximate="tanh"`` gives the tanh approximation, as torch."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return input._rec("gelu", [input], {"approximate": approximate})


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    out = input._rec("silu", [input])
    return input._assign(out) if inplace else out


def mish(input: Tensor) -> Tensor:  # noqa: A002
    return input * softplus(input).tanh()


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    return input.tanh()


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return input.sigmoid()


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return -softplus(-input)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:  # noqa: A002
    out = input._rec("leaky_relu", [input], {"negative_slope": float(negative_slope)})
    return input._assign(out) if inplace else out


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    return input._rec("softplus", [input], {"beta": float(beta), "threshold": float(threshold)})


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    out = where(input > 0, input, input.expm1() * alpha)
    return input._assign(out) if inplace else out


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``input`` clamped to ``[min_val, max_val]``. An integer input keeps its dtype, the bounds truncated towards
    zero (torch's ``hardtanh(int64, -0.5, 0.5)`` is all zeros); torch refuses bool, and so do we."""
    if input.dtype is D.bool_:
        raise DTypeError("hardtanh: bool inputs are not supported (as in torch); convert first (x.long())")
    if not input.dtype.is_floating_point:
        min_val, max_val = math.trunc(min_val), math.trunc(max_val)
    out = input.clamp(min_val, max_val)
    return input._assign(out) if inplace else out


def glu(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:  # noqa: A002
    return input.softmax(_softmax_dim(input, dim), dtype=dtype)


def softmin(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:  # noqa: A002
    return (-input).softmax(_softmax_dim(input, dim), dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:  # noqa: A002
    return input.log_softmax(_softmax_dim(input, dim), dtype=dtype)


def _softmax_dim(x: Tensor, dim):
    if dim is not None:
        return dim
    return 0 if x.ndim in (0, 1, 3) else 1  # torch's legacy implicit choice


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero elements with probability ``p`` and scale the rest by ``1 / (1 - p)``; the mask comes from the
    cluster's counter-based generator (``tw.manual_seed``), so it differs from torch's."""
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        out = input * 0
    else:
        keep = rand(input.shape, dtype=input.dtype, device=input._dev, session=input._s) >= p
        out = input * keep * (1.0 / (1.0 - p))
    return input._assign(out) if inplace else out


# ------------------------------------------------------------------------------------------------ linear

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
    """im2col: ``[N, C, H, W] -> [N, C * kh * kw, L]`` (torch's ordering)."""
    return input._rec("im2col", [input], {"kernel": _pair(kernel_size), "stride": _pair(stride),
                                          "padding": _pair(padding), "dilation": _pair(dilation)})


# ------------------------------------------------------------------------------------------------ pooling

def _pool_stride(stride, kernel: list[int]) -> list[int]:
    """A pool's stride: the kernel's where torch's default is (``None``, or an empty list or tuple)."""
    return kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) else _pair(stride)


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,  # noqa: A002
               return_indices: bool = False) -> Tensor:
    if return_indices:  # the windows gathered, their maxima and first argmax (nn/pooling_nd.py)
        return max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    k = _pair(kernel_size)
    s = _pool_stride(stride, k)
    y = x._rec("max_pool2d", [x], {"kernel": k, "stride": s, "padding": _pair(padding),
                                   "dilation": _pair(dilation), "ceil_mode": bool(ceil_mode)})
    return y.squeeze(0) if unbatched else y


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True, divisor_override=None) -> Tensor:
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    k = _pair(kernel_size)
    s = _pool_stride(stride, k)
    attrs = {"kernel": k, "stride": s, "padding": _pair(padding), "ceil_mode": bool(ceil_mode),
             "count_include_pad": bool(count_include_pad)}
    if divisor_override is not None:
        attrs["divisor_override"] = int(divisor_override)
    y = x._rec("avg_pool2d", [x], attrs)
    return y.squeeze(0) if unbatched else y


def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,  # noqa: A002
               return_indices: bool = False) -> Tensor:
    if return_indices:
        return max_pool1d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
    k = _pair(kernel_size, 1)[0]
    s = _pair(stride, 1)[0] if stride is not None else k
    return max_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, _pair(padding, 1)[0]), (1, _pair(dilation, 1)[0]),
                      ceil_mode).squeeze(-2)


def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True) -> Tensor:
    k = _pair(kernel_size, 1)[0]
    s = _pair(stride, 1)[0] if stride is not None else k
    return avg_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, _pair(padding, 1)[0]), ceil_mode,
                      count_include_pad).squeeze(-2)


def _adaptive_bounds(n: int, m: int) -> list[tuple[int, int]]:
    return [((i * n) // m, -(-((i + 1) * n) // m)) for i in range(m)]


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:  # noqa: A002
    """Average over torch's adaptive windows (one reshape + mean when the size divides evenly)."""
    h, w = input.shape[-2:]
    oh, ow = (output_size, output_size) if not isinstance(output_size, (tuple, list)) else output_size
    oh = h if oh is None else int(oh)
    ow = w if ow is None else int(ow)
    x = input if input.dtype.is_floating_point else input.float()
    lead = x.shape[:-2]
    if h % oh == 0 and w % ow == 0:
        return x.reshape(*lead, oh, h // oh, ow, w // ow).mean((-3, -1))
    rows = []
    for a, b in _adaptive_bounds(h, oh):
        cols = [x[..., a:b, c:d].mean((-2, -1), keepdim=True) for c, d in _adaptive_bounds(w, ow)]
        rows.append(cat(cols, -1))
    return cat(rows, -2)


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:  # noqa: A002
    o = output_size[0] if isinstance(output_size, (tuple, list)) else output_size
    return adaptive_avg_pool2d(input.unsqueeze(-2), (1, o)).squeeze(-2)


# ------------------------------------------------------------------------------------------------ normalisation

def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,  # noqa: A002
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float | None = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation over every dim but 1 (torch's ``F.batch_norm``). In training mode the batch's statistics
    normalise and the running statistics, when given, are updated: ``(1 - momentum) * running + momentum * stat``
    with the unbiased variance (recorded ops: the buffers are rebound to their new values, as torch updates them in
    place). One ``batch_norm`` op (``protocol/ops/nn.py``) and, in training with running statistics, one
    ``batch_norm_stats`` and one ``batch_norm_update`` per buffer."""
    return _batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def _batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,  # noqa: A002
                weight: Tensor | None, bias: Tensor | None, training: bool, momentum: float | None, eps: float,
                count: Tensor | None = None) -> Tensor:
    """:func:`batch_norm`; ``count`` (a 0-d tensor, BatchNorm's num_batches_tracked): update the running statistics
    by the cumulative average ``running + (stat - running) / count`` instead (torch's ``momentum=None``)."""
    # torch's channels are dim 1; a 1-D input has none (only an empty one, with empty statistics, is valid)
    channels = input.shape[1] if input.ndim > 1 else 0
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.numel() != channels:
            raise ShapeError(f"batch_norm: {name} should contain {channels} elements not {t.numel()} (input of "
                             f"shape {list(input.shape)}, channels in dim 1)")
    if not training and (running_mean is None or running_var is None):
        raise ValueError("batch_norm in eval mode needs running_mean and running_var")
    if input.numel() == 0:
        if training or input.ndim < 2:
            return input.clone()  # an empty batch: nothing to normalise, the running statistics stay (torch)
    elif training:
        n = input.numel() // max(channels, 1)
        if n == 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{list(input.shape)}")
        if running_mean is not None or running_var is not None:
            with no_grad():
                stats = input._rec("batch_norm_stats", [input], {})
                at = {"n": n} if count is not None else {"n": n, "momentum": 0.1 if momentum is None else
                                                         float(momentum)}
                extra = [count] if count is not None else []
                for which, buf in (("mean", running_mean), ("var", running_var)):
                    if buf is not None:
                        rebind(buf, buf._rec("batch_norm_update", [buf, stats, *extra], {**at, "which": which}))
    ins = [input] if training else [input, running_mean, running_var]
    attrs = {"training": bool(training), "eps": float(eps), "has_weight": weight is not None,
             "has_bias": bias is not None}
    ins += [t if t.ndim == 1 else t.reshape(channels) for t in (weight, bias) if t is not None]
    return input._rec("batch_norm", ins, attrs)


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5) -> Tensor:
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(ns):]) != ns:
        raise ShapeError(f"Given normalized_shape={list(ns)}, expected input with shape [*, "
                         f"{', '.join(map(str, ns))}], but got input of size{list(input.shape)}")
    y = input._rec("layer_norm", [input], {"ndim": len(ns), "eps": float(eps)})
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:  # noqa: A002
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if eps is None:
        eps = float(np.finfo(input.dtype.np if input.dtype not in (D.bfloat16,) else np.float32).eps) \
            if input.dtype is not D.bfloat16 else 0.0078125
    y = input._rec("rms_norm", [input], {"ndim": len(ns), "eps": float(eps)})
    return y * weight if weight is not None else y


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5) -> Tensor:
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise ValueError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                         f"shape {list(input.shape)} and num_groups={num_groups}")
    x = input.reshape(n, num_groups, math.prod(input.shape[1:]) // num_groups)  # (explicit: n may be 0)
    y = x._rec("layer_norm", [x], {"ndim": 1, "eps": float(eps)}).reshape(input.shape)
    shape = [1, -1] + [1] * (input.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # noqa: A002
    return input / input.norm(p, dim, keepdim=True).clamp(min=eps)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim``, after broadcasting them together (as torch: a
    size-1 ``dim`` broadcast against a longer one counts each element as many times)."""
    shape = broadcast(tuple(x1.shape), tuple(x2.shape))
    x1, x2 = x1.expand(*shape), x2.expand(*shape)
    n1 = x1.norm(2, dim).clamp(min=eps)
    n2 = x2.norm(2, dim).clamp(min=eps)
    return (x1 * x2).sum(dim) / (n1 * n2)


# ------------------------------------------------------------------------------------------------ embedding

def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm=None,  # noqa: A002
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` picked by the integer tensor ``input``; rows at ``padding_idx`` get no gradient; rows whose
    norm is above ``max_norm`` are scaled down to it in ``weight`` itself first (as torch); ``scale_grad_by_freq``
    divides each row's gradient by its index's count in ``input``; ``sparse=True`` gives the same (dense) gradient:
    tensorwire has no sparse tensors."""
    out = embedding_rows(input.reshape(-1), weight, padding_idx, max_norm, norm_type, scale_grad_by_freq)
    return out.reshape(*input.shape, weight.shape[1])


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding along a new last dim (``num_classes=-1`` reads the max: a sync)."""
    if tensor.dtype.is_floating_point:
        raise TypeError("one_hot is only applicable to index tensor")
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1
    classes = arange(num_classes, device=tensor._dev, session=tensor._s)
    return (tensor.unsqueeze(-1) == classes).long()


# ------------------------------------------------------------------------------------------------ shape

def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002
                align_corners: bool | None = None, recompute_scale_factor=None, antialias: bool = False) -> Tensor:
    """Resize the trailing spatial dims: ``nearest``, ``nearest-exact``, ``linear``, ``bilinear``, ``trilinear``,
    ``bicubic`` and ``area`` (index gathers with weights computed on the client; every mode is separable)."""
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
        if mode in ("nearest", "nearest-exact"):
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


# ------------------------------------------------------------------------------------------------ attention

def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(q k^T * scale + mask) v. A bool ``attn_mask`` marks positions that may attend (True), a float
    one is added to the scores; ``is_causal`` applies a lower-triangular mask."""
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa and query.shape[-3] != key.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(rep, -3) if hasattr(key, "repeat_interleave") else \
            key.unsqueeze(-3).expand(*key.shape[:-2], rep, S, key.shape[-1]).reshape(*query.shape[:-2], S, -1)
        value = value.unsqueeze(-3).expand(*value.shape[:-2], rep, S, value.shape[-1]).reshape(
            *query.shape[:-2], S, -1)
    scores = (query @ key.transpose(-2, -1)) * scale
    neg = -math.inf
    if is_causal:
        if attn_mask is not None:
            raise ValueError("is_causal and attn_mask cannot both be set")
        causal = ones(L, S, dtype=D.bool_, device=query._dev, session=query._s).tril()
        scores = where(causal, scores, neg)
    if attn_mask is not None:
        if attn_mask.dtype is D.bool_:
            scores = where(attn_mask, scores, neg)
        else:
            scores = scores + attn_mask
    attn = scores.softmax(-1)
    if dropout_p > 0:
        attn = dropout(attn, dropout_p, True)
    return attn @ value


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
                                 training=True, key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """torch's ``F.multi_head_attention_forward``, with its signature: sequence-first inputs ``[L, N, E]`` (or
    unbatched ``[L, E]``); returns ``(output, weights or None)``."""
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k and static_v are not supported")
    if query.shape[-1] != embed_dim_to_check:
        raise ShapeError(f"was expecting embedding dimension of {embed_dim_to_check}, but got {query.shape[-1]}")
    if is_causal and attn_mask is None:
        raise ValueError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                         "method `generate_square_subsequent_mask` to create this mask.")
    unbatched = query.ndim == 2
    if unbatched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    if not use_separate_proj_weight:
        q_proj_weight = k_proj_weight = v_proj_weight = None
    out, w = mha_batch_first(query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), num_heads,
                             in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, key_padding_mask,
                             need_weights, attn_mask, dropout_p, training, average_attn_weights, False,
                             q_proj_weight, k_proj_weight, v_proj_weight, bias_k, bias_v, add_zero_attn)
    out = out.transpose(0, 1)
    if unbatched:
        out = out.squeeze(1)
        if w is not None:
            w = w.squeeze(0)
    return out, w


def mha_batch_first(query, key, value, num_heads, in_proj_weight, in_proj_bias, out_proj_weight,
                    out_proj_bias, key_padding_mask=None, need_weights=True, attn_mask=None,
                    dropout_p=0.0, training=True, average_attn_weights=True, is_causal=False,
                    q_proj_weight=None, k_proj_weight=None, v_proj_weight=None, bias_k=None,
                    bias_v=None, add_zero_attn=False):
    """Multi-head attention on batch-first inputs ``[N, L, E]`` (``nn.MultiheadAttention`` transposes to it; torch's
    functional form is :func:`multi_head_attention_forward`)."""
    n, L, e = query.shape
    S = key.shape[1]
    hd = e // num_heads
    if q_proj_weight is None:
        if query is key and key is value:
            qkv = linear(query, in_proj_weight, in_proj_bias)
            q, k, v = qkv.chunk(3, -1)
        else:
            wq, wk, wv = in_proj_weight.chunk(3, 0)
            bq, bk, bv = in_proj_bias.chunk(3, 0) if in_proj_bias is not None else (None, None, None)
            q, k, v = linear(query, wq, bq), linear(key, wk, bk), linear(value, wv, bv)
    else:
        bq, bk, bv = in_proj_bias.chunk(3, 0) if in_proj_bias is not None else (None, None, None)
        q, k, v = linear(query, q_proj_weight, bq), linear(key, k_proj_weight, bk), linear(value, v_proj_weight, bv)
    if bias_k is not None:
        k = cat([k, bias_k.reshape(1, 1, e).expand(n, 1, e)], 1)
        v = cat([v, bias_v.reshape(1, 1, e).expand(n, 1, e)], 1)
        if attn_mask is not None:
            attn_mask = pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = pad(key_padding_mask, (0, 1))
        S += 1
    if add_zero_attn:
        k = pad(k, (0, 0, 0, 1))
        v = pad(v, (0, 0, 0, 1))
        if attn_mask is not None:
            attn_mask = pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = pad(key_padding_mask, (0, 1))
        S += 1
    q = q.reshape(n, L, num_heads, hd).transpose(1, 2)
    k = k.reshape(n, S, num_heads, hd).transpose(1, 2)
    v = v.reshape(n, S, num_heads, hd).transpose(1, 2)
    # one additive float mask [N or 1, H or 1, L, S], as torch merges them
    mask = None
    neg = -math.inf
    if attn_mask is not None:
        am = attn_mask
        if am.dtype is D.bool_:  # torch's nn.MultiheadAttention: True = NOT allowed
            am = where(am, neg, 0.0).to(q.dtype)
        if am.ndim == 3:
            am = am.reshape(n, num_heads, L, S)
        mask = am
    if is_causal and attn_mask is None:
        am = where(ones(L, S, dtype=D.bool_, device=q._dev, session=q._s).tril(), 0.0, neg).to(q.dtype)
        mask = am
    if key_padding_mask is not None:
        kp = key_padding_mask
        kp = where(kp, neg, 0.0).to(q.dtype) if kp.dtype is D.bool_ else kp.to(q.dtype)
        kp = kp.reshape(n, 1, 1, S)
        mask = kp if mask is None else mask + kp
    scale = 1.0 / math.sqrt(hd)
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores + mask
    attn = scores.softmax(-1)
    if dropout_p > 0 and training:
        attn = dropout(attn, dropout_p, True)
    out = (attn @ v).transpose(1, 2).reshape(n, L, e)
    out = linear(out, out_proj_weight, out_proj_bias)
    weights = None
    if need_weights:
        weights = attn.mean(1) if average_attn_weights else attn
    return out, weights


# ------------------------------------------------------------------------------------------------ losses

def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:  # noqa: A002
    d = input - target
    return _reduce(d * d, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:  # noqa: A002
    return _reduce((input - target).abs(), reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",  # noqa: A002
                   beta: float = 1.0) -> Tensor:
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:  # noqa: A002
    d = (input - target).abs()
    return _reduce(where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta), reduction)


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,  # noqa: A002
             ignore_index: int = -100, reduce=None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class indices ``target`` under log-probabilities ``input`` ([N, C, ...])."""
    if weight is None and reduction in ("mean", "sum", "none") and input.dtype in _EXACT_COUNT \
            and _none_ignored(target, ignore_index):
        # every target counts: the loss without the mask and per-element weights of ones, the same values in 6
        # nodes rather than 11 (and a backward graph that much smaller)
        unbatched = input.ndim == 1
        lp = input.unsqueeze(0) if unbatched else input
        lp = lp.movedim(1, -1) if lp.ndim > 2 else lp
        idx = target.unsqueeze(0) if unbatched else target
        picked = -lp.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        if reduction == "mean":
            return picked.sum() / picked.numel()  # (the general path's sum of weights: the count, exactly)
        if reduction == "sum":
            return picked.sum()
        return picked.squeeze(0) if unbatched else picked
    return _nll(input, target, weight, ignore_index, reduction)[0]


#: the dtypes in which a sum of ones is the count exactly (for any batch a loss is computed on)
_EXACT_COUNT = (D.float32, D.float64)


def _none_ignored(target: Tensor, ignore_index) -> bool:
    """Whether no element of ``target`` is ``ignore_index``, by its value the client holds (a target made from host
    data, as most are); False when it does not hold it, or while ``tw.compile`` records (a replay may read other
    targets)."""
    s = target._s
    if s._capture is not None or target._base is not None or target.dtype.is_floating_point:
        return False
    v = s._known.peek(target._id)
    if v is None:
        return False
    if v.size <= 16:  # (a few values, the usual target: Python's ``in`` on them, not numpy's compare and reduce)
        return ignore_index not in v.ravel().tolist()
    return not (v == ignore_index).any()


def _nll(logp: Tensor, target: Tensor, weight, ignore_index: int, reduction: str):
    """(loss, per-element weights or None, valid mask or None) for class-index targets."""
    unbatched = logp.ndim == 1
    if unbatched:
        logp = logp.unsqueeze(0)
        target = target.unsqueeze(0)
    lp = logp.movedim(1, -1) if logp.ndim > 2 else logp  # [..., C]
    valid = None
    idx = target
    if ignore_index is not None:
        valid = target != ignore_index
        idx = where(valid, target, 0)
    picked = -lp.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
    w = None
    if weight is not None:
        w = weight.index_select(0, idx.reshape(-1)).reshape(idx.shape)
        if valid is not None:
            w = where(valid, w, 0.0)
    elif valid is not None:
        w = valid.to(picked.dtype)
    loss = picked * w if w is not None else picked
    if reduction == "mean":
        return (loss.sum() / w.sum() if w is not None else loss.mean()), w, valid
    if unbatched and reduction == "none":
        loss = loss.squeeze(0)  # an unbatched input's loss is 0-d, as torch's
    return _reduce(loss, reduction), w, valid


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,  # noqa: A002
                  ignore_index: int = -100, reduce=None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """torch's cross entropy: class-index targets (with ``ignore_index``) or class-probability targets,
    optional class ``weight`` and ``label_smoothing``."""
    if (input.ndim == 2 and target.ndim == 1 and not target.dtype.is_floating_point and weight is None
            and label_smoothing <= 0 and reduction in ("mean", "sum", "none") and input.shape[1] > 0
            and input.dtype.is_floating_point and isinstance(ignore_index, int)):
        # the common case: one fused op forward, one backward (the op table's cross_entropy_index)
        return input._rec("cross_entropy_index", [input, target],
                          {"reduction": reduction, "ignore_index": int(ignore_index)})
    cdim = 1 if input.ndim > 1 else 0
    c = input.shape[cdim]
    logp = input.log_softmax(cdim)
    if target.dtype.is_floating_point:  # probabilities
        t = target
        if label_smoothing > 0:
            t = t * (1 - label_smoothing) + label_smoothing / c
        prod = logp * t
        if weight is not None:
            prod = prod * weight.reshape([-1] + [1] * (input.ndim - cdim - 1))
        loss = -prod.sum(cdim)
        if reduction == "mean":
            return loss.sum() / (input.numel() // c) if input.ndim > 1 else loss
        return _reduce(loss, reduction)
    nll, w, valid = _nll(logp, target, weight, ignore_index, reduction)
    if label_smoothing <= 0:
        return nll
    lp = logp.movedim(cdim, -1) if logp.ndim > 2 else logp
    if lp.ndim == 1:
        lp = lp.unsqueeze(0)
    smooth = -(lp * weight).sum(-1) if weight is not None else -lp.sum(-1)
    if valid is not None:
        smooth = where(valid.reshape(smooth.shape), smooth, 0.0)
    if reduction == "mean":
        smooth = smooth.sum() / w.sum() if w is not None else smooth.mean()
    else:
        smooth = _reduce(smooth, reduction)
        if input.ndim == 1 and reduction == "none":
            smooth = smooth.squeeze(0)
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / c)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,  # noqa: A002
                         reduce=None, reduction: str = "mean") -> Tensor:
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100 as torch."""
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Using a target size ({list(target.shape)}) that is different to the input size "
                         f"({list(input.shape)}) is deprecated. Please ensure they have the same size.")
    lx = input.log().clamp(min=-100)
    l1 = (1 - input).log().clamp(min=-100)
    loss = -(target * lx + (1 - target) * l1)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                     size_average=None, reduce=None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """Stable BCE on logits: (1 - t) x + (1 + (pw - 1) t) (log1p(exp(-|x|)) + max(-x, 0))."""
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Target size ({list(target.shape)}) must be the same as input size ({list(input.shape)})")
    sp = (-input.abs()).exp().log1p() + (-input).relu()
    if pos_weight is not None:
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * sp
    else:
        loss = (1 - target) * input + sp
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


# the rest of torch's functional API, composed of the above (issue 33)
from .embedding_bag import embedding_bag, embedding_rows  # noqa: E402
from .functional_extras import *  # noqa: E402,F403
from .functional_extras import __all__ as _extras_all  # noqa: E402
from .pooling_nd import *  # noqa: E402,F403
from .pooling_nd import __all__ as _pooling_all  # noqa: E402

__all__ += _extras_all + [n for n in _pooling_all if not n.endswith("_with_indices")] + ["grid_sample", "embedding_bag"]
