"""torch.distributions.ContinuousBernoulli."""

from __future__ import annotations

import math

from tensorwire import autograd_engine as _autograd
from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire.nn import functional as F
from tensorwire.tensor import Size, Tensor

from . import constraints
from .exp_family import ExponentialFamily
from .utils import (
    ProbsOrLogits,
    _standard_uniform,
    broadcast_all,
    clamp_probs,
    is_number,
    lazy_property,
    logits_to_probs,
    probs_to_logits,
)

__all__ = ["ContinuousBernoulli"]


class ContinuousBernoulli(ProbsOrLogits, ExponentialFamily):
    """The continuous Bernoulli distribution on ``[0, 1]`` (Loaiza-Ganem and Cunningham, 2019), of ``probs`` in
    ``(0, 1)`` or real ``logits`` (one of the two; they are not a probability and log odds, but named as
    Bernoulli's): the density ``C(p) p^x (1 - p)^(1 - x)``. Near ``p = 1/2`` (within ``lims``) the normalizer, the
    moments and the cdf use torch's Taylor expansions; sampled by inversion (``rsample``: the icdf of a uniform
    draw)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    _mean_carrier_measure = 0
    has_rsample = True

    def __init__(self, probs=None, logits=None, lims: tuple[float, float] = (0.499, 0.501),
                 validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            is_scalar = is_number(probs)
            (self.probs,) = broadcast_all(probs)
            # (torch checks the unclamped probs here when validate_args is given: a read)
            if validate_args is not None and not bool(self.arg_constraints["probs"].check(self.probs).all()):
                raise ValueError("The parameter probs has invalid values")
            self.probs = clamp_probs(self.probs)
        else:
            is_scalar = is_number(logits)
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        batch_shape = Size() if is_scalar else self._param.size()
        self._lims = lims
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ContinuousBernoulli, _instance)
        new._lims = self._lims
        batch_shape = Size(batch_shape)
        self._expand_params(new, batch_shape)
        super(ContinuousBernoulli, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _outside_unstable_region(self) -> Tensor:
        return self.probs.le(self._lims[0]) | self.probs.gt(self._lims[1])

    def _cut_probs(self) -> Tensor:
        return _combine.where(self._outside_unstable_region(), self.probs, self._lims[0])

    def _cont_bern_log_norm(self) -> Tensor:
        """The log normalizer as a function of ``probs``."""
        cut_probs = self._cut_probs()
        cut_probs_below_half = _combine.where(cut_probs.le(0.5), cut_probs, 0.0)
        cut_probs_above_half = _combine.where(cut_probs.ge(0.5), cut_probs, 1.0)
        log_norm = ((-cut_probs).log1p() - cut_probs.log()).abs().log() - _combine.where(
            cut_probs.le(0.5), (-2.0 * cut_probs_below_half).log1p(), (2.0 * cut_probs_above_half - 1.0).log())
        x = (self.probs - 0.5).pow(2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return _combine.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self) -> Tensor:
        cut_probs = self._cut_probs()
        mus = cut_probs / (2.0 * cut_probs - 1.0) + 1.0 / ((-cut_probs).log1p() - cut_probs.log())
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x.pow(2)) * x
        return _combine.where(self._outside_unstable_region(), mus, taylor)

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    @property
    def variance(self) -> Tensor:
        cut_probs = self._cut_probs()
        variances = (cut_probs * (cut_probs - 1.0) / (1.0 - 2.0 * cut_probs).pow(2)
                     + 1.0 / ((-cut_probs).log1p() - cut_probs.log()).pow(2))
        x = (self.probs - 0.5).pow(2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return _combine.where(self._outside_unstable_region(), variances, taylor)

    @lazy_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self) -> Tensor:
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    @property
    def param_shape(self) -> Size:
        return self._param.size()

    def sample(self, sample_shape=Size()):
        with _autograd.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        return self.icdf(_standard_uniform(shape, self.probs.dtype, self.probs._dev, self.probs._s))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -F.binary_cross_entropy_with_logits(logits, value, reduction="none") + self._cont_bern_log_norm()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        cut_probs = self._cut_probs()
        cdfs = (cut_probs.pow(value) * (1.0 - cut_probs).pow(1.0 - value) + cut_probs - 1.0) / (2.0 * cut_probs - 1.0)
        unbounded_cdfs = _combine.where(self._outside_unstable_region(), cdfs, value)
        zeros, ones = _creation.zeros_like(value), _creation.ones_like(value)
        return _combine.where(value.le(0.0), zeros, _combine.where(value.ge(1.0), ones, unbounded_cdfs))

    def icdf(self, value):
        cut_probs = self._cut_probs()
        inverted = (((-cut_probs + value * (2.0 * cut_probs - 1.0)).log1p() - (-cut_probs).log1p())
                    / (cut_probs.log() - (-cut_probs).log1p()))
        return _combine.where(self._outside_unstable_region(), inverted, value)

    def entropy(self):
        log_probs0 = (-self.probs).log1p()
        log_probs1 = self.probs.log()
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    @property
    def _natural_params(self) -> tuple[Tensor]:
        return (self.logits,)

    def _log_normalizer(self, x):
        """The log normalizer as a function of the natural parameter."""
        out_unst_reg = x.le(self._lims[0] - 0.5) | x.gt(self._lims[1] - 0.5)
        cut_nat_params = _combine.where(out_unst_reg, x, self._lims[0] - 0.5)
        log_norm = cut_nat_params.expm1().abs().log() - cut_nat_params.abs().log()
        taylor = 0.5 * x + x.pow(2) / 24.0 - x.pow(4) / 2880.0
        return _combine.where(out_unst_reg, log_norm, taylor)
