"""torch.distributions.HalfNormal."""

from __future__ import annotations

import math

from tensorwire.tensor import Tensor

from ._folded import Folded
from .normal import Normal

__all__ = ["HalfNormal"]


class HalfNormal(Folded):
    """``|X|`` for ``X ~ Normal(0, scale)``."""

    _base = Normal

    @property
    def mean(self) -> Tensor:
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def variance(self) -> Tensor:
        return self.scale.pow(2) * (1 - 2 / math.pi)
