"""``tw.nn.utils``: gradient clipping (computed and applied on the cluster, no sync), parameter/vector conversion,
``rnn`` (``tw.nn.utils.rnn``: ``PackedSequence`` and the pad/pack functions, as torch's), the hook-based
``weight_norm``/``spectral_norm``, ``parametrize`` and ``parametrizations``, BatchNorm fusion, ``skip_init`` and
``stateless`` (``functional_call``)."""

from __future__ import annotations

import math
import warnings

from tensorwire import autograd_hooks
from tensorwire._frames import _user_frame
from tensorwire.creation import tensor
from tensorwire.functions import cat
from tensorwire.protocol.graph import attrs_key
from tensorwire.tensor import Tensor

from .._tensors import no_grad, rebind
from . import parametrizations, parametrize, rnn, stateless
from .fusion import fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval, fuse_linear_bn_weights
from .init import skip_init
from .spectral_norm import remove_spectral_norm, spectral_norm
from .weight_norm import remove_weight_norm, weight_norm

__all__ = ["clip_grad_norm", "clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "fuse_conv_bn_eval",
           "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights", "get_total_norm",
           "parameters_to_vector", "parametrizations", "parametrize", "remove_spectral_norm", "remove_weight_norm",
           "rnn", "skip_init", "spectral_norm", "stateless", "vector_to_parameters", "weight_norm"]


def _grads(parameters) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """The ``norm_type``-norm of the norms of ``tensors`` (a 0-d tensor on the first tensor's device)."""
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    if not tensors:
        return tensor(0.0)
    norm_type = float(norm_type)
    dev = tensors[0]._dev
    if len(tensors) == 1:
        total = tensors[0].norm(norm_type)
    else:
        # torch's norm of the stacked norms: each norm taken with its dims kept, so a 1-D tensor's is a [1] row
        # already, and the rows joined with one cat (a stack of 0-d norms records a reshape for each)
        where, attrs = _user_frame(1), {"dims": None, "keepdim": True, "p": norm_type}
        akey = attrs_key("norm", attrs)  # (one attrs dict and key for every norm)
        norms = [_norm_row(t, norm_type, dev, where, attrs, akey) for t in tensors]
        total = cat(norms).norm(norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    return total


def _norm_row(t: Tensor, norm_type: float, dev: str, where, attrs: dict, akey) -> Tensor:
    """``t``'s ``norm_type``-norm over all its elements as a ``[1]`` tensor on ``dev``; ``where``, ``attrs`` and
    ``akey``: the user's line, the norm's attrs and their key, made once for all the norms (:func:`_record_direct`)."""
    n = _record_direct(t, "norm", [t], attrs, akey, where)
    if n is None:
        n = t.norm(norm_type, None, True)  # (shape [1] * t.ndim)
    if n.ndim != 1:
        n = n.reshape(1)
    return n if n._dev == dev else n.to(dev)


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """Scale the gradients so their total norm is at most ``max_norm``; returns the total norm (a tensor):
    :func:`get_total_norm` then :func:`clip_grads_with_norm_`, as torch's.

    Like torch, the scale is ``min(1, max_norm / (total + 1e-6))`` applied unconditionally (no sync)."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = _grads(params)
    if not grads:
        return tensor(0.0)
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    clip_grads_with_norm_(params, max_norm, total, foreach)
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor, foreach=None) -> None:
    """Scale the gradients by ``min(1, max_norm / (total_norm + 1e-6))``, ``total_norm`` given (a tensor, as
    :func:`get_total_norm` returns, or a number): torch's second half of :func:`clip_grad_norm_`, no sync.
    ``foreach`` is accepted (the scaling is recorded per gradient either way)."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    if not _grads(params):
        return
    max_norm = float(max_norm)
    if isinstance(total_norm, Tensor):
        coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
    else:
        coef = tensor(min(1.0, max_norm / (float(total_norm) + 1e-6)))
    scales: dict = {}  # the scale per (device, dtype) of the gradients: converted once, not once a parameter
    where = _user_frame(1)
    for p in params:
        g = p.grad
        if g is not None:
            key = (g._dev, g.dtype)
            c = scales.get(key)
            if c is None:
                c = scales[key] = coef.to(g._dev).to(g.dtype)
            scaled = _record_direct(g, "mul", [g, c], None, None, where)
            p.grad = scaled if scaled is not None else g * c


def clip_grad_norm(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach=None) -> Tensor:
    """Deprecated (a FutureWarning, as torch's): :func:`clip_grad_norm_`."""
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def _record_direct(t: Tensor, op: str, ins: list, attrs: dict | None, akey, where) -> Tensor | None:
    """``op`` recorded on ``t``'s session outside autograd, as torch's clipping runs under ``no_grad``, with its
    attrs key and the user's line found once for all the gradients (``Session.record``'s ``akey``, as an optimizer's
    updates are, ``optim/algorithms.py``); None while an autocast scope is on (its casts apply: the caller records
    the usual way). ``akey``: the attrs key of ``attrs``."""
    if autograd_hooks._amp_active[0]:
        return None
    return t._s.record(op, ins, attrs, t._dev, where=where, akey=akey)


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient to ``[-clip_value, clip_value]``."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for p in params:
        if p.grad is not None:
            p.grad = p.grad.clamp(-clip_value, clip_value)

def parameters_to_vector(parameters) -> Tensor:
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected a tw.Tensor, but got: {type(vec).__name__}")
    i = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            rebind(p, vec[i:i + n].reshape(p.shape).to(p.dtype).clone())
            i += n
