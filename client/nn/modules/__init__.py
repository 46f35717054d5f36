"""``torch.nn.modules``: its submodules' names (``from torch.nn.modules.loss import _Loss``, ``from
torch.nn.modules.utils import _pair`` ...), each a module re-exporting the classes ``tensorwire.nn`` defines in
its own files. The modules torch names there that tensorwire lacks (``adaptive``: ``AdaptiveLogSoftmaxWithLoss``)
are absent."""

from __future__ import annotations

from . import (
    activation,
    batchnorm,
    channelshuffle,
    container,
    conv,
    distance,
    dropout,
    flatten,
    fold,
    instancenorm,
    lazy,
    linear,
    loss,
    module,
    normalization,
    padding,
    pixelshuffle,
    pooling,
    rnn,
    sparse,
    transformer,
    upsampling,
    utils,
)

__all__ = [
    "activation",
    "batchnorm",
    "channelshuffle",
    "container",
    "conv",
    "distance",
    "dropout",
    "flatten",
    "fold",
    "instancenorm",
    "lazy",
    "linear",
    "loss",
    "module",
    "normalization",
    "padding",
    "pixelshuffle",
    "pooling",
    "rnn",
    "sparse",
    "transformer",
    "upsampling",
    "utils",
]
