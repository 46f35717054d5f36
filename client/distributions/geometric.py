"""torch.distributions.Geometric."""

from __future__ import annotations

from tensorwire import autograd_engine as _autograd
from tensorwire import combine as _combine
from tensorwire import creation as _creation
from tensorwire import dtype_info as _dtype_info
from tensorwire.nn import functional as F
from tensorwire.tensor import Size, Tensor

from . import constraints
from .distribution import Distribution
from .utils import BinaryProbsOrLogits, _standard_uniform, broadcast_all

__all__ = ["Geometric"]


class Geometric(BinaryProbsOrLogits, Distribution):
    """The number of failures before the first success of Bernoulli trials of success probability ``probs`` (or
    ``sigmoid(logits)``; one of the two): ``P(k) = (1 - p)^k p`` on ``0, 1, ...`` (torch's convention, not
    ``Tensor.geometric_``'s, which counts the trials). ``probs`` must be in ``(0, 1]``."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        super().__init__(self._one_param(probs, logits), validate_args=validate_args)
        if self._validate_args and probs is not None:
            # (a second read: torch checks that probs is positive after the constraints)
            value = self.probs
            valid = value > 0
            if not bool(valid.all()):
                raise ValueError(f"Expected parameter probs ({type(value).__name__} of shape {tuple(value.shape)}) "
                                 f"of distribution {self!r} to be positive but found invalid values:\n"
                                 f"{value.detach()[~valid]}")

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Geometric, _instance)
        batch_shape = Size(batch_shape)
        self._expand_params(new, batch_shape)
        super(Geometric, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self) -> Tensor:
        return 1.0 / self.probs - 1.0

    @property
    def mode(self) -> Tensor:
        return _creation.zeros_like(self.probs)

    @property
    def variance(self) -> Tensor:
        return (1.0 / self.probs - 1.0) / self.probs

    def sample(self, sample_shape=Size()):
        """By inversion: ``floor(log(U) / log(1 - p))`` for ``U`` uniform on ``[tiny, 1)``."""
        shape = self._extended_shape(sample_shape)
        tiny = _dtype_info.finfo(self.probs.dtype).tiny
        with _autograd.no_grad():
            u = _standard_uniform(shape, self.probs.dtype, self.probs._dev, self.probs._s).clamp(min=tiny)
            return (u.log() / (-self.probs).log1p()).floor()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        probs = _combine.where((probs == 1) & (value == 0), 0.0, probs)  # (0 * log(0): 0, as torch's)
        return value * (-probs).log1p() + self.probs.log()

    def entropy(self):
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none") / self.probs
