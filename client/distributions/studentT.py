"""torch.distributions.StudentT (the module keeps torch's name, ``studentT``)."""

from __future__ import annotations

import math

from tensorwire import combine as _combine
from tensorwire import special as _special
from tensorwire.tensor import Size, Tensor

from . import constraints
from .chi2 import Chi2
from .distribution import Distribution
from .utils import _standard_normal, broadcast_all

__all__ = ["StudentT"]


class StudentT(Distribution):
    """Student's t-distribution with ``df`` degrees of freedom, location ``loc`` and scale ``scale``:
    ``loc + scale * X / sqrt(Z / df)`` for ``X ~ Normal(0, 1)``, ``Z ~ Chi2(df)`` (how it samples; ``rsample``'s
    gradient in ``df`` is the Chi2 draw's implicit one). The mean is NaN for ``df <= 1``; the variance infinite for
    ``1 < df <= 2`` and NaN for ``df <= 1``, as torch's."""

    arg_constraints = {"df": constraints.positive, "loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    @property
    def mean(self) -> Tensor:
        return _combine.where(self.df <= 1, math.nan, self.loc)

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        above2 = self.df > 2
        df = _combine.where(above2, self.df, 3.0)  # (no inf or NaN in the branch that is not taken: its gradient)
        finite = self.scale.pow(2) * df / (df - 2)
        return _combine.where(above2, finite, _combine.where(self.df > 1, math.inf, math.nan))

    def __init__(self, df, loc=0.0, scale=1.0, validate_args: bool | None = None) -> None:
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._chi2 = Chi2(self.df)
        super().__init__(self.df.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(StudentT, _instance)
        batch_shape = Size(batch_shape)
        new.df = self.df.expand(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.scale = self.scale.expand(batch_shape)
        new._chi2 = self._chi2.expand(batch_shape)
        super(StudentT, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        x = _standard_normal(shape, self.df.dtype, self.df._dev, self.df._s)
        z = self._chi2.rsample(sample_shape)
        y = x * (z / self.df).rsqrt()
        return self.loc + self.scale * y

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        z = (self.scale.log() + 0.5 * self.df.log() + 0.5 * math.log(math.pi) + _special.lgamma(0.5 * self.df)
             - _special.lgamma(0.5 * (self.df + 1.0)))
        return -0.5 * (self.df + 1.0) * (y ** 2.0 / self.df).log1p() - z

    def entropy(self):
        lbeta = _special.lgamma(0.5 * self.df) + math.lgamma(0.5) - _special.lgamma(0.5 * (self.df + 1))
        return (self.scale.log()
                + 0.5 * (self.df + 1) * (_special.digamma(0.5 * (self.df + 1)) - _special.digamma(0.5 * self.df))
                + 0.5 * self.df.log() + lbeta)
