"""``torch.nn.modules.linear``'s names (the classes are ``tensorwire.nn``'s)."""

from __future__ import annotations

from ..layers import Bilinear, Identity, Linear, NonDynamicallyQuantizableLinear
from ..lazy import LazyLinear

__all__ = ["Bilinear", "Identity", "Linear", "LazyLinear", "NonDynamicallyQuantizableLinear"]
