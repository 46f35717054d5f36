"""torch's instance and local-response normalisation modules over their ``tw.nn.functional`` forms
(``F.instance_norm``, ``F.local_response_norm``), with torch's arguments, buffers, checks and reprs; and
``SyncBatchNorm``, batch normalisation as one process computes it."""

from __future__ import annotations

import warnings

from tensorwire import distributed

from . import functional as F
from .layers import _BatchNorm, _NormBase
from .module import Module

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LocalResponseNorm", "SyncBatchNorm"]


class _InstanceNorm(_NormBase):
    """Each (sample, channel) normalised over its spatial dims; ``affine`` and ``track_running_stats`` are off by
    default (torch's). With running statistics, training updates them and eval uses them."""

    _dims = 2  # an unbatched input's number of dims

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def _check_input_dim(self, input) -> None:  # noqa: A002
        if input.ndim not in (self._dims, self._dims + 1):
            raise ValueError(f"expected {self._dims}D or {self._dims + 1}D input (got {input.ndim}D input)")

    def _apply_instance_norm(self, input):  # noqa: A002
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                               self.training or not self.track_running_stats,
                               self.momentum if self.momentum is not None else 0.0, self.eps)

    def forward(self, input):  # noqa: A002
        self._check_input_dim(input)
        feature_dim = input.ndim - self._dims
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match num_features "
                                 f"({self.num_features}), but got: {input.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. You can silence this "
                          "warning by not passing in num_features, which is not used because affine=False",
                          stacklevel=2)
        if input.ndim == self._dims:
            return self._apply_instance_norm(input.unsqueeze(0)).squeeze(0)
        return self._apply_instance_norm(input)


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation over ``[N, C, L]`` (or ``[C, L]``)."""

    _dims = 2


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation over ``[N, C, H, W]`` (or ``[C, H, W]``)."""

    _dims = 3


class InstanceNorm3d(_InstanceNorm):
    """Instance normalisation over ``[N, C, D, H, W]`` (or ``[C, D, H, W]``)."""

    _dims = 4


class LocalResponseNorm(Module):
    """``x / (k + alpha * mean of x² over size neighbouring channels) ** beta`` (``F.local_response_norm``)."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):  # noqa: A002
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class SyncBatchNorm(_BatchNorm):
    """torch's ``nn.SyncBatchNorm`` as one process runs it: batch normalisation over every dim but the channels (an
    input of 2 dims or more), as torch's computes it where no process group spans several processes (a single
    process, or ``torch.distributed`` not initialised), so SimCLR/BYOL-style code that converts its model runs as
    written. Statistics gathered across processes are not implemented: in training, with ``tw.distributed``
    initialised over more than one process, the call raises ``NotImplementedError`` rather than normalise each
    process's batch alone."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None, *,
                 bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)
        self.process_group = process_group

    def _check_input_dim(self, input) -> None:  # noqa: A002
        if input.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {input.ndim}D input)")

    def forward(self, input):  # noqa: A002
        if self.training:
            if distributed.is_initialized() and distributed.get_world_size(self.process_group) > 1:
                raise NotImplementedError("SyncBatchNorm's statistics across processes are not implemented in "
                                          "tensorwire: use BatchNorm (each process's batch), or one process")
        self._check_input_dim(input)
        if input.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        return super().forward(input)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every batch normalisation layer in it replaced by a :class:`SyncBatchNorm` holding the same
        parameters, running statistics and training flag (torch's, layer for layer)."""
        out = module
        if isinstance(module, _BatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      process_group, bias=module.bias is not None)
            if module.affine:
                out.weight = module.weight
                out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out

