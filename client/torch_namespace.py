"""torch-namespace forms of ``tw.nn.functional``'s ops whose ``torch.X`` signature differs from ``F.X``'s, and
``tw.row_stack``.

PyTorch programs call ATen's functions directly (``torch.dropout(x, p, train)``, ``torch.layer_norm``,
``torch.batch_norm``, ``torch.embedding(weight, indices)``): same computations as ``F.X``, other signatures (the
arguments positional and in ATen's order, a reduction as an int: 0 none, 1 mean, 2 sum, ``cudnn_enabled`` flags).
Each function here takes torch's arguments and calls ``F.X``. The ops whose ``torch.X`` takes ``F.X``'s arguments
(``conv2d``, ``pixel_shuffle``, ``cosine_similarity``, ...) are ``F.X`` itself, bound in ``client/__init__.py``.
``torch.embedding_bag`` is not here: it returns ATen's three internal bookkeeping tensors besides the result, which
differ by mode and device; ``tw.nn.functional.embedding_bag`` gives the result.
"""

from __future__ import annotations

from . import creation as _creation
from . import linalg as _linalg
from .combine import vstack, where, write_out
from .nn import functional as F
from .tensor import Tensor

#: torch's ``at::Reduction`` values
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction(reduction) -> str:
    """ATen's int reduction as ``F``'s string (a string is taken as it is)."""
    if isinstance(reduction, str):
        return reduction
    if isinstance(reduction, bool) or reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction (0: none, 1: mean, 2: sum)")
    return _REDUCTIONS[reduction]


def _stride(stride):
    """A pool's stride: ATen's default is the empty list (the kernel size), ``F``'s None."""
    return None if stride is None or (isinstance(stride, (tuple, list)) and not stride) else stride


def row_stack(tensors, *, out=None) -> Tensor:
    """torch.row_stack: an alias of :func:`tw.vstack`."""
    return write_out(out, vstack(tensors))


# -- dropouts and normalisations --------------------------------------------------------------------------------------

def dropout(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    """torch.dropout(input, p, train): ``F.dropout(input, p, training=train)``."""
    return F.dropout(input, p, train)


def alpha_dropout(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    """torch.alpha_dropout(input, p, train): ``F.alpha_dropout(input, p, training=train)``."""
    return F.alpha_dropout(input, p, train)


def feature_alpha_dropout(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    """torch.feature_alpha_dropout(input, p, train): ``F.feature_alpha_dropout(input, p, training=train)``."""
    return F.feature_alpha_dropout(input, p, train)


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5, cudnn_enable: bool = True) -> Tensor:
    """torch.layer_norm: ``F.layer_norm`` (``cudnn_enable`` changes nothing: there is no cuDNN here)."""
    return F.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5, cudnn_enabled: bool = True) -> Tensor:
    """torch.group_norm: ``F.group_norm`` (``cudnn_enabled`` changes nothing)."""
    return F.group_norm(input, num_groups, weight, bias, eps)


def batch_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,  # noqa: A002
               running_var: Tensor | None, training: bool, momentum: float, eps: float,
               cudnn_enabled: bool) -> Tensor:
    """torch.batch_norm, every argument in ATen's order (weight and bias before the running statistics):
    ``F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)``."""
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,  # noqa: A002
                  running_var: Tensor | None, use_input_stats: bool, momentum: float, eps: float,
                  cudnn_enabled: bool) -> Tensor:
    """torch.instance_norm, in ATen's order: ``F.instance_norm(input, running_mean, running_var, weight, bias,
    use_input_stats, momentum, eps)``."""
    return F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


def embedding(weight: Tensor, indices: Tensor, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    """torch.embedding(weight, indices, ...): the WEIGHT FIRST (``F.embedding`` takes the indices first). A negative
    ``padding_idx`` means none, as ATen's (``F.embedding`` counts a negative one from the end before it calls this
    in torch)."""
    return F.embedding(indices, weight, padding_idx if padding_idx >= 0 else None,
                       scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


# -- pooling ----------------------------------------------------------------------------------------------------------

def max_pool1d(input: Tensor, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
               ceil_mode: bool = False) -> Tensor:
    """torch.max_pool1d: ``F.max_pool1d`` without indices (an empty ``stride`` is the kernel size)."""
    return F.max_pool1d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def max_pool2d(input: Tensor, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
               ceil_mode: bool = False) -> Tensor:
    """torch.max_pool2d: ``F.max_pool2d`` without indices (an empty ``stride`` is the kernel size)."""
    return F.max_pool2d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def max_pool3d(input: Tensor, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
               ceil_mode: bool = False) -> Tensor:
    """torch.max_pool3d: ``F.max_pool3d`` without indices (an empty ``stride`` is the kernel size)."""
    return F.max_pool3d(input, kernel_size, _stride(stride), padding, dilation, ceil_mode)


def avg_pool1d(input: Tensor, kernel_size, stride=(), padding=0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True) -> Tensor:
    """torch.avg_pool1d: ``F.avg_pool1d`` (an empty ``stride`` is the kernel size)."""
    return F.avg_pool1d(input, kernel_size, _stride(stride), padding, ceil_mode, count_include_pad)


def adaptive_max_pool1d(input: Tensor, output_size) -> tuple[Tensor, Tensor]:  # noqa: A002
    """torch.adaptive_max_pool1d: the maxima AND their indices, always (``F.adaptive_max_pool1d(...,
    return_indices=True)``)."""
    return tuple(F.adaptive_max_pool1d(input, output_size, return_indices=True))


# -- activations ------------------------------------------------------------------------------------------------------

def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,  # noqa: A002
          generator=None) -> Tensor:
    """torch.rrelu: ``F.rrelu``; in training, the slopes drawn from ``generator`` when one is given."""
    if not training or generator is None:
        return F.rrelu(input, lower, upper, training)
    slope = _creation.rand(tuple(input.shape), dtype=input.dtype, device=input._dev, generator=generator,
                           session=input._s) * (upper - lower) + lower
    return where(input >= 0, input, input * slope)


# -- losses (the reduction as ATen's int) -----------------------------------------------------------------------------
# (torch 2.13's Python bindings of these default to NO reduction: ATen's schemas say ``int reduction=1``, yet
# ``torch.kl_div(a, b)`` returns the elementwise loss; so do these, and an explicit 1 gives the mean)

def kl_div(input: Tensor, target: Tensor, reduction: int = 0, *, log_target: bool = False) -> Tensor:  # noqa: A002
    """torch.kl_div: ``F.kl_div`` with ATen's int reduction (default: none, as torch's; 1: the mean over every
    element)."""
    return F.kl_div(input, target, reduction=_reduction(reduction), log_target=log_target)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                     pos_weight: Tensor | None = None, reduction: int = 0) -> Tensor:
    """torch.binary_cross_entropy_with_logits: ``pos_weight`` fourth, the reduction an int (default: none)."""
    return F.binary_cross_entropy_with_logits(input, target, weight, reduction=_reduction(reduction),
                                              pos_weight=pos_weight)


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                        reduction: int = 0) -> Tensor:
    """torch.margin_ranking_loss: ``F.margin_ranking_loss`` with an int reduction (default: none)."""
    return F.margin_ranking_loss(input1, input2, target, margin, reduction=_reduction(reduction))


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, reduction: int = 0) -> Tensor:  # noqa: A002
    """torch.hinge_embedding_loss: ``F.hinge_embedding_loss`` with an int reduction (default: none)."""
    return F.hinge_embedding_loss(input, target, margin, reduction=_reduction(reduction))


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          reduction: int = 0) -> Tensor:
    """torch.cosine_embedding_loss: ``F.cosine_embedding_loss`` with an int reduction (default: none)."""
    return F.cosine_embedding_loss(input1, input2, target, margin, reduction=_reduction(reduction))


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2.0,
                        eps: float = 1e-6, swap: bool = False, reduction: int = 0) -> Tensor:
    """torch.triplet_margin_loss: ``F.triplet_margin_loss`` with an int reduction (default: none)."""
    return F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, reduction=_reduction(reduction))


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool, full: bool, eps: float,  # noqa: A002
                     reduction: int) -> Tensor:
    """torch.poisson_nll_loss: every argument required, in ATen's order (``eps`` before the int reduction)."""
    return F.poisson_nll_loss(input, target, log_input, full, eps=eps, reduction=_reduction(reduction))


def chain_matmul(*matrices: Tensor, out: Tensor | None = None) -> Tensor:
    """The product of the matrices, in the cheapest order (torch's deprecated ``chain_matmul``, which takes them as
    arguments: ``tw.linalg.multi_dot`` of their list; one matrix is returned as it is); ``out``: written there."""
    if len(matrices) == 1:
        return write_out(out, matrices[0])
    return write_out(out, _linalg.multi_dot(matrices))
