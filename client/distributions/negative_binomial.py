"""torch.distributions.NegativeBinomial."""

from __future__ import annotations

from tensorwire import autograd_engine as _autograd
from tensorwire import special as _special
from tensorwire.nn import functional as F
from tensorwire.tensor import Size, Tensor

from . import constraints
from ._sampling import poisson64
from .distribution import Distribution
from .gamma import Gamma
from .utils import BinaryProbsOrLogits, lazy_property

__all__ = ["NegativeBinomial"]


class NegativeBinomial(BinaryProbsOrLogits, Distribution):
    """The number of successes of Bernoulli trials of ``probs`` (or ``sigmoid(logits)``; one of the two) before
    ``total_count`` failures (a real count is valid too). Sampled as torch does: a Poisson draw of a
    ``Gamma(total_count, exp(-logits))`` draw."""

    arg_constraints = {"total_count": constraints.greater_than_eq(0),
                       "probs": constraints.half_open_interval(0.0, 1.0), "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args: bool | None = None) -> None:
        self._count_and_param(total_count, probs, logits)
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(NegativeBinomial, _instance)
        batch_shape = Size(batch_shape)
        new.total_count = self.total_count.expand(batch_shape)
        self._expand_params(new, batch_shape)
        super(NegativeBinomial, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        return self.total_count * self.logits.exp()

    @property
    def mode(self) -> Tensor:
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self) -> Tensor:
        return self.mean / (-self.logits).sigmoid()

    @property
    def param_shape(self) -> Size:
        return self._param.size()

    @lazy_property
    def _gamma(self) -> Gamma:
        return Gamma(concentration=self.total_count, rate=(-self.logits).exp(), validate_args=False)

    def sample(self, sample_shape=Size()):
        with _autograd.no_grad():
            rate = self._gamma.sample(sample_shape=sample_shape)
            return poisson64(rate).to(rate.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_unnormalized_prob = self.total_count * F.logsigmoid(-self.logits) + value * F.logsigmoid(self.logits)
        log_normalization = (-_special.lgamma(self.total_count + value) + _special.lgamma(1.0 + value)
                             + _special.lgamma(self.total_count))
        # (the pmf at 0 of a zero total count is 1)
        log_normalization = log_normalization.masked_fill(self.total_count + value == 0.0, 0.0)
        return log_unnormalized_prob - log_normalization
