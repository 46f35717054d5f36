"""torch.distributions.GeneralizedPareto."""

from __future__ import annotations

import math

from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire.tensor import Size, Tensor

from . import constraints
from .distribution import Distribution
from .utils import _standard_uniform, broadcast_all, is_number

__all__ = ["GeneralizedPareto"]


class GeneralizedPareto(Distribution):
    """The generalized Pareto distribution with ``loc``, ``scale`` and ``concentration`` (xi): Exponential for
    ``loc = 0, xi = 0``, Pareto for ``xi > 0, loc = scale / xi``, Uniform for ``xi = -1``. Its support ends at
    ``loc - scale / xi`` for a negative ``xi``. Sampled by inversion (``rsample``: the icdf of a uniform draw)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive, "concentration": constraints.real}
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args: bool | None = None) -> None:
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        numbers = is_number(loc) and is_number(scale) and is_number(concentration)
        super().__init__(Size() if numbers else self.loc.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(GeneralizedPareto, _instance)
        batch_shape = Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        super(GeneralizedPareto, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        return self.icdf(_standard_uniform(shape, self.loc.dtype, self.loc._dev, self.loc._s))

    def _safe_concentration(self) -> tuple[Tensor, Tensor]:
        """(where the concentration is 0 (torch's ``isclose``), the concentration with 1 there)"""
        eq_zero = self.concentration.isclose(_creation.zeros_like(self.concentration))
        return eq_zero, _combine.where(eq_zero, 1.0, self.concentration)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        eq_zero, safe_conc = self._safe_concentration()
        y = 1 / safe_conc + _creation.ones_like(z)
        where_nonzero = _combine.where(y == 0, y, y * (safe_conc * z).log1p())
        return -self.scale.log() - _combine.where(eq_zero, z, where_nonzero)

    def log_survival_function(self, value):
        """``log(1 - cdf(value))``."""
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        eq_zero, safe_conc = self._safe_concentration()
        where_nonzero = -(safe_conc * z).log1p() / safe_conc
        return _combine.where(eq_zero, -z, where_nonzero)

    def log_cdf(self, value):
        """``log(cdf(value))``."""
        return (-self.log_survival_function(value).exp()).log1p()

    def cdf(self, value):
        return self.log_cdf(value).exp()

    def icdf(self, value):
        eq_zero, safe_conc = self._safe_concentration()
        logu = (-value).log1p()
        where_nonzero = self.loc + self.scale / safe_conc * (-safe_conc * logu).expm1()
        where_zero = self.loc - self.scale * logu
        return _combine.where(eq_zero, where_zero, where_nonzero)

    def _z(self, x):
        return (x - self.loc) / self.scale

    @property
    def mean(self) -> Tensor:
        valid = self.concentration < 1
        safe_conc = _combine.where(valid, self.concentration, 0.5)
        return _combine.where(valid, self.loc + self.scale / (1 - safe_conc), math.nan)

    @property
    def variance(self) -> Tensor:
        valid = self.concentration < 0.5
        safe_conc = _combine.where(valid, self.concentration, 0.25)
        result = self.scale ** 2 / ((1 - safe_conc) ** 2 * (1 - 2 * safe_conc))
        return _combine.where(valid, result, math.nan)

    def entropy(self):
        ans = self.scale.log() + self.concentration + 1
        return ans.broadcast_to(tuple(self._batch_shape))

    @property
    def mode(self) -> Tensor:
        return self.loc

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        lower = self.loc
        upper = _combine.where(self.concentration < 0, lower - self.scale / self.concentration, math.inf)
        return constraints.interval(lower, upper)
