"""``tw.nn.functional``: PyTorch's functional API on cluster tensors.

Everything records ops (nothing syncs). Activations, normalisation, convolution and pooling are single
composite ops of the op table (``gelu``, ``layer_norm``, ``conv2d``, ``max_pool2d`` ...), so the
client records one node where the worker runs their decomposition (or a native kernel).
"""

from __future__ import annotations

import math

import numpy as np

from tensorwire import autocast_state as _amp
from tensorwire.autocast_policy import POLICIES
from tensorwire.combine import write_out
from tensorwire.creation import arange, ones
from tensorwire.functions import cat, stack, where
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import ShapeError
from tensorwire.protocol.shapes import broadcast
from tensorwire.tensor import Tensor

from ..grid_sampling import affine_grid, grid_sample
from ..padding import pad
from ._tensors import no_grad, rebind

# the sections that other modules of the package build on, each a module of its own (functional_extras and
# pooling_nd import them, and this module re-exports those two: issue 32, no circle)
from .activations import (
    dropout,
    elu,
    gelu,
    glu,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    mish,
    relu,
    relu6,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    tanh,
)
from .interpolation import interpolate
from .linear_maps import _pair, bilinear, conv1d, conv2d, conv_transpose1d, conv_transpose2d, fold, linear, unfold
from .loss_functions import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from .pooling_nd import avg_pool3d, max_pool1d_with_indices, max_pool2d_with_indices, max_pool3d

#: (the autocast state's count of active scopes: the half-input norms' fast path when no scope is on)
_amp_active = _amp._active

__all__ = [
    "relu", "relu6", "gelu", "silu", "tanh", "sigmoid", "softmax", "log_softmax", "leaky_relu", "softplus", "elu",
    "hardtanh", "mish", "dropout", "linear", "bilinear", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d",
    "max_pool1d", "max_pool2d",
    "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "batch_norm", "layer_norm",
    "group_norm", "rms_norm", "embedding", "one_hot", "pad", "interpolate", "unfold", "fold", "normalize",
    "cosine_similarity", "scaled_dot_product_attention", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "softmin", "glu",
    "logsigmoid", "multi_head_attention_forward", "lp_pool1d", "lp_pool2d", "lp_pool3d",
]


def _scalar_like(x: Tensor, v, dtype=None) -> Tensor:
    return x._s.scalar(v, dtype or x.dtype, x._dev)


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


def _lp_pool(input: Tensor, n: int, norm_type, kernel_size, stride, ceil_mode: bool) -> Tensor:  # noqa: A002
    """torch's ``lp_pool{n}d``: ``(sum over the window of x ** p) ** (1 / p)``, computed as torch does (the window's
    mean of ``x ** p``, times its size: a negative sum, possible for odd ``p``, gives NaN as torch's); ``p`` = ``inf``
    / ``-inf``: the max / min of ``|x|`` (torch's max pools)."""
    mx, avg = {1: (max_pool1d, avg_pool1d), 2: (max_pool2d, avg_pool2d), 3: (max_pool3d, avg_pool3d)}[n]
    if isinstance(norm_type, (int, float)):
        if norm_type == math.inf:
            return mx(input.abs(), kernel_size, stride, 0, 1, ceil_mode)
        if norm_type == -math.inf:
            return -mx(-input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    out = avg(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    size = kernel_size if n == 1 else math.prod(_pair(kernel_size, n))
    return (out.sign() * relu(out.abs())).mul(size).pow(1.0 / norm_type)


def lp_pool1d(input: Tensor, norm_type, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    """Power-average pooling over ``[N, C, L]`` (torch's ``F.lp_pool1d``)."""
    return _lp_pool(input, 1, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input: Tensor, norm_type, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    """Power-average pooling over ``[N, C, H, W]`` (torch's ``F.lp_pool2d``)."""
    return _lp_pool(input, 2, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input: Tensor, norm_type, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    """Power-average pooling over ``[N, C, D, H, W]`` (torch's ``F.lp_pool3d``)."""
    return _lp_pool(input, 3, norm_type, kernel_size, stride, ceil_mode)


# ------------------------------------------------------------------------------------------------ normalisation

def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,  # noqa: A002
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float | None = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation over every dim but 1 (torch's ``F.batch_norm``). In training mode the batch's statistics
    normalise and the running statistics, when given, are updated: ``(1 - momentum) * running + momentum * stat``
    with the unbiased variance (recorded ops: the buffers are rebound to their new values, as torch updates them in
    place). One ``batch_norm`` op (``protocol/ops/batch_norm.py``) and, in training, the ``batch_norm_stats`` it
    reads (with the backward and one ``batch_norm_update`` per running buffer)."""
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
        # (made once: the normalisation, the running buffers and the backward read them; with its history, which
        # a double backward differentiates, though batch_norm's rule gives it no gradient of its own)
        stats = input._rec("batch_norm_stats", [input], {})
        with no_grad():
            if running_mean is not None or running_var is not None:
                at = {"n": n} if count is not None else {"n": n, "momentum": 0.1 if momentum is None else
                                                         float(momentum)}
                extra = [count] if count is not None else []
                for which, buf in (("mean", running_mean), ("var", running_var)):
                    if buf is not None:
                        rebind(buf, buf._rec("batch_norm_update", [buf, stats, *extra], {**at, "which": which}))
    ins = [input, stats] if training else [input, running_mean, running_var]
    attrs = {"training": bool(training), "eps": float(eps), "has_weight": weight is not None,
             "has_bias": bias is not None}
    if training:
        attrs["has_stats"] = True
    ins += [t if t.ndim == 1 else t.reshape(channels) for t in (weight, bias) if t is not None]
    return input._rec("batch_norm", ins, attrs)


def _half_norm(input: Tensor, op: str) -> tuple[Tensor, D.DType | None]:  # noqa: A002
    """A normalisation's input and the dtype its result is cast back to: a float16 / bfloat16 ``input`` is normalised
    in float32, its affine part applied there (weight and bias of float32, or of the input's dtype), and the result
    rounded once to the input's dtype, as torch's CPU kernels do (their float accumulation, and their mixed-dtype
    path, which takes float32 weights for a half input: ``nn.LayerNorm`` after a Linear under autocast). Under an
    autocast whose policy runs ``op`` in float32 (torch's GPU list), the result stays float32, as torch's. Other
    inputs: ``(input, None)``, unchanged."""
    if input.dtype not in D.HALF:
        return input, None
    back = input.dtype
    if _amp_active[0]:
        kind = input._dev.split(":")[0]
        if _amp._state().get(kind) is not None and POLICIES.get(kind, {}).get(op) == "fp32":
            back = D.float32
    return input.float(), back


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5) -> Tensor:
    """Normalisation over the trailing ``normalized_shape`` dims, then ``* weight + bias`` (torch's
    ``F.layer_norm``); a float16 / bfloat16 input is computed in float32 and its result has the input's dtype, with
    float32 or half weights alike (:func:`_half_norm`)."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(ns):]) != ns:
        raise ShapeError(f"Given normalized_shape={list(ns)}, expected input with shape [*, "
                         f"{', '.join(map(str, ns))}], but got input of size{list(input.shape)}")
    x, back = _half_norm(input, "layer_norm")
    y = x._rec("layer_norm", [x], {"ndim": len(ns), "eps": float(eps)})
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y if back is None else y.to(back)


def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:  # noqa: A002
    """``input / sqrt(mean(input ** 2) + eps)`` over the trailing ``normalized_shape`` dims, times ``weight`` (torch's
    ``F.rms_norm``). The result has the input's dtype whatever the weight's; a float16 / bfloat16 input is computed in
    float32, and ``eps=None`` is the epsilon of that computation's dtype (float32's for a half input), as torch's."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    x, back = _half_norm(input, "rms_norm")
    if eps is None:
        eps = float(np.finfo(x.dtype.np).eps) if x.dtype.is_floating_point else float(np.finfo(np.float32).eps)
    y = x._rec("rms_norm", [x], {"ndim": len(ns), "eps": float(eps)})
    if weight is not None:
        y = y * weight
    target = back if back is not None else input.dtype
    return y.to(target) if target.is_floating_point and y.dtype is not target else y


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5) -> Tensor:
    """Normalisation over each group of ``num_groups`` channel groups (dim 1 and the spatial dims), then the
    per-channel ``weight`` and ``bias`` (torch's ``F.group_norm``); a float16 / bfloat16 input is computed in float32
    and its result has the input's dtype (:func:`_half_norm`)."""
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise ValueError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                         f"shape {list(input.shape)} and num_groups={num_groups}")
    xin, back = _half_norm(input, "layer_norm")  # (recorded as a layer_norm of the groups: that op's policy)
    x = xin.reshape(n, num_groups, math.prod(input.shape[1:]) // num_groups)  # (explicit: n may be 0)
    y = x._rec("layer_norm", [x], {"ndim": 1, "eps": float(eps)}).reshape(input.shape)
    shape = [1, -1] + [1] * (input.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y if back is None else y.to(back)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,  # noqa: A002
              out: Tensor | None = None) -> Tensor:
    """``input`` over its ``p``-norm along ``dim`` (at least ``eps``); ``out``: written there, as torch's."""
    return write_out(out, input / input.norm(p, dim, keepdim=True).clamp(min=eps))


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
    divides each row's gradient by its index's count in ``input``; ``sparse=True`` gives the same values as a dense
    gradient (README, the table of differences).

    Without those options it is one ``index`` node, which takes an index of any shape (``weight[input]``): no
    flattening of ``input`` and reshaping of the rows around it, forward or backward."""
    if padding_idx is None and max_norm is None and not scale_grad_by_freq and weight.ndim == 2:
        return weight._rec("index", [weight, input], {"dim": 0})
    out = embedding_rows(input.reshape(-1), weight, padding_idx, max_norm, norm_type, scale_grad_by_freq)
    return out.reshape(*input.shape, weight.shape[1])


def _held_value(t: Tensor) -> np.ndarray | None:
    """``t``'s value when the client holds it (a tensor made from host data, or a view of one: ``known_values``),
    read with no round trip; else None, and None while ``tw.compile`` records (a replay may see other values)."""
    s = t._s
    if s._capture is not None:
        return None
    return s._known.peek(t._id) if t._base is None else s._known.held(t)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding along a new last dim (torch's ``F.one_hot``), with torch's checks of the class values:
    a negative one, or one not below ``num_classes``, raises RuntimeError at the call when the client holds the
    values (a tensor made from host data, or a view of one) or reads them anyway (``num_classes=-1`` reads the min and
    max: one round trip). Otherwise the values are checked on the device, with no round trip: the classes pass
    through a gather of ``arange(num_classes)``, whose kernel checks its indices, so reading the result of a value out
    of range raises a RuntimeError naming the gather's index (as torch's CUDA one_hot leaves it to a device assert)."""
    if tensor.dtype.is_floating_point:
        raise TypeError("one_hot is only applicable to index tensor")
    num_classes = int(num_classes)
    if tensor.numel() == 0:
        if num_classes <= 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        idx = tensor
    else:
        held = _held_value(tensor)
        if held is not None or num_classes == -1:
            if held is not None:
                lo, hi = int(held.min()), int(held.max())
            else:  # (the min and max in one read)
                lo, hi = stack([tensor.min(), tensor.max()]).tolist()
            if lo < 0:
                raise RuntimeError("Class values must be non-negative.")
            if num_classes == -1:
                num_classes = hi + 1
            elif hi >= num_classes:
                raise RuntimeError("Class values must be smaller than num_classes.")
            idx = tensor
        elif num_classes <= 0:
            raise RuntimeError("Class values must be smaller than num_classes.")
        else:  # checked on the device, read with the result (gather's kernel raises for an index out of range)
            ix = tensor if tensor.dtype is D.int64 else tensor.long()
            idx = arange(num_classes, device=tensor._dev, session=tensor._s).gather(0, ix.reshape(-1))
            idx = idx.reshape(tensor.shape)
    classes = arange(num_classes, device=tensor._dev, session=tensor._s)
    return (idx.unsqueeze(-1) == classes).long()


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


# the rest of torch's functional API, composed of the above (issue 33)
from .embedding_bag import embedding_bag, embedding_rows  # noqa: E402
from .functional_extras import *  # noqa: E402,F403
from .functional_extras import __all__ as _extras_all  # noqa: E402
from .pooling_nd import *  # noqa: E402,F403
from .pooling_nd import __all__ as _pooling_all  # noqa: E402

__all__ += _extras_all + [n for n in _pooling_all if not n.endswith("_with_indices")]
__all__ += ["grid_sample", "affine_grid", "embedding_bag"]
