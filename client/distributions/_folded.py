"""What HalfNormal and HalfCauchy share: ``|X|`` for a symmetric ``X`` centred on 0 (torch's two classes, written
once). A subclass names its base family (``_base``) and its own mean and variance."""

from __future__ import annotations

import math

from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire.tensor import Tensor

from . import constraints
from .transformed_distribution import TransformedDistribution
from .transforms import AbsTransform


class Folded(TransformedDistribution):
    """``|X|`` for ``X ~ _base(0, scale)``: the density doubled on ``[0, inf)``."""

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _base: type = None  # the symmetric family folded (a subclass's)

    def __init__(self, scale, validate_args: bool | None = None) -> None:
        base_dist = self._base(0, scale, validate_args=False)
        super().__init__(base_dist, AbsTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(type(self), _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def scale(self) -> Tensor:
        return self.base_dist.scale

    @property
    def mode(self) -> Tensor:
        return _creation.zeros_like(self.scale)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = _creation.as_tensor(value, dtype=self.scale.dtype, device=self.scale._dev, session=self.scale._s)
        log_prob = self.base_dist.log_prob(value) + math.log(2)
        return _combine.where(value >= 0, log_prob, -math.inf)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, prob):
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)
