"""torch.distributions.ExponentialFamily: densities ``exp(<t(x), θ> - F(θ) + k(x))``, whose entropy and KL
divergence follow from the log normalizer ``F`` by autograd (Bregman divergences)."""

from __future__ import annotations

from tensorwire import autograd_engine as _autograd
from tensorwire.tensor import Tensor

from .distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    """The base class of exponential families: subclasses give ``_natural_params``, ``_log_normalizer`` and
    ``_mean_carrier_measure``."""

    @property
    def _natural_params(self) -> tuple[Tensor, ...]:
        """The natural parameters θ."""
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        """The log normalizer F(θ)."""
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self) -> float:
        """E[k(x)], needed for the entropy."""
        raise NotImplementedError

    def entropy(self):
        """The entropy from the Bregman divergence of the log normalizer (its gradient by autograd)."""
        result = -self._mean_carrier_measure
        nparams = [p.detach().requires_grad_() for p in self._natural_params]
        lg_normal = self._log_normalizer(*nparams)
        gradients = _autograd.grad(lg_normal.sum(), nparams, create_graph=True)
        result = result + lg_normal
        for np_, g in zip(nparams, gradients):
            result = result - (np_ * g).reshape(tuple(self._batch_shape) + (-1,)).sum(-1)
        return result
