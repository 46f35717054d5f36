"""``torch.nn.modules.conv``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..conv_transpose import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, _ConvTransposeNd
from ..layers import Conv1d, Conv2d, Conv3d, _ConvNd
from ..lazy import LazyConv1d, LazyConv2d, LazyConv3d, LazyConvTranspose1d, LazyConvTranspose2d, LazyConvTranspose3d

__all__ = [
    "_ConvNd",
    "_ConvTransposeNd",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
]
