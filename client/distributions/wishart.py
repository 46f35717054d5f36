"""torch.distributions.Wishart."""

from __future__ import annotations

import math
import warnings

from tensorwire import array_extras as _array_extras
from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire import dtype_info as _dtype_info
from tensorwire import linalg as _linalg
from tensorwire import linalg_legacy as _linalg_legacy
from tensorwire import special as _special
from tensorwire.tensor import Size, Tensor

from . import constraints
from .chi2 import Chi2
from .exp_family import ExponentialFamily
from .multivariate_normal import _precision_to_scale_tril
from .utils import _standard_normal, is_number, lazy_property, vec_to_tril_matrix

__all__ = ["Wishart"]

_log_2 = math.log(2)


def _mvdigamma(x: Tensor, p: int) -> Tensor:
    """The multivariate digamma function of dimension ``p`` (the derivative of ``multigammaln``). (torch asserts
    ``x > (p - 1) / 2`` here, a read: the distribution's ``df > p - 1`` already holds it.)"""
    halves = _creation.arange(p, dtype=x.dtype, device=x._dev, session=x._s) / 2
    return _special.digamma(x.unsqueeze(-1) - halves.expand(tuple(x.shape) + (-1,))).sum(-1)


def _clamp_above_eps(x: Tensor) -> Tensor:
    return x.clamp(min=_dtype_info.finfo(x.dtype).eps)


class Wishart(ExponentialFamily):
    """The Wishart distribution of ``p x p`` positive-definite matrices with ``df`` degrees of freedom (a real
    above ``p - 1``) and one of ``covariance_matrix``, ``precision_matrix`` or ``scale_tril`` (the lower Cholesky
    factor of the scale matrix, what every computation uses). Sampled by the Bartlett decomposition (``rsample``:
    reparameterized, its Chi2 draws' implicit gradients); a sample that is not positive definite (likely for
    ``p - 1 < df < p``) is drawn again up to ``max_try_correction`` times, with a warning."""

    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def arg_constraints(self):
        return {"covariance_matrix": constraints.positive_definite,
                "precision_matrix": constraints.positive_definite, "scale_tril": constraints.lower_cholesky,
                "df": constraints.greater_than(self.event_shape[-1] - 1)}

    def __init__(self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args: bool | None = None) -> None:
        if (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None) != 1:
            raise AssertionError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be "
                                 "specified.")
        param = next(p for p in (covariance_matrix, precision_matrix, scale_tril) if p is not None)
        if param.dim() < 2:
            raise ValueError("scale_tril must be at least two-dimensional, with optional leading batch dimensions")
        if is_number(df):
            batch_shape = Size(param.shape[:-2])
            self.df = _creation.tensor(df, dtype=param.dtype, device=param._dev, session=param._s)
        else:
            batch_shape = Size(_array_extras.broadcast_shapes(tuple(param.shape[:-2]), tuple(df.shape)))
            self.df = df.expand(batch_shape)
        event_shape = Size(param.shape[-2:])
        p = event_shape[-1]
        # (torch's two checks of df, read in one fetch)
        too_low, low = _combine.stack([self.df.le(p - 1).any(), self.df.lt(p).any()]).tolist()
        if too_low:
            raise ValueError(f"Value of df={df} expected to be greater than ndim - 1 = {p - 1}.")
        if scale_tril is not None:
            self.scale_tril = param.expand(tuple(batch_shape) + (-1, -1))
        elif covariance_matrix is not None:
            self.covariance_matrix = param.expand(tuple(batch_shape) + (-1, -1))
        else:
            self.precision_matrix = param.expand(tuple(batch_shape) + (-1, -1))
        if low:
            warnings.warn("Low df values detected. Singular samples are highly likely to occur for ndim - 1 < df < "
                          "ndim.", stacklevel=2)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        self._batch_dims = [-(x + 1) for x in range(len(self._batch_shape))]
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = _linalg.cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)
        self._dist_chi2 = self._bartlett_chi2(batch_shape)

    def _bartlett_chi2(self, batch_shape) -> Chi2:
        """The Chi2 draws of the Bartlett factor's diagonal: ``df - i`` degrees of freedom in row ``i``."""
        tril = self._unbroadcasted_scale_tril
        rows = _creation.arange(self._event_shape[-1], dtype=tril.dtype, device=tril._dev, session=tril._s)
        return Chi2(df=self.df.unsqueeze(-1) - rows.expand(tuple(batch_shape) + (-1,)))

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Wishart, _instance)
        batch_shape = Size(batch_shape)
        cov_shape = tuple(batch_shape) + tuple(self.event_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(cov_shape)
        new.df = self.df.expand(batch_shape)
        new._batch_dims = [-(x + 1) for x in range(len(batch_shape))]
        if "covariance_matrix" in self.__dict__:
            new.covariance_matrix = self.covariance_matrix.expand(cov_shape)
        if "scale_tril" in self.__dict__:
            new.scale_tril = self.scale_tril.expand(cov_shape)
        if "precision_matrix" in self.__dict__:
            new.precision_matrix = self.precision_matrix.expand(cov_shape)
        super(Wishart, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._dist_chi2 = new._bartlett_chi2(batch_shape)
        new._validate_args = self._validate_args
        return new

    def _matrix_shape(self) -> tuple:
        return tuple(self._batch_shape) + tuple(self._event_shape)

    @lazy_property
    def scale_tril(self) -> Tensor:
        return self._unbroadcasted_scale_tril.expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self) -> Tensor:
        L = self._unbroadcasted_scale_tril  # noqa: N806
        return L.matmul(L.mT).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self) -> Tensor:
        return _linalg_legacy.cholesky_inverse(self._unbroadcasted_scale_tril).expand(self._matrix_shape())

    def _per_matrix(self, t: Tensor) -> Tensor:
        """``t`` (of the batch shape) with two trailing dims of 1, to scale each matrix."""
        return t.reshape(tuple(self._batch_shape) + (1, 1))

    @property
    def mean(self) -> Tensor:
        return self._per_matrix(self.df) * self.covariance_matrix

    @property
    def mode(self) -> Tensor:
        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = _combine.where(factor <= 0, math.nan, factor)
        return self._per_matrix(factor) * self.covariance_matrix

    @property
    def variance(self) -> Tensor:
        V = self.covariance_matrix  # noqa: N806
        diag_V = V.diagonal(dim1=-2, dim2=-1)  # noqa: N806
        return self._per_matrix(self.df) * (V.pow(2) + diag_V.unsqueeze(-1) * diag_V.unsqueeze(-2))

    def _bartlett_sampling(self, sample_shape=Size()) -> Tensor:
        """``L A A^T L^T`` for ``A`` lower triangular: square roots of Chi2 draws on the diagonal, standard normal
        draws below it."""
        p = self._event_shape[-1]
        diag = _clamp_above_eps(self._dist_chi2.rsample(sample_shape).sqrt()).diag_embed(dim1=-2, dim2=-1)
        below = _standard_normal(tuple(sample_shape) + tuple(self._batch_shape) + (p * (p - 1) // 2,), diag.dtype,
                                 diag._dev, diag._s)
        noise = diag + vec_to_tril_matrix(below, diag=-1)
        chol = self._unbroadcasted_scale_tril.matmul(noise)
        return chol.matmul(chol.mT)

    def rsample(self, sample_shape=Size(), max_try_correction=None) -> Tensor:
        """Bartlett draws; each that is not positive definite (a singular matrix, whose ``log_prob`` would be
        ``-inf``) is drawn again, up to ``max_try_correction`` (10) times, with a warning. (torch's loop tests the
        wrong way round: it warns for, and redraws, the positive-definite samples.)"""
        if max_try_correction is None:
            max_try_correction = 10
        sample_shape = Size(sample_shape)
        sample = self._bartlett_sampling(sample_shape)
        is_singular = ~self.support.check(sample)
        if bool(is_singular.any()):
            warnings.warn("Singular sample detected.", stacklevel=2)
            for _ in range(max_try_correction):
                fresh = self._bartlett_sampling(sample_shape)
                sample = _combine.where(is_singular.unsqueeze(-1).unsqueeze(-1), fresh, sample)
                is_singular = ~self.support.check(sample)
                if not bool(is_singular.any()):
                    break
        return sample

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        nu = self.df
        p = self._event_shape[-1]
        half_log_det = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return (-nu * (p * _log_2 / 2 + half_log_det) - _special.multigammaln(nu / 2, p)
                + (nu - p - 1) / 2 * _linalg.slogdet(value).logabsdet
                - _linalg_legacy.cholesky_solve(value, self._unbroadcasted_scale_tril).diagonal(
                    dim1=-2, dim2=-1).sum(dim=-1) / 2)

    def entropy(self):
        nu = self.df
        p = self._event_shape[-1]
        half_log_det = self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return ((p + 1) * (p * _log_2 / 2 + half_log_det) + _special.multigammaln(nu / 2, p)
                - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p) + nu * p / 2)

    @property
    def _natural_params(self) -> tuple[Tensor, Tensor]:
        nu = self.df
        p = self._event_shape[-1]
        return -self.precision_matrix / 2, (nu - p - 1) / 2

    def _log_normalizer(self, x, y):
        p = self._event_shape[-1]
        return ((y + (p + 1) / 2) * (-_linalg.slogdet(-2 * x).logabsdet + _log_2 * p)
                + _special.multigammaln(y + (p + 1) / 2, p))
