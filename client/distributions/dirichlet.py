"""torch.distributions.Dirichlet."""

from __future__ import annotations

from tensorwire import combine as _combine
from tensorwire import special as _special
from tensorwire.nn import functional as F
from tensorwire.tensor import Size, Tensor

from . import constraints
from ._sampling import StandardGamma
from .exp_family import ExponentialFamily

__all__ = ["Dirichlet"]


class Dirichlet(ExponentialFamily):
    """The Dirichlet distribution with ``concentration`` (the last dim: the categories). Sampled as independent
    Gamma(concentration_i, 1) draws normalized to sum 1; ``rsample``'s gradient flows through the normalization and
    each Gamma draw's implicit gradient (a pathwise gradient as torch's, sample for sample not the same numbers:
    torch's backward uses the Beta marginal's)."""

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args: bool | None = None) -> None:
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        batch_shape, event_shape = concentration.shape[:-1], concentration.shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Dirichlet, _instance)
        batch_shape = Size(batch_shape)
        new.concentration = self.concentration.expand(tuple(batch_shape) + tuple(self.event_shape))
        super(Dirichlet, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        gammas = StandardGamma.apply(self.concentration.expand(shape))
        return gammas / gammas.sum(-1, True)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (_special.xlogy(self.concentration - 1.0, value).sum(-1) + _special.lgamma(self.concentration.sum(-1))
                - _special.lgamma(self.concentration).sum(-1))

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.concentration.sum(-1, True)

    @property
    def mode(self) -> Tensor:
        concentrationm1 = (self.concentration - 1).clamp(min=0.0)
        mode = concentrationm1 / concentrationm1.sum(-1, True)
        mask = (self.concentration < 1).all(dim=-1)
        corner = F.one_hot(mode.argmax(dim=-1), concentrationm1.shape[-1]).to(mode.dtype)
        return _combine.where(mask.unsqueeze(-1), corner, mode)

    @property
    def variance(self) -> Tensor:
        con0 = self.concentration.sum(-1, True)
        return self.concentration * (con0 - self.concentration) / (con0.pow(2) * (con0 + 1))

    def entropy(self):
        k = self.concentration.size(-1)
        a0 = self.concentration.sum(-1)
        return (_special.lgamma(self.concentration).sum(-1) - _special.lgamma(a0) - (k - a0) * _special.digamma(a0)
                - ((self.concentration - 1.0) * _special.digamma(self.concentration)).sum(-1))

    @property
    def _natural_params(self) -> tuple[Tensor]:
        return (self.concentration,)

    def _log_normalizer(self, x):
        return _special.lgamma(x).sum(-1) - _special.lgamma(x.sum(-1))
