"""``tw.nn.functional``'s losses (``mse_loss`` ... ``cross_entropy``, ``binary_cross_entropy``) and
:func:`_reduce`, the ``reduction=`` rule every loss shares (:mod:`.functional_extras`' too).
:mod:`tensorwire.nn.functional` re-exports them; the loss modules (:mod:`.loss`) call them through it."""

from __future__ import annotations

import functools
import inspect
import warnings

from tensorwire.functions import where
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Tensor


def legacy_reduction(size_average, reduce, stacklevel: int = 3) -> str:
    """torch's ``_Reduction.legacy_get_string``: the ``reduction`` that the deprecated ``size_average`` / ``reduce``
    arguments mean (with torch's warning): ``size_average=False`` is ``"sum"``, ``reduce=False`` is ``"none"``."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
                  stacklevel=stacklevel)
    return ret


def takes_legacy_reduction(fn):
    """``fn`` (a functional loss with torch's ``size_average=None, reduce=None, reduction="mean"`` parameters) with
    its deprecated ``size_average`` / ``reduce`` meaning what torch's mean (:func:`legacy_reduction`: the VAE of
    old tutorials sums its ``binary_cross_entropy(..., size_average=False)``); a call without them costs a length
    test and two dict lookups more."""
    sig = inspect.signature(fn)
    names = list(sig.parameters)
    first = min(names.index("size_average"), names.index("reduce"))

    @functools.wraps(fn)
    def loss(*args, **kwargs):
        if len(args) <= first and "size_average" not in kwargs and "reduce" not in kwargs:
            return fn(*args, **kwargs)
        bound = sig.bind(*args, **kwargs)
        a = bound.arguments
        size_average, reduce = a.pop("size_average", None), a.pop("reduce", None)
        if size_average is not None or reduce is not None:
            a["reduction"] = legacy_reduction(size_average, reduce)
        return fn(*bound.args, **bound.kwargs)
    return loss


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _check_weight(weight: Tensor, input: Tensor) -> None:  # noqa: A002
    """torch 2.13's rule for the ``weight=`` of ``mse_loss``, ``l1_loss`` and ``huber_loss``: one weight an element
    of ``input``, no broadcasting."""
    if weight.size() != input.size():
        raise ValueError("Weights and input must have the same size.")


def _reduce_weighted(loss: Tensor, weight: Tensor, reduction: str, mean_by_weight: bool = True) -> Tensor:
    """torch 2.13's reductions of a loss ``weight`` has multiplied: ``"mean"`` is the weighted sum over the sum of
    the weights (``huber_loss``'s, ``mean_by_weight=False``: the plain mean of the weighted losses, as torch's)."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / weight.sum() if mean_by_weight else loss.mean()
    raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")


@takes_legacy_reduction
def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",  # noqa: A002
             weight: Tensor | None = None) -> Tensor:
    """The squared error ``(input - target) ** 2``, reduced; ``weight`` (torch 2.13; ``input``'s size) multiplies
    each element's, and ``"mean"`` is then the weighted sum over ``weight.sum()``."""
    d = input - target
    if weight is None:
        return _reduce(d * d, reduction)
    _check_weight(weight, input)
    return _reduce_weighted(d * d * weight, weight, reduction)


@takes_legacy_reduction
def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",  # noqa: A002
            weight: Tensor | None = None) -> Tensor:
    """The absolute error ``|input - target|``, reduced; ``weight`` as :func:`mse_loss`'s."""
    if weight is None:
        return _reduce((input - target).abs(), reduction)
    _check_weight(weight, input)
    return _reduce_weighted((input - target).abs() * weight, weight, reduction)


@takes_legacy_reduction
def smooth_l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",  # noqa: A002
                   beta: float = 1.0) -> Tensor:
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,  # noqa: A002
               weight: Tensor | None = None) -> Tensor:
    """The Huber loss: ``0.5 * d ** 2`` where ``d = |input - target|`` is below ``delta``, else
    ``delta * (d - 0.5 * delta)``, reduced; ``weight`` (torch 2.13; ``input``'s size) multiplies each element's, and
    ``"mean"`` is then the plain mean of the weighted losses (torch's rule here, unlike :func:`mse_loss`'s)."""
    if weight is not None:
        _check_weight(weight, input)
    d = (input - target).abs()
    loss = where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    if weight is None:
        return _reduce(loss, reduction)
    return _reduce_weighted(loss * weight, weight, reduction, mean_by_weight=False)


@takes_legacy_reduction
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,  # noqa: A002
             ignore_index: int = -100, reduce=None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class indices ``target`` under log-probabilities ``input`` ([N, C, ...])."""
    if weight is None and reduction in ("mean", "sum", "none") and input.dtype in _EXACT_COUNT \
            and _none_ignored(target, ignore_index):
        # every target counts: the loss without the mask and per-element weights of ones, the same values in 4
        # nodes rather than 11 (and a backward graph that much smaller)
        unbatched = input.ndim == 1
        lp = input.unsqueeze(0) if unbatched else input
        lp = lp.movedim(1, -1) if lp.ndim > 2 else lp
        idx = target.unsqueeze(0) if unbatched else target
        picked = lp.gather(-1, idx.unsqueeze(-1))  # (the log-probabilities picked, with a last dim of 1)
        # (a reduction sums the picked values as they are and negates once: -sum(x) is sum(-x) exactly, rounding
        # being symmetric, and s / -n is -(s / n); the gradient's values are the same too)
        if reduction == "mean":
            return picked.sum() / -picked.numel()  # (the general path's sum of weights: the count, exactly)
        if reduction == "sum":
            return -picked.sum()
        picked = -picked.squeeze(-1)
        return picked.squeeze(0) if unbatched else picked
    return _nll(input, target, weight, ignore_index, reduction)[0]


#: the dtypes in which a sum of ones is the count exactly (for any batch a loss is computed on)
_EXACT_COUNT = (D.float32, D.float64)


def _none_ignored(target: Tensor, ignore_index) -> bool:
    """Whether no element of ``target`` is ``ignore_index``, by its value the client holds (a target made from host
    data, as most are, or a view of one); False when it does not hold it, or while ``tw.compile`` records (a replay
    may read other targets)."""
    s = target._s
    if s._capture is not None or target.dtype.is_floating_point:
        return False
    v = s._known.peek(target._id) if target._base is None else s._known.held(target)  # (a view: ``targets[i]`` of
    if v is None:  # a sequence's targets, one a step, from its root's value)
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


@takes_legacy_reduction
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


@takes_legacy_reduction
def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,  # noqa: A002
                         reduce=None, reduction: str = "mean") -> Tensor:
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100, written as torch's kernel computes it:
    ``(t - 1) * max(log1p(-x), -100) - t * max(log(x), -100)`` (``log1p``: exact for x near 0, where ``1 - x``
    rounds to 1; one op fewer than the textbook form, forward and backward)."""
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Using a target size ({list(target.shape)}) that is different to the input size "
                         f"({list(input.shape)}) is deprecated. Please ensure they have the same size.")
    lx = input.log().clamp(min=-100)
    l1 = (-input).log1p().clamp(min=-100)
    loss = (target - 1) * l1 - target * lx
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@takes_legacy_reduction
def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                     size_average=None, reduce=None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """Stable BCE on logits: (1 - t) x + (1 + (pw - 1) t) softplus(-x), whose gradient is torch's, sigmoid(x) - t
    scaled, everywhere (softplus' rule: at x == 0 too, where |x| and max(-x, 0) have subgradients of their own)."""
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Target size ({list(target.shape)}) must be the same as input size ({list(input.shape)})")
    sp = (-input)._rec("softplus", [-input], {"beta": 1.0, "threshold": 20.0})
    if pos_weight is not None:
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * sp
    else:
        loss = (1 - target) * input + sp
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)

