"""torch.distributions.Kumaraswamy."""

from __future__ import annotations

import math

from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire import special as _special
from tensorwire.tensor import Size, Tensor

from . import constraints
from .transformed_distribution import TransformedDistribution
from .transforms import AffineTransform, PowerTransform
from .uniform import Uniform
from .utils import broadcast_all, euler_constant

__all__ = ["Kumaraswamy"]


def _moments(a: Tensor, b: Tensor, n: int) -> Tensor:
    """The ``n``-th moment: ``b B(1 + n / a, b)``."""
    arg1 = 1 + n / a
    log_value = _special.lgamma(arg1) + _special.lgamma(b) - _special.lgamma(arg1 + b)
    return b * log_value.exp()


class Kumaraswamy(TransformedDistribution):
    """The Kumaraswamy distribution on ``[0, 1]`` with ``concentration1`` (a) and ``concentration0`` (b):
    ``(1 - U^(1/b))^(1/a)`` for ``U`` uniform. The mode is NaN where either concentration is below 1, as torch's."""

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args: bool | None = None) -> None:
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base_dist = Uniform(_creation.full_like(self.concentration0, 0), _creation.full_like(self.concentration0, 1),
                            validate_args=validate_args)
        transforms = [PowerTransform(exponent=self.concentration0.reciprocal()), AffineTransform(loc=1.0, scale=-1.0),
                      PowerTransform(exponent=self.concentration1.reciprocal())]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Kumaraswamy, _instance)
        new.concentration1 = self.concentration1.expand(Size(batch_shape))
        new.concentration0 = self.concentration0.expand(Size(batch_shape))
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self) -> Tensor:
        return _moments(self.concentration1, self.concentration0, 1)

    @property
    def mode(self) -> Tensor:
        log_mode = (self.concentration0.reciprocal() * (-self.concentration0).log1p()
                    - (-self.concentration0 * self.concentration1).log1p())
        log_mode = _combine.where((self.concentration0 < 1) | (self.concentration1 < 1), math.nan, log_mode)
        return log_mode.exp()

    @property
    def variance(self) -> Tensor:
        return _moments(self.concentration1, self.concentration0, 2) - self.mean.pow(2)

    def entropy(self):
        t1 = 1 - self.concentration1.reciprocal()
        t0 = 1 - self.concentration0.reciprocal()
        H0 = _special.digamma(self.concentration0 + 1) + euler_constant  # noqa: N806
        return t0 + t1 * H0 - self.concentration1.log() - self.concentration0.log()
