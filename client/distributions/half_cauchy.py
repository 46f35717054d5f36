"""torch.distributions.HalfCauchy."""

from __future__ import annotations

import math

from tensorwire import creation as _creation
from tensorwire.tensor import Tensor

from ._folded import Folded
from .cauchy import Cauchy

__all__ = ["HalfCauchy"]


class HalfCauchy(Folded):
    """``|X|`` for ``X ~ Cauchy(0, scale)``: no mean (inf), and the base's infinite variance."""

    _base = Cauchy

    @property
    def mean(self) -> Tensor:
        return _creation.full(self._extended_shape(), math.inf, dtype=self.scale.dtype, device=self.scale._dev,
                              session=self.scale._s)

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance
