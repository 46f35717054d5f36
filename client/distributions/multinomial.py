"""torch.distributions.Multinomial."""

from __future__ import annotations

import math

from tensorwire import autograd_engine as _autograd
from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire import special as _special
from tensorwire.tensor import Size, Tensor

from . import constraints
from .binomial import Binomial
from .categorical import Categorical
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["Multinomial"]


class Multinomial(Distribution):
    """The counts of each of ``K`` categories in ``total_count`` (one int for the whole batch) independent draws of
    ``probs`` (normalized along the last dim) or ``softmax(logits)``. ``log_prob`` takes any counts (their sum is
    the number of trials), ``sample`` and ``entropy`` use ``total_count``."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    total_count: int

    @property
    def mean(self) -> Tensor:
        return self.probs * self.total_count

    @property
    def variance(self) -> Tensor:
        return self.total_count * self.probs * (1 - self.probs)

    def __init__(self, total_count: int = 1, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        batch_shape = self._categorical.batch_shape
        event_shape = self._categorical.param_shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Multinomial, _instance)
        batch_shape = Size(batch_shape)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        # (torch's expanded copy has no _binomial, so its entropy fails: this one's is expanded with it)
        new._binomial = self._binomial.expand(Size(tuple(batch_shape) + tuple(self.event_shape)))
        super(Multinomial, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _new(self, *args, **kwargs):
        return self._categorical._new(*args, **kwargs)

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    @property
    def param_shape(self) -> Size:
        return self._categorical.param_shape

    def sample(self, sample_shape=Size()):
        """``total_count`` categorical draws per sample, counted per category."""
        sample_shape = Size(sample_shape)
        with _autograd.no_grad():
            samples = self._categorical.sample(Size((self.total_count,) + tuple(sample_shape)))
            # the draws' dim last, then counted by a scatter-add into the categories
            samples = samples.permute(list(range(1, samples.dim())) + [0])
            counts = _creation.zeros(tuple(self._extended_shape(sample_shape)), dtype=samples.dtype,
                                     device=samples._dev, session=samples._s)
            counts = counts.scatter_add(-1, samples, _creation.ones_like(samples))
            return counts.type_as(self.probs)

    def entropy(self):
        n = self.total_count
        cat_entropy = self._categorical.entropy()
        term1 = n * cat_entropy - math.lgamma(n + 1)
        # E[sum_k log(x_k!)] over each category's Binomial(n, p_k) marginal (the binomial's support 1..n)
        probs = self.probs
        support = _creation.arange(1, n + 1, dtype=probs.dtype, device=probs._dev, session=probs._s)
        support = support.reshape((-1,) + (1,) * probs.dim())
        binomial_probs = self._binomial.log_prob(support).exp()
        weights = _special.lgamma(support + 1)
        return term1 + (binomial_probs * weights).sum(0).sum(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        log_factorial_n = _special.lgamma(value.sum(-1) + 1)
        log_factorial_xs = _special.lgamma(value + 1).sum(-1)
        logits = _combine.where((value == 0) & (logits == -math.inf), 0.0, logits)  # (0 * -inf: 0)
        log_powers = (logits * value).sum(-1)
        return log_factorial_n - log_factorial_xs + log_powers
