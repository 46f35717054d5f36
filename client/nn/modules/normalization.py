"""``torch.nn.modules.normalization``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..layers import GroupNorm, LayerNorm, RMSNorm
from ..norm_layers import LocalResponseNorm

__all__ = ["GroupNorm", "LayerNorm", "RMSNorm", "LocalResponseNorm"]
