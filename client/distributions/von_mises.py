"""torch.distributions.VonMises."""

from __future__ import annotations

import math

from tensorwire import autograd_engine as _autograd
from tensorwire import combine as _combine
from tensorwire import special as _special
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Size, Tensor

from . import constraints
from ._sampling import rejection
from .distribution import Distribution
from .utils import _standard_uniform, broadcast_all, lazy_property

__all__ = ["VonMises"]


def _log_modified_bessel_fn(x: Tensor, order: int = 0) -> Tensor:
    """``log(I_order(x))`` for ``x > 0``, ``order`` 0 or 1: from ``tw.special``'s exponentially scaled Bessel
    functions (Cephes' expansions: float64's accuracy, where torch's distribution uses a polynomial of about 1e-7
    relative error)."""
    if order not in (0, 1):
        raise AssertionError(f"order must be 0 or 1, got {order}")
    scaled = _special.i0e(x) if order == 0 else _special.i1e(x)
    return scaled.log() + x


class VonMises(Distribution):
    """The circular von Mises distribution with mean direction ``loc`` (radians; any real, read modulo 2 pi, as the
    values) and ``concentration``. ``mean`` and ``variance`` are the circular ones. Sampled in float64 by Best and
    Fisher's rejection method (1979), as torch's; no reparameterized sample."""

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    has_rsample = False

    def __init__(self, loc, concentration, validate_args: bool | None = None) -> None:
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, Size(), validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(VonMises, _instance)
        batch_shape = Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        super(VonMises, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_prob = self.concentration * (value - self.loc).cos()
        return log_prob - math.log(2 * math.pi) - _log_modified_bessel_fn(self.concentration, order=0)

    @lazy_property
    def _loc(self) -> Tensor:
        return self.loc.to(D.float64)

    @lazy_property
    def _concentration(self) -> Tensor:
        return self.concentration.to(D.float64)

    @lazy_property
    def _proposal_r(self) -> Tensor:
        kappa = self._concentration
        tau = 1 + (1 + 4 * kappa ** 2).sqrt()
        rho = (tau - (2 * tau).sqrt()) / (2 * kappa)
        proposal_r = (1 + rho ** 2) / (2 * rho)
        proposal_r_taylor = 1 / kappa + kappa
        return _combine.where(kappa < 1e-5, proposal_r_taylor, proposal_r)

    def sample(self, sample_shape=Size()):
        """Best and Fisher's proposals (``_sampling.rejection``), in float64 (torch's reason: single precision can
        fail to accept for small concentrations)."""
        shape = tuple(self._extended_shape(sample_shape))
        with _autograd.no_grad():
            loc, r = self._loc, self._proposal_r
            conc = self._concentration

            def propose(rounds):
                u = _standard_uniform((3, rounds, *shape), D.float64, loc._dev, loc._s)
                u1, u2, u3 = u.unbind()
                z = (math.pi * u1).cos()
                f = ((1 + r * z) / (r + z)).clamp(min=-1.0, max=1.0)
                c = conc * (r - f)
                accept = ((c * (2 - c) - u2) > 0) | ((c / u2).log() + 1 - c >= 0)
                return (u3 - 0.5).sign() * f.acos(), accept

            x = rejection(loc, shape, propose)
            return ((x + math.pi + loc) % (2 * math.pi) - math.pi).to(self.loc.dtype)

    @property
    def mean(self) -> Tensor:
        """The circular mean: ``loc``."""
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @lazy_property
    def variance(self) -> Tensor:  # type: ignore[override]
        """The circular variance: ``1 - I1(concentration) / I0(concentration)``."""
        return 1 - (_log_modified_bessel_fn(self.concentration, order=1)
                    - _log_modified_bessel_fn(self.concentration, order=0)).exp()
