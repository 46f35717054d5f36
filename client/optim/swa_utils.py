"""``tw.optim.swa_utils``: Stochastic Weight Averaging and EMA (torch's ``torch.optim.swa_utils``).

:class:`AveragedModel` keeps a copy of a model whose parameters (and, with ``use_buffers``, buffers) are a running
average of the model's: equal weights by default (SWA), or what ``avg_fn`` (one tensor at a time) or
``multi_avg_fn`` (lists of tensors, in place) computes; :func:`get_ema_multi_avg_fn` and friends make torch's
averaging functions. :class:`SWALR` anneals each group's learning rate to a fixed ``swa_lr``, and :func:`update_bn`
recomputes the BatchNorm statistics of a model with one pass over a loader. The code follows torch 2.13's."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterable
from copy import deepcopy
from typing import Any, Literal

from tensorwire import foreach as _F
from tensorwire.autograd_engine import no_grad
from tensorwire.creation import tensor as _tensor
from tensorwire.nn.layers import _BatchNorm
from tensorwire.nn.module import Module
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Tensor
from tensorwire.tensor import device as Device

from .lr_scheduler import LRScheduler, _format_param
from .optimizer import Optimizer

__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn", "get_swa_multi_avg_fn", "get_ema_avg_fn",
           "get_swa_avg_fn"]

PARAM_LIST = tuple[Tensor, ...] | list[Tensor]
#: the device types whose default (SWA) average takes the ``_foreach_*`` path, as torch's
#: ``_get_foreach_kernels_supported_devices()``; on the others (``cpu``) it averages one tensor at a time
_FOREACH_DEVICE_TYPES = ("cuda", "xpu", "mtia", "privateuseone")


def _check_decay(decay: float) -> None:
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")


def get_ema_multi_avg_fn(decay: float = 0.999) -> Callable[[PARAM_LIST, PARAM_LIST, Any], None]:
    """The function applying an exponential moving average (EMA) to lists of parameters, in place:
    ``ema = decay * ema + (1 - decay) * current`` (``_foreach_lerp_`` for floating and complex tensors).

    Args:
        decay: the decay rate, in [0, 1] (default 0.999).
    """
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_param_list: PARAM_LIST, current_param_list: PARAM_LIST, _) -> None:
        # foreach lerp only handles float and complex
        if ema_param_list[0].is_floating_point() or ema_param_list[0].is_complex():
            _F._foreach_lerp_(ema_param_list, current_param_list, 1 - decay)
        else:
            for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                p_ema.copy_(p_ema * decay + p_model * (1 - decay))

    return ema_update


def get_swa_multi_avg_fn() -> Callable[[PARAM_LIST, PARAM_LIST, Tensor | int], None]:
    """The function applying the stochastic weight average (SWA, equal weights) to lists of parameters, in place:
    ``avg += (current - avg) / (num_averaged + 1)``."""

    @no_grad()
    def swa_update(averaged_param_list: PARAM_LIST, current_param_list: PARAM_LIST,
                   num_averaged: Tensor | int) -> None:
        # foreach lerp only handles float and complex
        if averaged_param_list[0].is_floating_point() or averaged_param_list[0].is_complex():
            _F._foreach_lerp_(averaged_param_list, current_param_list, 1 / (num_averaged + 1))
        else:
            diffs = _F._foreach_sub(current_param_list, averaged_param_list)
            if isinstance(num_averaged, Tensor):
                _F._foreach_addcdiv_(averaged_param_list, diffs, [num_averaged + 1] * len(averaged_param_list))
            else:
                _F._foreach_add_(averaged_param_list, diffs, alpha=1.0 / (num_averaged + 1))

    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> Callable[[Tensor, Tensor, Any], Tensor]:
    """The function giving the exponential moving average (EMA) of one parameter:
    ``decay * ema + (1 - decay) * current``.

    Args:
        decay: the decay rate, in [0, 1] (default 0.999).
    """
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_param: Tensor, current_param: Tensor, num_averaged) -> Tensor:
        return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn() -> Callable[[Tensor, Tensor, Tensor | int], Tensor]:
    """The function giving the stochastic weight average (SWA) of one parameter:
    ``avg + (current - avg) / (num_averaged + 1)``."""

    @no_grad()
    def swa_update(averaged_param: Tensor, current_param: Tensor, num_averaged: Tensor | int) -> Tensor:
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


def _group_by_device_and_dtype(averaged: list[Tensor], current: list[Tensor]) -> dict:
    """torch's ``_group_tensors_by_device_and_dtype`` for two lists: ``(device, dtype) -> (averaged, current)``,
    the pairs of each group in their order."""
    groups: dict = {}
    for a, c in zip(averaged, current, strict=True):
        pair = groups.setdefault((a.device, a.dtype), ([], []))
        pair[0].append(a)
        pair[1].append(c)
    return groups


class AveragedModel(Module):
    """A copy of ``model`` (on ``device`` if given) holding running averages of its parameters: Stochastic Weight
    Averaging (the default, equal weights) or an exponential moving average (``get_ema_multi_avg_fn``), as torch's.

    Args:
        model: the model to average.
        device: if given, where the averaged copy is kept.
        avg_fn: ``avg_fn(averaged, current, num_averaged) -> Tensor``, the new value of one averaged parameter.
        multi_avg_fn: ``multi_avg_fn(averaged_list, current_list, num_averaged)``, updating the averaged
            parameters in place (one call per device and dtype). At most one of the two; neither: equal weights.
        use_buffers: average the buffers too (otherwise they are copied from ``model`` at each update).

    The first :meth:`update_parameters` (``n_averaged`` 0) copies ``model``'s values; each later one averages them
    in. ``avg_fn`` and ``multi_avg_fn`` are not part of :meth:`state_dict`.
    """

    n_averaged: Tensor

    def __init__(self, model: Module, device: int | str | Device | None = None,
                 avg_fn: Callable[[Tensor, Tensor, Tensor | int], Tensor] | None = None,
                 multi_avg_fn: Callable[[PARAM_LIST, PARAM_LIST, Tensor | int], None] | None = None,
                 use_buffers: bool = False) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", _tensor(0, dtype=D.int64, device=device))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        """The averaged module's forward."""
        return self.module(*args, **kwargs)

    def update_parameters(self, model: Module) -> None:
        """Average ``model``'s current parameters (and buffers, with ``use_buffers``) into this model's."""
        self_param = (itertools.chain(self.module.parameters(), self.module.buffers()) if self.use_buffers
                      else self.parameters())
        model_param = (itertools.chain(model.parameters(), model.buffers()) if self.use_buffers
                       else model.parameters())
        self_param_detached: list[Tensor] = []
        model_param_detached: list[Tensor] = []
        copy_param = bool(self.n_averaged == 0)
        for p_averaged, p_model in zip(self_param, model_param, strict=False):
            p_model_ = p_model.detach().to(p_averaged.device)
            self_param_detached.append(p_averaged.detach())
            model_param_detached.append(p_model_)
            if copy_param:
                p_averaged.detach().copy_(p_model_)

        if self.n_averaged > 0:
            if self.multi_avg_fn is not None or self.avg_fn is None:
                groups = _group_by_device_and_dtype(self_param_detached, model_param_detached)
                for (device, _), (self_params, model_params) in groups.items():
                    n_averaged = self.n_averaged.to(device)
                    if self.multi_avg_fn:
                        self.multi_avg_fn(self_params, model_params, n_averaged)
                    elif device is not None and device.type in _FOREACH_DEVICE_TYPES:
                        get_swa_multi_avg_fn()(self_params, model_params, n_averaged)
                    else:
                        avg_fn = get_swa_avg_fn()
                        for p_averaged, p_model in zip(self_params, model_params, strict=True):
                            p_averaged.copy_(avg_fn(p_averaged, p_model, n_averaged))
            else:
                for p_averaged, p_model in zip(self_param_detached, model_param_detached, strict=True):
                    n_averaged = self.n_averaged.to(p_averaged.device)
                    p_averaged.detach().copy_(self.avg_fn(p_averaged.detach(), p_model, n_averaged))

        if not self.use_buffers:
            # without running averages of the buffers, keep them in sync with the source model
            for b_swa, b_model in zip(self.module.buffers(), model.buffers(), strict=True):
                b_swa.detach().copy_(b_model.detach().to(b_swa.device))
        self.n_averaged += 1


@no_grad()
def update_bn(loader: Iterable[Any], model: Module, device: int | str | Device | None = None) -> None:
    """Recompute the ``running_mean``/``running_var`` of ``model``'s BatchNorm layers with one pass over ``loader``
    (a cumulative average over its batches; each batch a tensor, or a list/tuple whose first element is the input),
    the data moved to ``device`` if given. The model's training mode and the layers' momenta are restored after."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum

    if not momenta:
        return

    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None

    for input in loader:  # noqa: A001 - torch's name
        if isinstance(input, (list, tuple)):
            input = input[0]  # noqa: A001
        if device is not None:
            input = input.to(device)  # noqa: A001
        model(input)

    for bn_module in momenta:
        bn_module.momentum = momenta[bn_module]
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneals each param group's learning rate to a fixed ``swa_lr`` over ``anneal_epochs`` steps (cosine or
    linear), then keeps it there: the schedule of Stochastic Weight Averaging, as torch's.

    Args:
        optimizer: the wrapped optimizer.
        swa_lr: the learning rate to reach, for all groups or a list (one a group).
        anneal_epochs: the steps of the annealing phase (default 10).
        anneal_strategy: ``"cos"`` (default) or ``"linear"``.
        last_epoch: the index of the last epoch (default -1).
    """

    def __init__(self, optimizer: Optimizer, swa_lr: float, anneal_epochs: int = 10,
                 anneal_strategy: Literal["cos", "linear"] = "cos", last_epoch: int = -1) -> None:
        swa_lrs = _format_param("swa_lr", optimizer, swa_lr)
        for lr, group in zip(swa_lrs, optimizer.param_groups, strict=True):
            group["swa_lr"] = lr
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        self._get_lr_called_within_step = False
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def step(self, epoch: int | None = None) -> None:
        """One scheduler step (``get_lr`` called outside it warns, as torch's)."""
        self._get_lr_called_within_step = True
        try:
            super().step(epoch)
        finally:
            self._get_lr_called_within_step = False

    def get_lr(self) -> list[float]:
        """The next learning rate of each group: between the group's ``lr`` and ``swa_lr`` by :attr:`anneal_func`
        over :attr:`anneal_epochs` steps, then ``swa_lr`` (use :meth:`get_last_lr` for the current one)."""
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use `get_last_lr()`.",
                          UserWarning, stacklevel=2)
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_t = max(0, min(1, (step - 1) / max(1, self.anneal_epochs)))
        prev_alpha = self.anneal_func(prev_t)
        prev_lrs = [self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha)
                    for group in self.optimizer.param_groups]
        t = max(0, min(1, step / max(1, self.anneal_epochs)))
        alpha = self.anneal_func(t)
        return [group["swa_lr"] * alpha + lr * (1 - alpha)
                for group, lr in zip(self.optimizer.param_groups, prev_lrs, strict=True)]

    def _set_anneal_func(self, anneal_strategy: Literal["cos", "linear"]) -> None:
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer and the annealing function."""
        return {key: value for key, value in self.__dict__.items() if key not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a :meth:`state_dict` (the annealing function set again from its strategy)."""
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
