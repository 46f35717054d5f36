"""``torch.nn.modules.batchnorm``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..layers import BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNorm, _NormBase
from ..lazy import LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d
from ..norm_layers import SyncBatchNorm

__all__ = [
    "_BatchNorm",
    "_NormBase",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "SyncBatchNorm",
]
