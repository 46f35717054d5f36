"""torch.distributions.LKJCholesky."""

from __future__ import annotations

import math

from tensorwire import autograd_engine as _autograd
from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire import dtype_info as _dtype_info
from tensorwire import linalg as _linalg
from tensorwire import special as _special
from tensorwire.tensor import Size

from . import constraints
from .beta import Beta
from .distribution import Distribution
from .utils import _standard_normal, broadcast_all

__all__ = ["LKJCholesky"]


class LKJCholesky(Distribution):
    """The LKJ distribution of the lower Cholesky factors ``L`` of ``dim x dim`` correlation matrices, with
    ``concentration`` (eta): ``L L^T`` has a density proportional to ``det(L L^T)^(eta - 1)`` (uniform over
    correlation matrices for eta = 1). Sampled by the onion method (Lewandowski, Kurowicka and Joe, 2009), as torch's
    (which follows NumPyro); no reparameterized sample."""

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim: int, concentration=1.0, validate_args: bool | None = None) -> None:
        if dim < 2:
            raise ValueError(f"Expected dim to be an integer greater than or equal to 2. Found dim={dim}.")
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        batch_shape = self.concentration.size()
        event_shape = Size((dim, dim))
        # the Beta marginals of the onion method: the squared norm of each row's off-diagonal part
        marginal_conc = self.concentration + 0.5 * (self.dim - 2)
        offset = _creation.arange(self.dim - 1, dtype=self.concentration.dtype, device=self.concentration._dev,
                                  session=self.concentration._s)
        offset = _combine.cat([offset.new_zeros((1,)), offset])
        beta_conc1 = offset + 0.5
        beta_conc0 = marginal_conc.unsqueeze(-1) - 0.5 * offset
        self._beta = Beta(beta_conc1, beta_conc0)
        super().__init__(batch_shape, event_shape, validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LKJCholesky, _instance)
        batch_shape = Size(batch_shape)
        new.dim = self.dim
        new.concentration = self.concentration.expand(batch_shape)
        new._beta = self._beta.expand(Size(tuple(batch_shape) + (self.dim,)))
        super(LKJCholesky, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape=Size()):
        """Each row ``i > 0``: a uniform direction in its first ``i`` coordinates scaled by the square root of a
        Beta draw, and the diagonal entry that makes the row's norm 1."""
        with _autograd.no_grad():
            y = self._beta.sample(sample_shape).unsqueeze(-1)
            u_normal = _standard_normal(self._extended_shape(sample_shape), y.dtype, y._dev, y._s).tril(-1)
            # (the first row has no entries below the diagonal: 0, not 0 / 0)
            rows = _creation.arange(self.dim, device=y._dev, session=y._s).reshape(-1, 1)
            norm = _linalg.vector_norm(u_normal, dim=-1, keepdim=True)
            u_hypersphere = _combine.where(rows > 0, u_normal / _combine.where(rows > 0, norm, 1.0), 0.0)
            w = y.sqrt() * u_hypersphere
            eps = _dtype_info.finfo(w.dtype).tiny
            diag_elems = (1 - (w ** 2).sum(-1)).clamp(min=eps).sqrt()
            return w + diag_elems.diag_embed()

    def log_prob(self, value):
        """(the density of ``L``, the Cholesky factor: not of ``L L^T``)"""
        if self._validate_args:
            self._validate_sample(value)
        diag_elems = value.diagonal(dim1=-1, dim2=-2)[..., 1:]
        order = _creation.arange(2, self.dim + 1, device=self.concentration._dev, session=self.concentration._s)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized_log_pdf = (order * diag_elems.log()).sum(-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        denominator = _special.lgamma(alpha) * dm1
        numerator = _special.multigammaln(alpha - 0.5, dm1)
        pi_constant = 0.5 * dm1 * math.log(math.pi)
        normalize_term = pi_constant + numerator - denominator
        return unnormalized_log_pdf - normalize_term
