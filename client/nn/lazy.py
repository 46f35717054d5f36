"""torch's lazy modules: ``LazyLinear``, ``LazyConv{1,2,3}d``, ``LazyConvTranspose{1,2,3}d``,
``LazyBatchNorm{1,2,3}d`` and ``LazyInstanceNorm{1,2,3}d``.

A lazy module is its plain module with :class:`~tensorwire.nn.parameter.UninitializedParameter` s (and buffers) whose
size depends on the input (``in_features``, ``in_channels``, ``num_features``). Its first call infers that size from
the input (a forward pre-hook, as torch's), materialises the parameters, initialises them as the plain module does
(``reset_parameters``) and turns the module into the plain class (``LazyLinear`` becomes ``Linear``). Loading a
state dict before the first call materialises them with the loaded shapes. The parameter objects stay the same
throughout, so an optimizer built before the first call updates the materialised values.
"""

from __future__ import annotations

import itertools

from tensorwire.creation import tensor
from tensorwire.protocol import dtypes as D

from ._tensors import no_grad
from .conv_transpose import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .layers import BatchNorm1d, BatchNorm2d, BatchNorm3d, Conv1d, Conv2d, Conv3d, Linear
from .norm_layers import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .parameter import UninitializedBuffer, UninitializedParameter, is_lazy

__all__ = ["LazyModuleMixin", "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d",
           "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d",
           "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d"]


class LazyModuleMixin:
    """Gives a module torch's lazy initialisation: ``initialize_parameters(*inputs)`` runs before the first forward,
    then the module becomes ``cls_to_become``."""

    cls_to_become: type | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters)

    def _load_hook(self, state_dict: dict, prefix: str) -> None:
        """A loaded entry gives an uninitialised parameter or buffer its shape (torch's ``_lazy_load_hook``)."""
        super()._load_hook(state_dict, prefix)
        for name, param in itertools.chain(self._parameters.items(), self._buffers.items()):
            key = prefix + name
            if param is not None and key in state_dict and is_lazy(param) and not is_lazy(state_dict[key]):
                with no_grad():
                    param.materialize(tuple(state_dict[key].shape))

    def initialize_parameters(self, *args, **kwargs) -> None:
        raise NotImplementedError(f"initialize_parameters is not implemented for {self.__class__.__name__}")

    def has_uninitialized_params(self) -> bool:
        """Whether a parameter or buffer is still uninitialised."""
        return any(is_lazy(p) for p in itertools.chain(self._parameters.values(), self._buffers.values()))

    def _infer_parameters(self, module, args) -> None:
        module.initialize_parameters(*args)
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        module._initialize_hook.remove()
        del module._initialize_hook
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become


class LazyLinear(LazyModuleMixin, Linear):
    """:class:`Linear` whose ``in_features`` is the last dim of its first input."""

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(0, 0, False)
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input) -> None:  # noqa: A002
        if self.has_uninitialized_params():
            with no_grad():
                self.in_features = input.shape[-1]
                self.weight.materialize((self.out_features, self.in_features))
                if self.bias is not None:
                    self.bias.materialize((self.out_features,))
                self.reset_parameters()
        if self.in_features == 0:
            if input.shape[-1] != self.weight.shape[-1]:
                raise AssertionError(f"The in_features inferred from input: {input.shape[-1]} is not equal to "
                                     f"in_features from self.weight: {self.weight.shape[-1]}")
            self.in_features = input.shape[-1]


class _LazyConvXdMixin(LazyModuleMixin):
    """A convolution whose ``in_channels`` is its first input's channel count (dim 1, or 0 unbatched)."""

    _spatial = 2

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def initialize_parameters(self, input, *args, **kwargs) -> None:  # noqa: A002
        if self.has_uninitialized_params():
            with no_grad():
                self.in_channels = self._get_in_channels(input)
                if self.in_channels % self.groups != 0:
                    raise ValueError("in_channels must be divisible by groups")
                if getattr(self, "transposed", False):
                    self.weight.materialize((self.in_channels, self.out_channels // self.groups, *self.kernel_size))
                else:
                    self.weight.materialize((self.out_channels, self.in_channels // self.groups, *self.kernel_size))
                if self.bias is not None:
                    self.bias.materialize((self.out_channels,))
                self.reset_parameters()

    def _uninitialized(self, out_channels: int, bias: bool, device, dtype) -> None:
        """After the convolution's constructor (built with no channels): its weight and bias uninitialized, its
        ``out_channels`` the one asked for."""
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def _get_in_channels(self, input) -> int:  # noqa: A002
        unbatched = self._spatial + 1
        if input.ndim not in (unbatched, unbatched + 1):
            raise RuntimeError(f"Expected {unbatched}D (unbatched) or {unbatched + 1}D (batched) input to "
                               f"{self.__class__.__name__}, but got input of size: {tuple(input.shape)}")
        return input.shape[1] if input.ndim == unbatched + 1 else input.shape[0]

    def _get_num_spatial_dims(self) -> int:
        return self._spatial


class _LazyConvNd(_LazyConvXdMixin):
    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, dilation=1, groups: int = 1,
                 bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__(0, 0, kernel_size, stride, padding, dilation, groups, False, padding_mode, device=device,
                         dtype=dtype)
        self._uninitialized(out_channels, bias, device, dtype)


class LazyConv1d(_LazyConvNd, Conv1d):
    """:class:`Conv1d` whose ``in_channels`` comes from its first input."""

    cls_to_become = Conv1d
    _spatial = 1


class LazyConv2d(_LazyConvNd, Conv2d):
    """:class:`Conv2d` whose ``in_channels`` comes from its first input."""

    cls_to_become = Conv2d
    _spatial = 2


class LazyConv3d(_LazyConvNd, Conv3d):
    """:class:`Conv3d` whose ``in_channels`` comes from its first input."""

    cls_to_become = Conv3d
    _spatial = 3


class _LazyConvTransposeNd(_LazyConvXdMixin):
    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0, groups: int = 1,
                 bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__(0, 0, kernel_size, stride, padding, output_padding, groups, False, dilation, padding_mode,
                         device=device, dtype=dtype)
        self._uninitialized(out_channels, bias, device, dtype)


class LazyConvTranspose1d(_LazyConvTransposeNd, ConvTranspose1d):
    """:class:`ConvTranspose1d` whose ``in_channels`` comes from its first input."""

    cls_to_become = ConvTranspose1d
    _spatial = 1


class LazyConvTranspose2d(_LazyConvTransposeNd, ConvTranspose2d):
    """:class:`ConvTranspose2d` whose ``in_channels`` comes from its first input."""

    cls_to_become = ConvTranspose2d
    _spatial = 2


class LazyConvTranspose3d(_LazyConvTransposeNd, ConvTranspose3d):
    """:class:`ConvTranspose3d` whose ``in_channels`` comes from its first input."""

    cls_to_become = ConvTranspose3d
    _spatial = 3


class _LazyNormBase(LazyModuleMixin):
    """A normalisation whose ``num_features`` is its first input's dim 1. torch's defaults (``affine`` and
    ``track_running_stats`` on, also for the instance norms)."""

    def __init__(self, eps: float = 1e-5, momentum=0.1, affine: bool = True, track_running_stats: bool = True,
                 device=None, dtype=None, *, bias: bool = True):
        super().__init__(0, eps, momentum, False, False, device, dtype, bias=False)
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = UninitializedParameter(device=device, dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(device=device, dtype=dtype)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(device=device, dtype=dtype)
            self.running_var = UninitializedBuffer(device=device, dtype=dtype)
            self.num_batches_tracked = tensor(0, dtype=D.int64, device=device)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input) -> None:  # noqa: A002
        if self.has_uninitialized_params():
            with no_grad():
                self.num_features = input.shape[1]
                if self.affine:
                    self.weight.materialize((self.num_features,))
                    if self.bias is not None:
                        self.bias.materialize((self.num_features,))
                if self.track_running_stats:
                    self.running_mean.materialize((self.num_features,))
                    self.running_var.materialize((self.num_features,))
                self.reset_parameters()


class LazyBatchNorm1d(_LazyNormBase, BatchNorm1d):
    """:class:`BatchNorm1d` whose ``num_features`` comes from its first input."""

    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyNormBase, BatchNorm2d):
    """:class:`BatchNorm2d` whose ``num_features`` comes from its first input."""

    cls_to_become = BatchNorm2d


class LazyBatchNorm3d(_LazyNormBase, BatchNorm3d):
    """:class:`BatchNorm3d` whose ``num_features`` comes from its first input."""

    cls_to_become = BatchNorm3d


class LazyInstanceNorm1d(_LazyNormBase, InstanceNorm1d):
    """:class:`InstanceNorm1d` whose ``num_features`` comes from its first input."""

    cls_to_become = InstanceNorm1d


class LazyInstanceNorm2d(_LazyNormBase, InstanceNorm2d):
    """:class:`InstanceNorm2d` whose ``num_features`` comes from its first input."""

    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyNormBase, InstanceNorm3d):
    """:class:`InstanceNorm3d` whose ``num_features`` comes from its first input."""

    cls_to_become = InstanceNorm3d
