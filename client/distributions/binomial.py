"""torch.distributions.Binomial."""

from __future__ import annotations

from tensorwire import autograd_engine as _autograd
from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire import special as _special
from tensorwire.tensor import Size, Tensor

from . import constraints
from ._sampling import binomial64
from .distribution import Distribution
from .utils import BinaryProbsOrLogits

__all__ = ["Binomial"]


def _clamp_by_zero(x):
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


class Binomial(BinaryProbsOrLogits, Distribution):
    """The number of successes in ``total_count`` Bernoulli trials of ``probs`` (or ``logits``; one of the two).
    Sampled exactly (inversion while ``n min(p, 1-p) < 10``, Hormann's BTRS rejection above: ``_sampling``)."""

    arg_constraints = {"total_count": constraints.nonnegative_integer, "probs": constraints.unit_interval,
                       "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args: bool | None = None) -> None:
        self._count_and_param(total_count, probs, logits)
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Binomial, _instance)
        batch_shape = Size(batch_shape)
        new.total_count = self.total_count.expand(batch_shape)
        self._expand_params(new, batch_shape)
        super(Binomial, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self) -> Tensor:
        return self.total_count * self.probs

    @property
    def mode(self) -> Tensor:
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self) -> Tensor:
        return self.total_count * self.probs * (1 - self.probs)

    @property
    def param_shape(self) -> Size:
        return self._param.size()

    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        with _autograd.no_grad():
            return binomial64(self.total_count.expand(shape), self.probs.expand(shape)).to(self.probs.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_factorial_n = _special.lgamma(self.total_count + 1)
        log_factorial_k = _special.lgamma(value + 1)
        log_factorial_nmk = _special.lgamma(self.total_count - value + 1)
        # (the clamp keeps the normalizer finite for extreme logits, as torch's)
        normalize_term = (self.total_count * _clamp_by_zero(self.logits)
                          + self.total_count * (-self.logits.abs()).exp().log1p() - log_factorial_n)
        return value * self.logits - log_factorial_k - log_factorial_nmk - normalize_term

    def _homogeneous_count(self, what: str) -> int:
        """The one total count of every batch element (one fetch), NotImplementedError if they differ."""
        lo, hi = _combine.stack([self.total_count.min(), self.total_count.max()]).tolist()
        if lo != hi:
            raise NotImplementedError(f"Inhomogeneous total count not supported by `{what}`.")
        return int(hi)

    def entropy(self):
        self._homogeneous_count("entropy")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(log_prob.exp() * log_prob).sum(0)

    def enumerate_support(self, expand=True):
        total_count = self._homogeneous_count("enumerate_support")
        values = _creation.arange(1 + total_count, dtype=self._param.dtype, device=self._param._dev,
                                  session=self._param._s)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values
