"""torch.distributions.Cauchy."""

from __future__ import annotations

import math

from tensorwire import creation as _creation
from tensorwire.tensor import Size, Tensor

from . import constraints
from .distribution import Distribution
from .utils import _standard_uniform, broadcast_all, is_number

__all__ = ["Cauchy"]


class Cauchy(Distribution):
    """The Cauchy (Lorentz) distribution with median ``loc`` and half width at half maximum ``scale``: the ratio of
    two independent centered normals. Its mean is undefined (NaN) and its variance infinite, as torch's."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        batch_shape = Size() if is_number(loc) and is_number(scale) else self.loc.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Cauchy, _instance)
        batch_shape = Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        super(Cauchy, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _full(self, value: float) -> Tensor:
        return _creation.full(self._extended_shape(), value, dtype=self.loc.dtype, device=self.loc._dev,
                              session=self.loc._s)

    @property
    def mean(self) -> Tensor:
        return self._full(math.nan)

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return self._full(math.inf)

    def rsample(self, sample_shape=Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        # a standard Cauchy draw by inversion, as torch's cauchy_: tan(pi (u - 1/2))
        u = _standard_uniform(shape, self.loc.dtype, self.loc._dev, self.loc._s)
        return self.loc + (math.pi * (u - 0.5)).tan() * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -math.log(math.pi) - self.scale.log() - (((value - self.loc) / self.scale) ** 2).log1p()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return ((value - self.loc) / self.scale).atan() / math.pi + 0.5

    def icdf(self, value):
        return (math.pi * (value - 0.5)).tan() * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()
