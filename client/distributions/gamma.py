"""torch.distributions.Gamma."""

from __future__ import annotations

from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire import dtype_info as _dtype_info
from tensorwire import special as _special
from tensorwire.tensor import Size, Tensor

from . import constraints
from ._sampling import StandardGamma
from .exp_family import ExponentialFamily
from .utils import broadcast_all, is_number

__all__ = ["Gamma"]


def _standard_gamma(concentration: Tensor) -> Tensor:
    """Gamma(concentration, 1) draws, differentiable in ``concentration`` (implicit reparameterization:
    ``_sampling``)."""
    return StandardGamma.apply(concentration)


class Gamma(ExponentialFamily):
    """The Gamma distribution with shape ``concentration`` and ``rate`` (1 / scale). Sampled exactly (Marsaglia and
    Tsang's rejection method, ``_sampling``); ``rsample``'s gradient in ``concentration`` is the implicit one."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.rate

    @property
    def mode(self) -> Tensor:
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self) -> Tensor:
        return self.concentration / self.rate.pow(2)

    def __init__(self, concentration, rate, validate_args: bool | None = None) -> None:
        self.concentration, self.rate = broadcast_all(concentration, rate)
        batch_shape = Size() if is_number(concentration) and is_number(rate) else self.concentration.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Gamma, _instance)
        batch_shape = Size(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        new.rate = self.rate.expand(batch_shape)
        super(Gamma, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        value = _standard_gamma(self.concentration.expand(shape)) / self.rate.expand(shape)
        # torch clamps the value to `tiny` in place outside the autograd graph: the clamp's difference, detached
        tiny = _dtype_info.finfo(value.dtype).tiny
        v = value.detach()
        return value + _combine.where(v < tiny, tiny - v, 0.0)

    def log_prob(self, value):
        value = _creation.as_tensor(value, dtype=self.rate.dtype, device=self.rate._dev, session=self.rate._s)
        if self._validate_args:
            self._validate_sample(value)
        return (_special.xlogy(self.concentration, self.rate) + _special.xlogy(self.concentration - 1, value)
                - self.rate * value - _special.lgamma(self.concentration))

    def entropy(self):
        return (self.concentration - self.rate.log() + _special.lgamma(self.concentration)
                + (1.0 - self.concentration) * _special.digamma(self.concentration))

    @property
    def _natural_params(self) -> tuple[Tensor, Tensor]:
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return _special.lgamma(x + 1) + (x + 1) * (-y.reciprocal()).log()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return _special.gammainc(self.concentration, self.rate * value)
