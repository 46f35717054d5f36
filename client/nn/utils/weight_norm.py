"""``tw.nn.utils.weight_norm`` / ``remove_weight_norm``: torch's older, hook-based weight normalisation.

The parameter ``name`` is replaced by ``name_g`` (the magnitude) and ``name_v`` (the direction), and ``name`` becomes
a plain tensor attribute, recomputed as ``v * (g / ||v||)`` by a forward pre-hook before every call (the norm over
every dimension but ``dim``; ``dim=None`` or ``-1``: over the whole tensor, as torch's). Deprecated in torch (a
FutureWarning) in favour of :func:`tensorwire.nn.utils.parametrizations.weight_norm`."""

from __future__ import annotations

import warnings

from tensorwire.tensor import Tensor

from ..module import Module
from ..parameter import Parameter

__all__ = ["WeightNorm", "norm_except_dim", "remove_weight_norm", "weight_norm", "weight_norm_of"]


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:  # noqa: A002 (torch's name)
    """torch's ``norm_except_dim``: the ``pow``-norm of ``v`` over every dimension but ``dim``, kept as size-1
    dimensions; ``dim == -1``: the norm of the whole tensor (0-d)."""
    if dim == -1:
        return v.norm(pow)
    d = dim % v.ndim
    dims = tuple(i for i in range(v.ndim) if i != d)
    if not dims:
        return v.abs() if pow else v
    return v.norm(pow, dims, True)


def weight_norm_of(v: Tensor, g: Tensor, dim: int = 0) -> Tensor:
    """torch's ``_weight_norm``: ``v * (g / norm_except_dim(v, 2, dim))``."""
    return v * (g / norm_except_dim(v, 2, dim))


class WeightNorm:
    """The forward pre-hook (torch's class of the same name): ``name`` recomputed from ``name_g`` and ``name_v``."""

    name: str
    dim: int

    def __init__(self, name: str, dim: int) -> None:
        if dim is None:
            dim = -1
        self.name = name
        self.dim = dim

    def compute_weight(self, module: Module) -> Tensor:
        return weight_norm_of(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    @staticmethod
    def apply(module: Module, name: str, dim: int | None) -> WeightNorm:
        warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of "
                      "`torch.nn.utils.parametrizations.weight_norm`.", FutureWarning, stacklevel=3)
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter {name}")
        if dim is None:
            dim = -1
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        if type(weight).__name__ == "UninitializedParameter":
            raise ValueError("The module passed to `WeightNorm` can't have uninitialized parameters. Make sure to run "
                             "the dummy forward before applying weight normalization")
        del module._parameters[name]
        module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, dim).detach()))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Weight normalisation of ``module``'s parameter ``name`` (torch.nn.utils.weight_norm); returns ``module``."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo :func:`weight_norm`: ``name`` is a plain parameter again, holding the current normalised weight."""
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, WeightNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
