"""More of torch's ``nn.functional``, composed of tensor methods (issue 33): the remaining activations (``celu``,
``selu``, ``hardswish``, the shrinks, ``prelu``, ``rrelu``...) and the in-place forms (``relu_``, ``elu_`` ...: each
its activation's ``inplace=True``), ``gumbel_softmax``, the channel dropouts, ``pixel_shuffle``, ``conv_tbc``, the
distance and margin losses, ``kl_div``, ``instance_norm`` and ``local_response_norm``. Re-exported by
:mod:`tensorwire.nn.functional`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from tensorwire.autograd_engine import no_grad
from tensorwire.creation import rand
from tensorwire.dtype_info import finfo
from tensorwire.functions import arange_like, where
from tensorwire.math_extras import xlogy
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.errors import DTypeError, ShapeError
from tensorwire.tensor import Tensor
from tensorwire.zero_grads import zero_grad_from

from ..padding import pad
from .activations import elu, hardtanh, leaky_relu, logsigmoid, relu
from .interpolation import interpolate
from .linear_maps import conv1d, linear
from .loss_functions import _reduce, cross_entropy, takes_legacy_reduction

__all__ = [
    "celu", "selu", "hardshrink", "softshrink", "softsign", "tanhshrink", "threshold", "hardsigmoid", "hardswish",
    "prelu", "rrelu", "alpha_dropout", "feature_alpha_dropout", "dropout1d", "dropout2d", "dropout3d",
    "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "kl_div", "margin_ranking_loss", "hinge_embedding_loss",
    "soft_margin_loss", "multilabel_soft_margin_loss", "cosine_embedding_loss", "poisson_nll_loss",
    "gaussian_nll_loss", "pairwise_distance", "pdist", "triplet_margin_loss", "triplet_margin_with_distance_loss",
    "multi_margin_loss", "local_response_norm", "instance_norm", "upsample_bilinear", "upsample_nearest",
    "upsample", "linear_cross_entropy", "multilabel_margin_loss", "ctc_loss", "relu_", "elu_", "celu_", "selu_",
    "leaky_relu_", "hardtanh_", "rrelu_", "threshold_", "gumbel_softmax", "native_channel_shuffle", "conv_tbc",
]


def _where(cond, a, b) -> Tensor:
    return where(cond, a, b)


def _inplace(input: Tensor, out: Tensor, inplace: bool) -> Tensor:  # noqa: A002
    return input._assign(out) if inplace else out


def _float_only(name: str, x: Tensor) -> None:
    if not x.dtype.is_floating_point:
        raise DTypeError(f"{name}: \"{name}\" is not implemented for '{x.dtype.name}' (as torch); use a float tensor")


# -- activations -----------------------------------------------------------------------------------------------------

def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """max(0, x) + min(0, α (exp(x / α) - 1))."""
    _float_only("celu", input)
    out = input.relu() + ((input / alpha).expm1() * alpha).clamp(max=0)
    return _inplace(input, out, inplace)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """scale (max(0, x) + min(0, α (exp(x) - 1)))."""
    _float_only("selu", input)
    out = (input.relu() + (input.expm1() * _SELU_ALPHA).clamp(max=0)) * _SELU_SCALE
    return _inplace(input, out, inplace)


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    """x where |x| > λ, else 0."""
    _float_only("hardshrink", input)
    return _where((input > lambd) | (input < -lambd), input, input.new_zeros(()))


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    """x - λ above λ, x + λ below -λ, else 0."""
    _float_only("softshrink", input)
    if lambd < 0:
        raise ValueError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    z = input.new_zeros(())
    return _where(input > lambd, input - lambd, _where(input < -lambd, input + lambd, z))


def softsign(input: Tensor) -> Tensor:  # noqa: A002
    """x / (1 + |x|)."""
    return input / (input.abs() + 1)


def tanhshrink(input: Tensor) -> Tensor:  # noqa: A002
    """x - tanh(x)."""
    return input - input.tanh()


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:  # noqa: A002
    """x where x > threshold, else ``value``."""
    if input.dtype is D.bool_:
        raise DTypeError("threshold: a bool tensor is not supported (as torch)")
    out = _where(input > threshold, input, input._operand(value).to(input.dtype))
    return _inplace(input, out, inplace)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """relu6(x + 3) / 6."""
    _float_only("hardsigmoid", input)
    return _inplace(input, (input + 3).clamp(0, 6) / 6, inplace)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """x · relu6(x + 3) / 6."""
    _float_only("hardswish", input)
    return _inplace(input, input * (input + 3).clamp(0, 6) / 6, inplace)


def prelu(input: Tensor, weight: Tensor) -> Tensor:  # noqa: A002
    """x where x >= 0, else weight · x (``weight`` per channel, dim 1)."""
    _float_only("prelu", input)
    w = weight
    if w.numel() != 1:
        if input.ndim == 0 or w.ndim != 1 or w.shape[0] != input.shape[1 if input.ndim > 1 else 0]:
            raise ShapeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                             f"{w.numel()} and channel size = {input.shape[1] if input.ndim > 1 else 1}.")
        if input.ndim > 1:
            w = w.reshape(-1, *([1] * (input.ndim - 2)))
    elif w.ndim:
        w = w.reshape(())
    return _where(input >= 0, input, w * input)


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,  # noqa: A002
          inplace: bool = False) -> Tensor:
    """Leaky ReLU with slope (lower + upper) / 2, or in training a slope drawn from U(lower, upper) per element."""
    _float_only("rrelu", input)
    if training:
        slope = rand(input.shape, dtype=input.dtype, device=input._dev, session=input._s) * (upper - lower) + lower
    else:
        slope = (lower + upper) / 2
    return _inplace(input, _where(input >= 0, input, input * slope), inplace)


# -- in-place activations: torch's ``F.<name>_`` is ``F.<name>(..., inplace=True)``, the result written into the
# input through ``Tensor._assign`` (autograd's checks, views and bases as every in-place op) -------------------------

def relu_(input: Tensor) -> Tensor:  # noqa: A002
    """In-place :func:`relu` (``tw.relu_``): ``input`` rewritten and returned."""
    return relu(input, inplace=True)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    """In-place :func:`elu`: ``input`` rewritten and returned."""
    return elu(input, alpha, inplace=True)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    """In-place :func:`celu`: ``input`` rewritten and returned."""
    return celu(input, alpha, inplace=True)


def selu_(input: Tensor) -> Tensor:  # noqa: A002
    """In-place :func:`selu`: ``input`` rewritten and returned."""
    return selu(input, inplace=True)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:  # noqa: A002
    """In-place :func:`leaky_relu`: ``input`` rewritten and returned."""
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:  # noqa: A002
    """In-place :func:`hardtanh`: ``input`` rewritten and returned."""
    return hardtanh(input, min_val, max_val, inplace=True)


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3,  # noqa: A002
           training: bool = False) -> Tensor:
    """In-place :func:`rrelu`: ``input`` rewritten and returned."""
    return rrelu(input, lower, upper, training, inplace=True)


_threshold = threshold  # (threshold_'s argument, torch's name, hides the function)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:  # noqa: A002
    """In-place :func:`threshold`: ``input`` rewritten and returned."""
    return _threshold(input, threshold, value, inplace=True)


def gumbel_softmax(logits: Tensor, tau: float = 1, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Tensor:
    """A sample of the Gumbel-softmax distribution over ``dim`` (torch's ``F.gumbel_softmax``): ``softmax((logits +
    g) / tau)`` with ``g`` standard Gumbel noise (``-log`` of Exp(1) draws, the cluster's generator: ``tw.manual_seed``;
    the numbers differ from torch's). ``hard``: the one-hot of each sample's argmax, differentiated as the soft sample
    (straight-through: ``y_hard - y_soft.detach() + y_soft``). ``eps`` is deprecated and does nothing (torch's
    warning)."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    _float_only("gumbel_softmax", logits)
    with no_grad():
        draws = logits.new_zeros(tuple(logits.shape)).exponential_()
        # (an Exp(1) draw of exactly 0, from a uniform draw of 0, would be Gumbel noise of +inf and NaN after the
        # softmax: it is the dtype's smallest normal number instead, noise of ~708 in float64, ~87 in float32)
        gumbels = -draws.clamp(min=finfo(logits.dtype).tiny).log()
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    index = y_soft.argmax(dim, keepdim=True)
    y_hard = logits.new_zeros(tuple(logits.shape)).scatter(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


# -- dropouts --------------------------------------------------------------------------------------------------------

def _keep(input: Tensor, shape, p: float) -> Tensor:  # noqa: A002
    return rand(shape, dtype=input.dtype, device=input._dev, session=input._s) >= p


def _check_p(p: float) -> None:
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _feature_dropout(input: Tensor, p: float, training: bool, inplace: bool, noise: tuple) -> Tensor:  # noqa: A002
    """Dropout with one draw per element of ``noise`` (a shape that broadcasts to the input's: whole channels)."""
    _check_p(p)
    if not training or p == 0:
        return input
    out = input * 0 if p == 1 else input * _keep(input, noise, p) * (1.0 / (1.0 - p))
    return _inplace(input, out, inplace)


def _channels(shape: tuple) -> tuple:
    """torch's feature dropout's draws: one per (dim 0, dim 1) pair, ``(N, C, 1, ...)``; ShapeError under 2-D."""
    if len(shape) < 2:
        raise ShapeError("Feature dropout requires at least 2 dimensions in the input")
    return (*shape[:2], *([1] * (len(shape) - 2)))


def _unbatched(shape: tuple) -> tuple:
    """The draws of an input without its batch dim, as torch makes them: (1, *shape)'s channels, squeezed."""
    return _channels((1, *shape))[1:]


def _deprecated_rank(name: str, ndim: int, spatial: int) -> None:
    warnings.warn(f"{name}: Received a {ndim}-D input to {name}, which is deprecated and will result in an error in "
                  f"a future release. To retain the behavior and silence this warning, please use dropout instead. "
                  f"Note that {name} exists to provide channel-wise dropout on inputs with {spatial} spatial "
                  f"dimensions, a channel dimension, and an optional batch dimension (i.e. {spatial + 1}D or "
                  f"{spatial + 2}D inputs).", stacklevel=3)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero whole channels (dim 1 of (N, C, L), dim 0 of (C, L)) with probability ``p``; scale the rest."""
    _check_p(p)
    if input.ndim not in (2, 3):
        raise ShapeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that dropout1d "
                         f"exists to provide channel-wise dropout on inputs with 1 spatial dimension, a channel "
                         f"dimension, and an optional batch dimension (i.e. 2D or 3D inputs).")
    noise = _channels(input.shape) if input.ndim == 3 else _unbatched(input.shape)
    return _feature_dropout(input, p, training, inplace, noise)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero whole channels of (N, C, H, W) with probability ``p``; scale the rest. As torch: a 3-D input is taken as
    (N, C, L) (1-D channel dropout, with torch's warning), and other ranks (deprecated, warned) drop along dims 0
    and 1 (a 2-D input element by element)."""
    _check_p(p)
    if input.ndim not in (3, 4):
        _deprecated_rank("dropout2d", input.ndim, 2)
    elif input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior "
                      "is desired - input is interpreted as shape (N, C, L), where C is the channel dim. This behavior "
                      "will change in a future release to interpret the input as one without a batch dimension, i.e. "
                      "shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please switch to using "
                      "dropout1d instead.", stacklevel=2)
    return _feature_dropout(input, p, training, inplace, _channels(input.shape))


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero whole channels of (N, C, D, H, W) (or (C, D, H, W)) with probability ``p``; scale the rest. Other ranks
    (deprecated, warned, as torch) are taken as unbatched: dim 0 is the channel."""
    _check_p(p)
    if input.ndim not in (4, 5):
        _deprecated_rank("dropout3d", input.ndim, 3)
    noise = _channels(input.shape) if input.ndim == 5 else _unbatched(input.shape)
    return _feature_dropout(input, p, training, inplace, noise)


def _alpha_dropout(input: Tensor, p: float, training: bool, inplace: bool, shape) -> Tensor:  # noqa: A002
    _check_p(p)
    if not training or p == 0:
        return input
    if p == 1:
        return _inplace(input, input * 0, inplace)
    alpha = -_SELU_ALPHA * _SELU_SCALE
    a = 1.0 / math.sqrt((alpha * alpha * p + 1) * (1 - p))
    keep = _keep(input, shape, p).to(input.dtype)
    b = (keep - 1) * (alpha * a) + alpha * a * p
    return _inplace(input, input * keep * a + b, inplace)


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:  # noqa: A002
    """Dropout that keeps a SELU network's mean and variance (dropped values go to SELU's negative saturation)."""
    return _alpha_dropout(input, p, training, inplace, input.shape)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,  # noqa: A002
                          inplace: bool = False) -> Tensor:
    """:func:`alpha_dropout` of whole channels."""
    shape = (*input.shape[:2], *([1] * (input.ndim - 2))) if input.ndim >= 2 else input.shape
    return _alpha_dropout(input, p, training, inplace, shape)


# -- rearrangements --------------------------------------------------------------------------------------------------

def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:  # noqa: A002
    """(*, C r², H, W) -> (*, C, H r, W r)."""
    r = int(upscale_factor)
    if input.ndim < 3:
        raise ShapeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
                         f"{input.ndim} dimension(s)")
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise ShapeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                         f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    n = len(lead)
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:  # noqa: A002
    """(*, C, H r, W r) -> (*, C r², H, W)."""
    r = int(downscale_factor)
    if input.ndim < 3:
        raise ShapeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                         f"{input.ndim} dimension(s)")
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise ShapeError(f"pixel_unshuffle expects height and width to be divisible by downscale_factor, got "
                         f"{h} and {w} for {r}")
    n = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:  # noqa: A002
    """Interleave the channels (dim 1) of ``groups`` groups."""
    if input.ndim < 3:
        raise ShapeError(f"channel_shuffle expects input to have at least 3 dimensions, but got input with "
                         f"{input.ndim} dimension(s)")
    n, c, *rest = input.shape
    if groups <= 0 or c % groups:
        raise ShapeError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    return input.reshape(n, groups, c // groups, *rest).transpose(1, 2).reshape(n, c, *rest)


#: torch's ATen-level name of the same shuffle (``torch.native_channel_shuffle``)
native_channel_shuffle = channel_shuffle


def conv_tbc(input: Tensor, weight: Tensor, bias: Tensor, pad: int = 0) -> Tensor:  # noqa: A002
    """1-D convolution of a time-first sequence (torch's ``F.conv_tbc``): ``input`` ``(T, B, C_in)``, ``weight``
    ``(K, C_in, C_out)``, ``bias`` ``(C_out,)``, ``pad`` zeros at both ends of time; ``(T + 2 pad - K + 1, B,
    C_out)``, ``out[t] = bias + sum_k input[t + k - pad] @ weight[k]``: :func:`conv1d` of the batch-first layout."""
    if input.ndim != 3:
        raise ShapeError(f"conv_tbc: Input must have 3 dims: time, batch, in_channel (got {input.ndim})")
    if weight.ndim != 3:
        raise ShapeError(f"conv_tbc: Weight tensor must have 3 dims: kernel_width, in_channels, out_channels (got "
                         f"{weight.ndim})")
    if bias.ndim != 1:
        raise ShapeError(f"conv_tbc: Bias must be 1-D (got {bias.ndim})")
    if input.shape[2] != weight.shape[1]:
        raise ShapeError(f"conv_tbc: Input dim 2 (input channels, {input.shape[2]}) is not == dim 1 in the weight "
                         f"tensor ({weight.shape[1]})")
    if weight.shape[2] != bias.shape[0]:
        raise ShapeError(f"conv_tbc: Bias size ({bias.shape[0]}) must equal the weight's output channels "
                         f"({weight.shape[2]})")
    out = conv1d(input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=int(pad))
    return out.permute(2, 0, 1)


# -- losses ----------------------------------------------------------------------------------------------------------

@takes_legacy_reduction
def kl_div(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",  # noqa: A002
           log_target: bool = False) -> Tensor:
    """target · (log target - input) pointwise (``log_target``: the target is given as its log)."""
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = xlogy(target, target) - target * input
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return _reduce(loss, reduction)


@takes_legacy_reduction
def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                        size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """max(0, -target · (input1 - input2) + margin)."""
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0), reduction)


@takes_legacy_reduction
def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, size_average=None,  # noqa: A002
                         reduce=None, reduction: str = "mean") -> Tensor:
    """x where target is 1, max(0, margin - x) where it is -1 (torch's sum of the two masked terms)."""
    z = input.new_zeros(())
    out = _where(target != 1, (margin - input).clamp(min=0), z) + _where(target != -1, input, z)
    return _reduce(out, reduction)


@takes_legacy_reduction
def soft_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,  # noqa: A002
                     reduction: str = "mean") -> Tensor:
    """log(1 + exp(-target · input))."""
    return _reduce((-target * input).exp().log1p(), reduction)


@takes_legacy_reduction
def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """-(t log σ(x) + (1 - t) log σ(-x)), averaged over the classes (the last dim)."""
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = loss.sum(dim=input.ndim - 1) / input.shape[-1] if input.ndim else loss
    return _reduce(loss, reduction)


@takes_legacy_reduction
def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1 (torch's EPSILON 1e-12)."""
    d = target.ndim
    if input1.ndim != input2.ndim or input1.ndim not in (d + 1,) or (d and input1.shape[0] != target.shape[0]):
        raise ShapeError(f"cosine_embedding_loss: inputs of shapes {list(input1.shape)} and {list(input2.shape)} "
                         f"do not match a target of shape {list(target.shape)}")
    eps = 1e-12
    prod = (input1 * input2).sum(d)
    m1 = (input1 * input1).sum(d) + eps
    m2 = (input2 * input2).sum(d) + eps
    cos = prod / (m1 * m2).sqrt()
    z = cos.new_zeros(())
    out = _where(target == 1, 1 - cos, z) + _where(target == -1, (cos - margin).clamp(min=0), z)
    return _reduce(out, reduction)


@takes_legacy_reduction
def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,  # noqa: A002
                     size_average=None, eps: float = 1e-8, reduce=None, reduction: str = "mean") -> Tensor:
    """exp(x) - t x (``log_input``) or x - t log(x + eps); ``full`` adds Stirling's term where t > 1."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        st = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + _where(target > 1, st, st.new_zeros(()))
    return _reduce(loss, reduction)


def gaussian_nll_loss(input: Tensor, target: Tensor, var, full: bool = False, eps: float = 1e-6,  # noqa: A002
                      reduction: str = "mean") -> Tensor:
    """½ (log max(var, eps) + (input - target)² / max(var, eps)) (+ ½ log 2π with ``full``); the clamp is not
    differentiated through, as torch."""
    if not isinstance(var, Tensor):
        var = input._operand(float(var)).to(input.dtype)
        if var.item() < 0:
            raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif tuple(input.shape[:-1]) == tuple(var.shape[:-1]) and var.shape[-1] == 1:
            pass
        elif var.ndim == 0:
            pass
        else:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    v = var + (var.clamp(min=eps) - var).detach()
    loss = 0.5 * (v.log() + (input - target) ** 2 / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """‖x1 - x2 + eps‖_p over the last dim."""
    nd = max(x1.ndim, x2.ndim)
    d = x1 - x2 + eps
    if nd == 0:
        return d.abs() if p != 0 else (d != 0).to(d.dtype)
    return d.norm(p, dim=nd - 1, keepdim=keepdim)


def pdist(input: Tensor, p: float = 2.0) -> Tensor:  # noqa: A002
    """The p-norm distances between each pair of rows (i < j), in row-major order."""
    if input.ndim != 2:
        raise ShapeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    n = input.shape[0]
    i, j = np.triu_indices(n, 1)
    if len(i) == 0:
        return zero_grad_from(input.new_zeros((0,)), input)
    a = input.index_select(0, input._operand(i.astype(np.int64)))
    b = input.index_select(0, input._operand(j.astype(np.int64)))
    d = (a - b).abs()
    if p == 0:
        return zero_grad_from((d != 0).to(input.dtype).sum(-1), input)
    if p == float("inf"):
        return d.amax(-1) if d.shape[-1] else d.sum(-1)
    return d.norm(p, dim=-1)


def triplet_margin_with_distance_loss(anchor: Tensor, positive: Tensor, negative: Tensor, *,
                                      distance_function=None, margin: float = 1.0, swap: bool = False,
                                      reduction: str = "mean") -> Tensor:
    """max(d(a, p) - d(a, n) + margin, 0) (``swap``: d(a, n) is min(d(a, n), d(p, n)))."""
    if margin <= 0:
        raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin} instead")
    dist = distance_function if distance_function is not None else pairwise_distance
    dp = dist(anchor, positive)
    dn = dist(anchor, negative)
    if swap:
        dn = dn.minimum(dist(positive, negative))
    return _reduce((margin + dp - dn).clamp(min=0), reduction)


@takes_legacy_reduction
def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean") -> Tensor:
    """max(‖a - p‖ - ‖a - n‖ + margin, 0) with :func:`pairwise_distance`."""
    a, po, ne = anchor.ndim, positive.ndim, negative.ndim
    if not (a == po == ne):
        raise ShapeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                         f"dimensions, but got: anchor {a}D, positive {po}D, and negative {ne}D inputs")
    dp = pairwise_distance(anchor, positive, p, eps)
    dn = pairwise_distance(anchor, negative, p, eps)
    if swap:
        dn = dn.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + dp - dn).clamp(min=0), reduction)


@takes_legacy_reduction
def multi_margin_loss(input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0,  # noqa: A002
                      weight: Tensor | None = None, size_average=None, reduce=None,
                      reduction: str = "mean") -> Tensor:
    """Σ_{i ≠ y} max(0, margin - x[y] + x[i])^p / C (times weight[y])."""
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    x = input if input.ndim >= 2 else input.reshape(1, -1)
    t = target.reshape(-1)
    c = x.shape[1]
    xy = x.gather(1, t.unsqueeze(1))
    z = (margin - xy + x).clamp(min=0)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight.gather(0, t).unsqueeze(1)
    not_y = arange_like(x, 0, c).unsqueeze(0) != t.unsqueeze(1)
    loss = _where(not_y, z, z.new_zeros(())).sum(1) / c
    if input.ndim < 2:
        loss = loss.reshape(()) if input.ndim == 1 and target.ndim == 0 else loss
    return _reduce(loss, reduction)


# -- normalisation ---------------------------------------------------------------------------------------------------

def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,  # noqa: A002
                        k: float = 1.0) -> Tensor:
    """x / (k + α · mean of x² over ``size`` neighbouring channels)^β (torch's padding of the window)."""
    if input.ndim < 3:
        raise ShapeError(f"Expected 3D or higher dimensionality input (got {input.ndim} dimensions)")
    if input.numel() == 0:
        return input
    sq = input * input
    c = input.shape[1]
    moved = sq.movedim(1, -1)
    padded = pad(moved, [size // 2, (size - 1) // 2])
    acc = padded.narrow(-1, 0, c)
    for i in range(1, size):
        acc = acc + padded.narrow(-1, i, c)
    # torch averages with avg_pool, which truncates an integer input's mean
    div = (acc / size if input.dtype.is_floating_point else acc // size).movedim(-1, 1)
    return input / (div * alpha + k) ** beta


def instance_norm(input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,  # noqa: A002
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Each (sample, channel) normalised over its spatial dims; the running statistics, when given, are updated
    with the batch's (``use_input_stats``) or used instead."""
    if input.ndim < 3:
        raise ShapeError(f"instance_norm expects an input of at least 3 dims (N, C, ...), got {input.ndim}")
    dims = tuple(range(2, input.ndim))
    shape = (1, -1, *([1] * (input.ndim - 2)))
    if use_input_stats:
        mean = input.mean(dims, keepdim=True)
        var = input.var(dims, unbiased=False, keepdim=True)
        if running_mean is not None or running_var is not None:
            with no_grad():
                n = 1
                for d in dims:
                    n *= input.shape[d]
                if running_mean is not None:
                    bm = mean.detach().mean(0).reshape(-1)
                    running_mean.mul_(1 - momentum).add_(bm * momentum)
                if running_var is not None:
                    bv = input.detach().var(dims, unbiased=True).mean(0) if n > 1 else var.detach().mean(0)
                    running_var.mul_(1 - momentum).add_(bv.reshape(-1) * momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("Expected running_mean and running_var to be defined when use_input_stats is false")
        mean = running_mean.reshape(*shape)
        var = running_var.reshape(*shape)
    out = (input - mean) / (var + eps).sqrt()
    if weight is not None:
        out = out * weight.reshape(*shape)
    if bias is not None:
        out = out + bias.reshape(*shape)
    return out


# -- upsampling ------------------------------------------------------------------------------------------------------

def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None) -> Tensor:  # noqa: A002
    """:func:`interpolate`'s old name."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:  # noqa: A002
    """``interpolate(mode="nearest")``."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:  # noqa: A002
    """``interpolate(mode="bilinear", align_corners=True)``."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# -- fused forms -----------------------------------------------------------------------------------------------------

def linear_cross_entropy(input: Tensor, linear_weight: Tensor, target: Tensor, *,  # noqa: A002
                         linear_bias: Tensor | None = None, weight: Tensor | None = None, reduction: str = "mean",
                         ignore_index: int | None = None, label_smoothing: float = 0.0, options=None) -> Tensor:
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)`` (torch's fused form; ``options``
    tune torch's chunking, which changes nothing here)."""
    if input.ndim not in (1, 2):
        raise ShapeError(f"expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2 or linear_weight.shape[-1] != input.shape[-1]:
        raise ShapeError(f"expected linear_weight of shape (C, ..., {input.shape[-1]}), got "
                         f"{list(linear_weight.shape)}")
    c, out = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if out and input.ndim == 1:
        raise ShapeError("K-dimensional loss defined by linear_weight requires batched input")
    # a weight (C, *out, in) gives logits (*batch, C, *out): the K-dimensional loss
    logits = linear(input, linear_weight.reshape(-1, input.shape[-1])).reshape(*input.shape[:-1], c, *out)
    if linear_bias is not None:
        logits = logits + linear_bias
    return cross_entropy(logits, target, weight, ignore_index=-100 if ignore_index is None else ignore_index,
                         reduction=reduction, label_smoothing=label_smoothing)


@takes_legacy_reduction
def multilabel_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,  # noqa: A002
                           reduction: str = "mean") -> Tensor:
    """Σ_j Σ_{i not a target} max(0, 1 - (x[y_j] - x[i])) / C over the target classes y_j (the target row's
    entries before its first -1)."""
    x = input if input.ndim == 2 else input.reshape(1, -1)
    t = target.reshape(x.shape)
    c = x.shape[1]
    valid = (t >= 0).to(D.int64).cumprod(1) > 0  # up to the first -1
    ti = _where(valid, t, t * 0)
    cls = arange_like(x, 0, c)
    is_target = ((ti.unsqueeze(2) == cls) & valid.unsqueeze(2)).any(1)  # (N, C)
    xt = x.gather(1, ti)  # (N, J): the target classes' scores
    margin = (1 - xt.unsqueeze(2) + x.unsqueeze(1)).clamp(min=0)  # (N, J, C)
    keep = valid.unsqueeze(2) & ~is_target.unsqueeze(1)
    loss = _where(keep, margin, margin.new_zeros(())).sum((1, 2)) / c
    if input.ndim < 2:
        loss = loss.reshape(())
    return _reduce(loss, reduction)


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths, target_lengths, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """The connectionist temporal classification loss: -log of the summed probability of every alignment of each
    target to its input, by the forward (alpha) recursion in log space over the blank-extended targets, one step
    per input frame (the lengths and targets are read: a sync point)."""
    unbatched = log_probs.ndim == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    T, N, _ = lp.shape  # noqa: N806
    in_len = np.asarray(input_lengths.tolist() if isinstance(input_lengths, Tensor) else input_lengths,
                        dtype=np.int64).reshape(-1)
    tg_len = np.asarray(target_lengths.tolist() if isinstance(target_lengths, Tensor) else target_lengths,
                        dtype=np.int64).reshape(-1)
    tg = np.asarray(targets.tolist(), dtype=np.int64)
    if unbatched:
        tg = tg.reshape(1, -1)
    if tg.ndim == 1:  # the targets concatenated: split by their lengths
        rows, at = [], 0
        for k in tg_len:
            rows.append(tg[at:at + k])
            at += k
        width = max([len(r) for r in rows] + [0])
        tg = np.zeros((N, width), np.int64)
        for i, r in enumerate(rows):
            tg[i, :len(r)] = r
    smax = int(tg_len.max()) if N else 0
    L = 2 * smax + 1  # noqa: N806
    ext = np.full((N, L), blank, np.int64)
    ext[:, 1::2] = tg[:, :smax]
    valid = np.arange(L)[None, :] < (2 * tg_len + 1)[:, None]
    skip = np.zeros((N, L), bool)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    neg = lp._s.scalar(-math.inf, lp.dtype, lp._dev)
    em = lp.gather(2, lp._operand(ext).unsqueeze(0).expand(T, N, L))  # (T, N, L)
    em = _where(lp._operand(valid), em, neg)
    skip_t = lp._operand(skip)

    def safe_log(v):  # log, -inf at 0 with a zero gradient there (no inf * 0 = NaN where a path is impossible)
        empty = v == 0
        return _where(empty, neg, _where(empty, v.new_ones(()), v).log())

    def lse3(a, b, c):
        m = a.maximum(b).maximum(c)
        m = _where(m.isinf(), m.new_zeros(()), m)
        return m + safe_log((a - m).exp() + (b - m).exp() + (c - m).exp())

    first = np.full((N, L), False)
    first[:, :2] = True
    alpha = _where(lp._operand(first & valid), em[0], neg)
    lens = lp._operand(in_len)
    for t in range(1, T):
        a1 = pad(alpha, [1, 0], value=-math.inf).narrow(1, 0, L)
        a2 = _where(skip_t, pad(alpha, [2, 0], value=-math.inf).narrow(1, 0, L), neg)
        new = lse3(alpha, a1, a2) + em[t]
        alpha = _where((lens > t).unsqueeze(1), new, alpha)
    last = lp._operand(2 * tg_len)
    end1 = alpha.gather(1, last.unsqueeze(1)).squeeze(1)
    end2 = alpha.gather(1, (last - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    end2 = _where(last > 0, end2, neg)
    m = end1.maximum(end2)
    m = _where(m.isinf(), m.new_zeros(()), m)
    loss = -(m + safe_log((end1 - m).exp() + (end2 - m).exp()))
    if zero_infinity:
        loss = _where(loss.isinf(), loss.new_zeros(()), loss)
    if reduction == "mean":
        return (loss / lp._operand(np.maximum(tg_len, 1)).to(loss.dtype)).mean()
    if reduction == "sum":
        return loss.sum()
    if reduction != "none":
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return loss.squeeze(0) if unbatched else loss
