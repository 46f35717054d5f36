"""torch.distributions.LowRankMultivariateNormal."""

from __future__ import annotations

import math

from tensorwire import array_extras as _array_extras
from tensorwire import creation as _creation
from tensorwire import linalg as _linalg
from tensorwire.tensor import Size, Tensor

from . import constraints
from .distribution import Distribution
from .multivariate_normal import _batch_mahalanobis, _batch_mv
from .utils import _standard_normal, lazy_property

__all__ = ["LowRankMultivariateNormal"]


def _plus_identity(k: Tensor) -> Tensor:
    """``k`` (a batch of square matrices) plus the identity."""
    return k + _creation.eye(k.shape[-1], dtype=k.dtype, device=k._dev, session=k._s)


def _batch_capacitance_tril(W, D):  # noqa: N803
    """The Cholesky factor of the capacitance ``I + W^T D^-1 W`` (a batch of matrices ``W``, vectors ``D``)."""
    Wt_Dinv = W.mT / D.unsqueeze(-2)  # noqa: N806
    return _linalg.cholesky(_plus_identity(Wt_Dinv.matmul(W)))


def _batch_lowrank_logdet(W, D, capacitance_tril):  # noqa: N803
    """``log |W W^T + D| = log |C| + log |D|`` (the matrix determinant lemma, C the capacitance)."""
    return 2 * capacitance_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) + D.log().sum(-1)


def _batch_lowrank_mahalanobis(W, D, x, capacitance_tril):  # noqa: N803
    """``x^T (W W^T + D)^-1 x`` by the Woodbury identity: ``(W W^T + D)^-1 = D^-1 - D^-1 W C^-1 W^T D^-1``."""
    Wt_Dinv = W.mT / D.unsqueeze(-2)  # noqa: N806
    Wt_Dinv_x = _batch_mv(Wt_Dinv, x)  # noqa: N806
    mahalanobis_term1 = (x.pow(2) / D).sum(-1)
    mahalanobis_term2 = _batch_mahalanobis(capacitance_tril, Wt_Dinv_x)
    return mahalanobis_term1 - mahalanobis_term2


class LowRankMultivariateNormal(Distribution):
    """The multivariate normal distribution with mean ``loc`` and the covariance ``cov_factor @ cov_factor.T +
    diag(cov_diag)`` (``cov_factor``: ``event x rank``): its log-determinant and inverse come from the small
    ``rank x rank`` capacitance matrix (the Woodbury identity and the matrix determinant lemma)."""

    arg_constraints = {"loc": constraints.real_vector, "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args: bool | None = None) -> None:
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        event_shape = Size(loc.shape[-1:])
        if cov_factor.dim() < 2:
            raise ValueError("cov_factor must be at least two-dimensional, with optional leading batch dimensions")
        if tuple(cov_factor.shape[-2:-1]) != tuple(event_shape):
            raise ValueError(f"cov_factor must be a batch of matrices with shape {event_shape[0]} x m")
        if tuple(cov_diag.shape[-1:]) != tuple(event_shape):
            raise ValueError(f"cov_diag must be a batch of vectors with shape {event_shape}")
        loc_ = loc.unsqueeze(-1)
        cov_diag_ = cov_diag.unsqueeze(-1)
        try:
            loc_, self.cov_factor, cov_diag_ = _array_extras.broadcast_tensors(loc_, cov_factor, cov_diag_)
        except (ValueError, RuntimeError) as e:
            raise ValueError(f"Incompatible batch shapes: loc {loc.shape}, cov_factor {cov_factor.shape}, "
                             f"cov_diag {cov_diag.shape}") from e
        self.loc = loc_[..., 0]
        self.cov_diag = cov_diag_[..., 0]
        batch_shape = self.loc.shape[:-1]
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        self._capacitance_tril = _batch_capacitance_tril(cov_factor, cov_diag)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LowRankMultivariateNormal, _instance)
        batch_shape = Size(batch_shape)
        loc_shape = tuple(batch_shape) + tuple(self.event_shape)
        new.loc = self.loc.expand(loc_shape)
        new.cov_diag = self.cov_diag.expand(loc_shape)
        new.cov_factor = self.cov_factor.expand(loc_shape + tuple(self.cov_factor.shape[-1:]))
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        super(LowRankMultivariateNormal, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _matrix_shape(self) -> tuple:
        return tuple(self._batch_shape) + tuple(self._event_shape) + tuple(self._event_shape)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @lazy_property
    def variance(self) -> Tensor:  # type: ignore[override]
        return (self._unbroadcasted_cov_factor.pow(2).sum(-1) + self._unbroadcasted_cov_diag).expand(
            tuple(self._batch_shape) + tuple(self._event_shape))

    @lazy_property
    def scale_tril(self) -> Tensor:
        """The lower Cholesky factor of the covariance: ``D^1/2 chol(I + D^-1/2 W W^T D^-1/2)``."""
        cov_diag_sqrt_unsqueeze = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        Dinvsqrt_W = self._unbroadcasted_cov_factor / cov_diag_sqrt_unsqueeze  # noqa: N806
        K = _plus_identity(Dinvsqrt_W.matmul(Dinvsqrt_W.mT))  # noqa: N806
        return (cov_diag_sqrt_unsqueeze * _linalg.cholesky(K)).expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self) -> Tensor:
        W = self._unbroadcasted_cov_factor  # noqa: N806
        return (W.matmul(W.mT) + self._unbroadcasted_cov_diag.diag_embed()).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self) -> Tensor:
        """By the Woodbury identity: ``D^-1 - A^T A`` for ``A = C_tril^-1 W^T D^-1``."""
        Wt_Dinv = self._unbroadcasted_cov_factor.mT / self._unbroadcasted_cov_diag.unsqueeze(-2)  # noqa: N806
        A = _linalg.solve_triangular(self._capacitance_tril, Wt_Dinv, upper=False)  # noqa: N806
        precision_matrix = self._unbroadcasted_cov_diag.reciprocal().diag_embed() - A.mT.matmul(A)
        return precision_matrix.expand(self._matrix_shape())

    def rsample(self, sample_shape=Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        w_shape = tuple(shape[:-1]) + tuple(self.cov_factor.shape[-1:])
        eps_w = _standard_normal(w_shape, self.loc.dtype, self.loc._dev, self.loc._s)
        eps_d = _standard_normal(shape, self.loc.dtype, self.loc._dev, self.loc._s)
        return (self.loc + _batch_mv(self._unbroadcasted_cov_factor, eps_w)
                + self._unbroadcasted_cov_diag.sqrt() * eps_d)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = _batch_lowrank_mahalanobis(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag, diff,  # noqa: N806
                                       self._capacitance_tril)
        log_det = _batch_lowrank_logdet(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                        self._capacitance_tril)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + log_det + M)

    def entropy(self):
        log_det = _batch_lowrank_logdet(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                        self._capacitance_tril)
        H = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + log_det)  # noqa: N806
        if len(self._batch_shape) == 0:
            return H
        return H.expand(tuple(self._batch_shape))
