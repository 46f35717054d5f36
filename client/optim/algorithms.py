"""SGD, Adam, AdamW, SparseAdam, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD, Adafactor and Muon
with torch's update rules (the single-tensor form torch runs on CPU tensors, the same arithmetic in the same order).

``foreach``, ``fused``, ``capturable`` and ``differentiable`` are accepted and kept in the param groups (so
``state_dict`` has torch's keys) but change nothing: every step is one recorded graph the cluster fuses and
replays anyway, and the updates always run outside autograd."""

from __future__ import annotations

import functools
import math

import numpy as np

from tensorwire.creation import full_like, zeros_like
from tensorwire.dtype_info import finfo
from tensorwire.functions import where
from tensorwire.nn._tensors import alias
from tensorwire.protocol import dtypes as D
from tensorwire.protocol.dtypes import get_default_dtype
from tensorwire.protocol.graph import attrs_key
from tensorwire.protocol.ops.table import infer

from .optimizer import _STEP, _WHERE, Optimizer, _set_state, required


def _c(p, v):
    """A constant hyperparameter as a cached 0-d tensor of ``p``'s dtype (exact for float64 parameters)."""
    return p._s.scalar(float(v), p.dtype, p._dev)


def _d(p, v, replay=None):
    """A hyperparameter that changes between steps (lr, bias corrections): a fresh ``full`` node every step
    (once per value, dtype and device), never a cached scalar, so every step records the same structure and
    only the dynamic ``value`` differs (the cluster replays the plan). ``replay``: a function computing the value
    again from the optimizer's state, which a ``tw.compile`` replay calls instead of running this code."""
    key = (float(v), p.dtype.name, p._dev, id(p._s))
    t = _STEP.get(key)
    if t is None:
        attrs = {"shape": [], "dtype": p.dtype.name, "value": float(v)}
        t = _STEP[key] = p._s.record("full", [], attrs, p._dev, _full_known(attrs), _STEP.get(_WHERE))
        cap = p._s._capture
        if cap is not None and replay is not None:
            cap.provide([t], lambda: {"value": float(replay())})
    return t


#: Session.record's ``known`` (attrs key, output meta) of a 0-d ``full`` by dtype name: its value, the one dynamic
#: attribute, is in neither, so one inference serves every step's hyperparameters
_FULL_0D: dict = {}


def _full_known(attrs: dict) -> tuple:
    """The ``known`` of a 0-d ``full`` with ``attrs`` (inferred once per dtype)."""
    known = _FULL_0D.get(attrs["dtype"])
    if known is None:
        akey = attrs_key("full", attrs)
        known = _FULL_0D[attrs["dtype"]] = (akey, infer("full", [], attrs, akey))
    return known


def _count_step(p, state) -> int:
    """``state["step"] += 1``, also on every ``tw.compile`` replay of this step; returns the new count."""
    state["step"] += 1
    cap = p._s._capture
    if cap is not None:
        cap.effect(functools.partial(_bump, state))
    return state["step"]


def _bump(state) -> None:
    state["step"] += 1


def _fused(p, op: str, ins: list, attrs: dict, akey=None):
    """One fused update op (``protocol/ops/optim.py``: adam_*, sgd_*) on ``p``'s device, outside autograd (the
    updates are not differentiable and run under no_grad), from the step's user line (found once a step).

    ``akey``: the attrs key of ``attrs``, when the caller made it once for many parameters (:func:`_adam_group`)."""
    return p._s.record(op, ins, attrs, p._dev, where=_STEP.get(_WHERE), akey=akey)


_ADAM_OPS = ("adam_exp_avg", "adam_exp_avg_sq", "adam_param")


def _adam_group(group: dict) -> tuple:
    """What every parameter of ``group`` shares in the Adam step being recorded, made once a step per group (the
    hyperparameters, which nothing changes during a step): ``(lr, beta1, beta2, weight_decay, decoupled, l2,
    attrs of the three ops, their attrs keys)``."""
    key = ("adam", id(group))
    got = _STEP.get(key)
    if got is None:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        decoupled = bool(wd != 0 and group.get("decoupled_weight_decay"))
        l2 = wd if wd != 0 and not decoupled else 0
        attrs = ({"beta1": b1, "weight_decay": l2}, {"beta2": b2, "weight_decay": l2}, {"eps": eps})
        akeys = tuple(attrs_key(op, a) for op, a in zip(_ADAM_OPS, attrs))
        got = _STEP[key] = (lr, b1, b2, wd, decoupled, l2, attrs, akeys)
    return got


def _adam_scalars(group: dict, p, state: dict, step: int) -> list:
    """``adam_param``'s 0-d inputs for a parameter of ``group`` at ``step``: the step size, the square root of the
    second bias correction (and AdamW's decay); the same tensors for every parameter of the group at that step
    count, found with one lookup rather than one :func:`_d` each (the replays read ``state``'s count, as before)."""
    key = ("adam_scalars", id(group), step, p.dtype, p._dev, id(p._s))
    got = _STEP.get(key)
    if got is None:
        lr, b1, b2, wd, decoupled = _adam_group(group)[:5]
        got = [_d(p, lr / (1 - b1 ** step), lambda: group["lr"] / (1 - b1 ** state["step"])),
               _d(p, math.sqrt(1 - b2 ** step), lambda: math.sqrt(1 - b2 ** state["step"]))]
        if decoupled:
            got.append(_d(p, 1 - lr * wd, lambda: 1 - group["lr"] * wd))
        _STEP[key] = got
    return got


def _zeros_like(p):
    return zeros_like(p)


def _count_moments(p, state: dict, second: str = "exp_avg_sq", **first) -> int:
    """The Adam family's state, made at a parameter's first step as torch's single-tensor code makes it (``step``,
    the values ``first``, ``exp_avg`` and ``second`` of zeros, in that order), and its step count, counted: the new
    one (SparseAdam, Adamax, NAdam, RAdam)."""
    if not state:
        state["step"] = 0
        state.update(first)
        state["exp_avg"] = _zeros_like(p)
        state[second] = _zeros_like(p)
    state["step"] += 1
    return state["step"]


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay (torch's rule)."""

    _replayable = True

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False, foreach=None,
                 differentiable: bool = False, fused=None):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def _update(self, group, p, grad, state):
        wd, mom = group["weight_decay"], group["momentum"]
        lr = _d(p, group["lr"], lambda: group["lr"])
        if mom == 0:
            return _fused(p, "sgd_update", [p, grad, lr], {"weight_decay": wd, "momentum": 0})
        buf = state.get("momentum_buffer")
        if buf is None:  # torch: the first buffer is a copy of the (decayed) gradient
            buf = _set_state(state, "momentum_buffer", (grad + p * _c(p, wd)) if wd != 0 else grad.clone())
        else:
            ins = [buf, grad, p] if wd != 0 else [buf, grad]
            buf = _set_state(state, "momentum_buffer", _fused(p, "sgd_momentum", ins, {
                "momentum": mom, "dampening": group["dampening"], "weight_decay": wd}))
        if group["nesterov"]:
            return _fused(p, "sgd_update", [p, grad, lr, buf], {"weight_decay": wd, "momentum": mom})
        return _fused(p, "sgd_update", [p, buf, lr], {"weight_decay": 0, "momentum": 0})


class Adam(Optimizer):
    """Adam (and AMSGrad) with torch's update; ``state["step"]`` is a Python int (no device sync)."""

    _replayable = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 amsgrad: bool = False, *, foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None, decoupled_weight_decay: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _update(self, group, p, grad, state):
        if not state:
            state["step"] = 0
            state["exp_avg"] = _zeros_like(p)
            state["exp_avg_sq"] = _zeros_like(p)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = _zeros_like(p)
        step = _count_step(p, state)
        l2, attrs, akeys = _adam_group(group)[5:]
        ins = [grad, p] if l2 else [grad]
        m = _set_state(state, "exp_avg", _fused(p, "adam_exp_avg", [state["exp_avg"], *ins], attrs[0], akeys[0]))
        v = _set_state(state, "exp_avg_sq", _fused(p, "adam_exp_avg_sq", [state["exp_avg_sq"], *ins], attrs[1],
                                                   akeys[1]))
        if group["amsgrad"]:
            v = _set_state(state, "max_exp_avg_sq", state["max_exp_avg_sq"].maximum(v))
        return _fused(p, "adam_param", [p, m, v, *_adam_scalars(group, p, state, step)], attrs[2], akeys[2])


class AdamW(Adam):
    """Adam with decoupled weight decay (default 1e-2): ``p *= 1 - lr * wd`` before the Adam update."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False, foreach=None, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, foreach=foreach,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)


class SparseAdam(Optimizer):
    """Adam for embeddings trained with ``sparse=True`` (torch's "lazy" Adam): the moments and the parameter change only
    in the rows the gradient has, with torch's arithmetic in torch's order (``optim._functional.sparse_adam``);
    ``state["step"]`` counts every step, as torch's.

    tensorwire's sparse gradients are dense (``nn.Embedding(sparse=True)``: README), so the rows of the gradient are
    its rows with a nonzero element (along the first dimension). A row looked up whose gradient is exactly zero is left
    as it is, where torch decays its moments and moves it by them; any other row is updated as torch updates it. A
    dense gradient is therefore accepted (torch refuses one: its sparse gradients are sparse tensors)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, maximize: bool = False):
        if not 0.0 < lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, maximize=maximize))
        for gi, group in enumerate(self.param_groups):
            for pi, q in enumerate(group["params"]):
                if getattr(q, "is_sparse", False):
                    raise ValueError(f"Sparse params at indices {[[gi, pi]]}: SparseAdam requires dense parameter "
                                     "tensors")
                if q.dtype.is_complex:
                    raise ValueError(f"Complex params at indices {[[gi, pi]]}: SparseAdam does not support complex "
                                     "parameters")

    def _update(self, group, p, grad, state):
        (b1, b2), eps = group["betas"], group["eps"]
        step = _count_moments(p, state)
        nz = grad != 0
        if nz.ndim > 1:  # (a row is the gradient's where any of its elements is nonzero)
            nz = nz.reshape(nz.shape[0], -1).any(1).reshape([nz.shape[0]] + [1] * (nz.ndim - 1))
        m, v = state["exp_avg"], state["exp_avg_sq"]
        # old += (1 - b) * (new - old), in the rows: torch's sub, mul_ and add_, then numer = update + old
        m_new = m + (grad - m) * _c(p, 1 - b1)
        v_new = v + (grad * grad - v) * _c(p, 1 - b2)
        _set_state(state, "exp_avg", where(nz, m_new, m))
        _set_state(state, "exp_avg_sq", where(nz, v_new, v))
        step_size = group["lr"] * math.sqrt(1 - b2 ** step) / (1 - b1 ** step)
        change = _d(p, -step_size) * (m_new / (v_new.sqrt() + _c(p, eps)))
        return where(nz, p + change, p)


class RMSprop(Optimizer):
    """RMSprop (centered and momentum variants) with torch's update."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0,
                 momentum: float = 0, centered: bool = False, capturable: bool = False, foreach=None,
                 maximize: bool = False, differentiable: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, group, p, grad, state):
        lr, alpha, eps, wd, mom = (group[k] for k in ("lr", "alpha", "eps", "weight_decay", "momentum"))
        if not state:
            state["step"] = 0
            state["square_avg"] = _zeros_like(p)
            if mom > 0:
                state["momentum_buffer"] = _zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = _zeros_like(p)
        state["step"] += 1
        if wd != 0:
            grad = grad + p * _c(p, wd)
        sq = _set_state(state, "square_avg", state["square_avg"] * _c(p, alpha) + grad * grad * _c(p, 1 - alpha))
        if group["centered"]:
            ga = _set_state(state, "grad_avg", state["grad_avg"].lerp(grad, _c(p, 1 - alpha)))
            avg = (sq - ga * ga).sqrt() + _c(p, eps)
        else:
            avg = sq.sqrt() + _c(p, eps)
        if mom > 0:
            buf = _set_state(state, "momentum_buffer", state["momentum_buffer"] * _c(p, mom) + grad / avg)
            return p - buf * _d(p, lr)
        return p - (grad / avg) * _d(p, lr)


class Adagrad(Optimizer):
    """Adagrad with torch's update (``lr_decay``, ``initial_accumulator_value``, weight decay)."""

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach=None, *, maximize: bool = False,
                 differentiable: bool = False, fused=None):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps,
                                      maximize=maximize, foreach=foreach, differentiable=differentiable, fused=fused))
        for g in self.param_groups:
            for p in g["params"]:
                st = self.state[p]
                st["step"] = 0
                st["sum"] = full_like(p, g["initial_accumulator_value"])

    def _update(self, group, p, grad, state):
        if not state:  # a parameter of a group added after construction (add_param_group)
            state["step"] = 0
            state["sum"] = full_like(p, group["initial_accumulator_value"])
        state["step"] += 1
        if group["weight_decay"] != 0:
            grad = grad + p * _c(p, group["weight_decay"])
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        s = _set_state(state, "sum", state["sum"] + grad * grad)
        return p - (grad / (s.sqrt() + _c(p, group["eps"]))) * _d(p, clr)


def _check(lr: float, eps: float, weight_decay: float, betas=None) -> None:
    """torch's argument checks (same messages)."""
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if betas is not None:
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


def _moments(p, grad, state, b1: float, b2: float):
    """Adam's moment updates as torch's single-tensor NAdam/RAdam write them:
    ``exp_avg.lerp_(grad, 1 - b1)``; ``exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)``."""
    m = _set_state(state, "exp_avg", state["exp_avg"].lerp(grad, _c(p, 1 - b1)))
    v = _set_state(state, "exp_avg_sq", state["exp_avg_sq"] * _c(p, b2) + _c(p, 1 - b2) * grad * grad)
    return m, v


def _decay(group, p, grad):
    """Weight decay of NAdam/RAdam: decoupled (``p *= 1 - lr * wd``) or L2 (``grad += wd * p``).
    Returns ``(p, grad)``."""
    wd = group["weight_decay"]
    if wd == 0:
        return p, grad
    if group["decoupled_weight_decay"]:
        return p * _d(p, 1 - group["lr"] * wd), grad
    return p, grad + _c(p, wd) * p


class Adadelta(Optimizer):
    """Adadelta (Zeiler 2012) with torch's update: running averages of squared gradients and squared updates;
    ``lr`` (default 1.0) scales the update."""

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0,
                 foreach=None, *, capturable: bool = False, maximize: bool = False, differentiable: bool = False):
        _check(lr, eps, weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                                      capturable=capturable, foreach=foreach, differentiable=differentiable))

    def _update(self, group, p, grad, state):
        rho, eps, wd = group["rho"], group["eps"], group["weight_decay"]
        if not state:
            state["step"] = 0
            state["square_avg"] = _zeros_like(p)
            state["acc_delta"] = _zeros_like(p)
        state["step"] += 1
        if wd != 0:
            grad = grad + _c(p, wd) * p
        sq = _set_state(state, "square_avg", state["square_avg"] * _c(p, rho) + _c(p, 1 - rho) * grad * grad)
        std = (sq + _c(p, eps)).sqrt()
        delta = (state["acc_delta"] + _c(p, eps)).sqrt() / std * grad
        _set_state(state, "acc_delta", state["acc_delta"] * _c(p, rho) + _c(p, 1 - rho) * delta * delta)
        return p - _d(p, group["lr"]) * delta


class Adamax(Optimizer):
    """Adamax (Adam with the infinity norm) with torch's update."""

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 foreach=None, *, maximize: bool = False, differentiable: bool = False, capturable: bool = False):
        _check(lr, eps, weight_decay, betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def _update(self, group, p, grad, state):
        (b1, b2), eps, wd = group["betas"], group["eps"], group["weight_decay"]
        _count_moments(p, state, "exp_inf")
        if wd != 0:
            grad = grad + _c(p, wd) * p
        m = _set_state(state, "exp_avg", state["exp_avg"].lerp(grad, _c(p, 1 - b1)))
        u = _set_state(state, "exp_inf", (state["exp_inf"] * _c(p, b2)).maximum(grad.abs() + _c(p, eps)))
        clr = group["lr"] / (1 - b1 ** state["step"])
        return p + _d(p, -clr) * m / u  # torch's addcdiv_(exp_avg, exp_inf, value=-clr)


def _scalar_round(x: float) -> float:
    """``x`` as torch holds a scalar state tensor (``mu_product``): in the default dtype (float32 unless
    ``tw.set_default_dtype(tw.float64)``)."""
    return float(np.asarray(x, get_default_dtype().np)) if get_default_dtype().np != np.float64 else x


class NAdam(Optimizer):
    """NAdam (Adam with Nesterov momentum and momentum decay) with torch's update; ``decoupled_weight_decay``
    gives NAdamW. ``state["mu_product"]`` is a Python number rounded as torch's float32 scalar tensor."""

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False):
        _check(lr, eps, weight_decay, betas)
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, group, p, grad, state):
        lr, (b1, b2), eps, md = group["lr"], group["betas"], group["eps"], group["momentum_decay"]
        step = _count_moments(p, state, mu_product=1.0)
        bc2 = 1 - b2 ** step
        p, grad = _decay(group, p, grad)
        mu = b1 * (1.0 - 0.5 * (0.96 ** (step * md)))
        mu_next = b1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * md)))
        mu_product = state["mu_product"] = _scalar_round(_scalar_round(state["mu_product"]) * _scalar_round(mu))
        m, v = _moments(p, grad, state, b1, b2)
        denom = (v / _d(p, bc2)).sqrt() + _c(p, eps)
        p = p + _d(p, -lr * (1.0 - mu) / (1.0 - mu_product)) * grad / denom
        return p + _d(p, (-lr * mu_next) / (1.0 - mu_product * mu_next)) * m / denom


class RAdam(Optimizer):
    """RAdam (variance-rectified Adam) with torch's update: plain momentum steps while the variance estimate is
    not tractable (``rho_t <= 5``); ``decoupled_weight_decay`` gives RAdamW."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 decoupled_weight_decay: bool = False, *, foreach=None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False):
        _check(lr, eps, weight_decay, betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                                      foreach=foreach, capturable=capturable, differentiable=differentiable))

    def _update(self, group, p, grad, state):
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        step = _count_moments(p, state)
        p, grad = _decay(group, p, grad)
        m, v = _moments(p, grad, state, b1, b2)
        bc1 = 1 - b1 ** step
        bc2 = 1 - b2 ** step
        corrected = m / _d(p, bc1)
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * step * (b2 ** step) / bc2
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            adaptive = _d(p, bc2 ** 0.5) / (v.sqrt() + _c(p, eps))
            return p - corrected * _d(p, lr) * adaptive * _d(p, rect)
        return p - corrected * _d(p, lr)


class Rprop(Optimizer):
    """Resilient backpropagation with torch's update: a step size per element, multiplied by ``etas[1]`` while its
    gradient keeps its sign and by ``etas[0]`` when it flips (that step is then skipped: its gradient counts as 0),
    kept within ``step_sizes``; the parameter moves by the step size against the gradient's sign."""

    def __init__(self, params, lr: float = 1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable: bool = False, foreach=None, maximize: bool = False, differentiable: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, capturable=capturable))

    def _update(self, group, p, grad, state):
        (etaminus, etaplus), (lo, hi) = group["etas"], group["step_sizes"]
        if not state:
            state["step"] = 0
            state["prev"] = _zeros_like(p)
            state["step_size"] = full_like(p, group["lr"])
        state["step"] += 1
        sign = (grad * state["prev"]).sign()
        # torch writes etaplus / etaminus / 1 into sign where it is > 0 / < 0 / 0
        factor = where(sign > 0, _c(p, etaplus), where(sign < 0, _c(p, etaminus), _c(p, 1)))
        size = _set_state(state, "step_size", (state["step_size"] * factor).clamp(lo, hi))
        # where the sign flipped, no step and no memory of the gradient
        grad = _set_state(state, "prev", where(sign < 0, _c(p, 0), grad))
        return p - grad.sign() * size  # torch's addcmul_(grad.sign(), step_size, value=-1)


class ASGD(Optimizer):
    """Averaged SGD (Polyak and Juditsky) with torch's update: ``p *= 1 - lambd * eta``, ``p -= eta * grad``, then
    ``ax``, the average of the iterates from step ``t0`` on. ``state["eta"]`` and ``state["mu"]`` are Python numbers
    rounded to the default dtype after each step, exactly as torch's scalar tensors (``state["step"]`` an int)."""

    def __init__(self, params, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
                 weight_decay: float = 0, foreach=None, maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def _update(self, group, p, grad, state):
        lr, lambd, alpha, t0, wd = (group[k] for k in ("lr", "lambd", "alpha", "t0", "weight_decay"))
        if not state:
            state["step"] = 0
            state["eta"] = _scalar_round(lr)
            state["mu"] = 1.0
            state["ax"] = _zeros_like(p)
        state["step"] += 1
        step = state["step"]
        if wd != 0:
            grad = grad + p * _c(p, wd)
        eta, mu = float(state["eta"]), float(state["mu"])  # (float(): a state loaded from torch holds tensors)
        p = p * _d(p, 1 - lambd * eta)
        p = p + grad * _d(p, -eta)
        if mu != 1:
            _set_state(state, "ax", state["ax"] + (p - state["ax"]) * _d(p, mu))
        else:
            _set_state(state, "ax", alias(p))
        state["eta"] = _scalar_round(lr / ((1 + lambd * lr * step) ** alpha))
        state["mu"] = _scalar_round(1 / max(1, step - t0))
        return p


class Adafactor(Optimizer):
    """Adafactor (Shazeer and Stern 2018) as torch 2.13's ``torch.optim.Adafactor``: the second moment of a
    parameter of 2 or more dims kept factored, its mean over the last dim (``state["row_var"]``, last dim 1) and over
    the one before (``state["col_var"]``), their product over the row factor's mean estimating it; a vector's (or a
    scalar's) whole (``state["variance"]``). The running averages decay by ``1 - t ** beta2_decay``; the step is the
    relative step size ``min(lr, 1 / sqrt(t))`` times the parameter's RMS (at least ``eps[1]``), the update clipped to
    an RMS of ``d``; ``eps[0]`` (None: the first updated parameter's dtype's machine epsilon, as torch's loop leaves
    it) floors the estimate; ``weight_decay`` is decoupled (``p *= 1 - lr * weight_decay``).

    torch reads the parameter's and the update's norms to the host (``.item()``); here they stay 0-d device tensors,
    so ``step()`` does not sync (float64: the same values, float32: the same to rounding, torch taking the two
    scalars in double). ``state["step"]`` is a Python int (torch: a float32 tensor); ``foreach`` is accepted and kept,
    and changes nothing."""

    def __init__(self, params, lr: float = 1e-2, beta2_decay: float = -0.8, eps=(None, 1e-3), d: float = 1.0,
                 weight_decay: float = 0.0, *, foreach=None, maximize: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize))

    def _update(self, group, p, grad, state):
        if p.dtype.is_complex:
            raise RuntimeError("Adafactor does not support complex parameters")
        lr, wd, clip = group["lr"], group["weight_decay"], group["d"]
        eps1, eps2 = group["eps"]
        if eps1 is None:  # (torch's loop sets it from the first parameter it updates, then keeps it for the group)
            eps1 = _STEP.setdefault(("adafactor_eps1", id(group)), finfo(p.dtype).eps)
        if not state:
            state["step"] = 0
            if grad.ndim > 1:
                state["row_var"] = grad.new_zeros((*grad.shape[:-1], 1))
                state["col_var"] = grad.new_zeros((*grad.shape[:-2], 1, grad.shape[-1]))
            else:
                state["variance"] = _zeros_like(grad)
        state["step"] += 1
        step = float(state["step"])
        beta = _d(p, step ** group["beta2_decay"])  # 1 - beta2_t, the running averages' weight
        rms_p = p.norm(2) / _c(p, p.numel() ** 0.5)
        alpha = rms_p.clamp(min=eps2) * _d(p, min(lr, 1 / (step ** 0.5)))
        if wd != 0:
            p = p * _d(p, 1 - lr * wd)
        if grad.ndim > 1:
            # torch's (norm ** 2) / size for the mean of the squares over a dim
            row = _set_state(state, "row_var", state["row_var"].lerp(
                grad.norm(2, -1, keepdim=True).square() / _c(p, grad.shape[-1]), beta))
            col = _set_state(state, "col_var", state["col_var"].lerp(
                grad.norm(2, -2, keepdim=True).square() / _c(p, grad.shape[-2]), beta))
            # torch's row_var @ col_var: an outer product (inner size 1), each element one multiplication
            var = (row * col) / row.mean(-2, keepdim=True).clamp(min=eps1)
        else:
            var = _set_state(state, "variance", state["variance"].lerp(grad * grad, beta))
        update = var.clamp(min=eps1 * eps1).rsqrt() * grad
        denom = (update.norm(2) / _c(p, (update.numel() ** 0.5) * clip)).clamp(min=1.0)
        return p + update * -(alpha / denom)


#: torch's Muon defaults: the quintic Newton-Schulz coefficients, steps and the normalisation's floor
_MUON_NS = (3.4445, -4.7750, 2.0315)
_MUON_NS_STEPS = 5
_MUON_EPS = 1e-7


def _bf16(x):
    """``x`` (float32) rounded to bfloat16 and held in float32: what one torch op on bfloat16 tensors gives, its
    float32 arithmetic rounded once."""
    return x.to(D.bfloat16).to(D.float32)


def _newton_schulz(update, coefficients: tuple, steps: int, eps: float):
    """torch's ``_zeropower_via_newtonschulz``: ``steps`` quintic Newton-Schulz iterations towards the orthogonal
    factor of a 2-D ``update`` (on the wide orientation: a tall matrix is transposed there and back), after dividing
    by its Frobenius norm (at least ``eps``). In bfloat16 as torch's: each of torch's ops (the norm, the division, a
    Gram matrix, the two ``addmm``) is computed in float32 and rounded to bfloat16 once, as torch's CPU kernels do
    (bfloat16 matmuls accumulate in float32), rather than in bfloat16 steps, which would round every partial sum.
    Returns bfloat16 values held in float32."""
    if steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if update.ndim != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = coefficients
    tall = update.shape[0] > update.shape[1]
    x = update.to(D.bfloat16).to(D.float32)
    if tall:
        x = x.transpose(0, 1)
    x = _bf16(x / _bf16(x.norm()).clamp(min=eps))
    for _ in range(steps):
        gram = _bf16(x @ x.transpose(0, 1))
        x = _bf16(x * a + _bf16(gram * b + (gram @ gram) * c) @ x)  # addmm(x, addmm(gram, gram, gram, b, c), x, a)
    return x.transpose(0, 1) if tall else x


class Muon(Optimizer):
    """Muon (Jordan et al.) as torch 2.13's ``torch.optim.Muon``, for 2-D parameters only: a momentum buffer
    (``buf.lerp_(grad, 1 - momentum)``; ``nesterov``: the update is ``grad.lerp(buf, momentum)``) orthogonalised by
    :func:`_newton_schulz` (bfloat16, as torch's), then decoupled weight decay (``p *= 1 - lr * weight_decay``) and
    ``p -= lr' * update`` with ``lr'`` the learning rate scaled for the shape (``adjust_lr_fn``: ``"original"``
    (None), ``sqrt(max(1, rows / cols))``; ``"match_rms_adamw"``, ``0.2 sqrt(max(rows, cols))``). ``state`` holds
    ``momentum_buffer`` alone, as torch's."""

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1, momentum: float = 0.95,
                 nesterov: bool = True, ns_coefficients: tuple = _MUON_NS, eps: float = _MUON_EPS,
                 ns_steps: int = _MUON_NS_STEPS, adjust_lr_fn: str | None = None):
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        if adjust_lr_fn is not None and adjust_lr_fn not in ("original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                                      ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps,
                                      adjust_lr_fn=adjust_lr_fn))
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon only supports 2D parameters whereas we found a parameter with size: "
                                     f"{list(p.shape)}")

    def _update(self, group, p, grad, state):
        if p.dtype.is_complex:
            raise RuntimeError("Muon does not support complex parameters")
        if grad.ndim != 2:
            raise ValueError("Param gradient must be a 2D matrix")
        lr, wd, mom = group["lr"], group["weight_decay"], group["momentum"]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = _zeros_like(grad)
        buf = _set_state(state, "momentum_buffer", state["momentum_buffer"].lerp(grad, _c(p, 1 - mom)))
        update = grad.lerp(buf, _c(p, mom)) if group["nesterov"] else buf
        update = _newton_schulz(update, tuple(group["ns_coefficients"]), group["ns_steps"], group["eps"])
        rows, cols = p.shape[:2]
        fn = group["adjust_lr_fn"]
        ratio = math.sqrt(max(1, rows / cols)) if fn in (None, "original") else 0.2 * math.sqrt(max(rows, cols))
        p = p * _d(p, 1 - lr * wd)
        return p + update.to(p.dtype) * _d(p, -(lr * ratio))
