"""torch.distributions.Categorical."""

from __future__ import annotations

import math

from tensorwire import array_extras as _array_extras
from tensorwire import autograd_engine as _autograd
from tensorwire import creation as _creation
from tensorwire import dtype_info as _dtype_info
from tensorwire import sorting as _sorting
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Size, Tensor

from . import constraints
from .distribution import Distribution
from .utils import ProbsOrLogits, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["Categorical"]


class Categorical(ProbsOrLogits, Distribution):
    """Integers ``0 .. K-1`` with the probabilities ``probs`` (normalized along the last dim) or
    ``softmax(logits)``; the leading dims are a batch. The distribution ``tw.multinomial`` samples from."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.size()[-1]
        batch_shape = self._param.size()[:-1] if self._param.ndimension() > 1 else Size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Categorical, _instance)
        batch_shape = Size(batch_shape)
        param_shape = Size(tuple(batch_shape) + (self._num_events,))
        self._expand_params(new, param_shape)
        new._num_events = self._num_events
        super(Categorical, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self) -> Tensor:
        return logits_to_probs(self.logits)

    @property
    def param_shape(self) -> Size:
        return self._param.size()

    @property
    def mean(self) -> Tensor:
        return _creation.full(self._extended_shape(), math.nan, dtype=self.probs.dtype, device=self.probs._dev,
                              session=self.probs._s)

    @property
    def mode(self) -> Tensor:
        return self.probs.argmax(dim=-1)

    @property
    def variance(self) -> Tensor:
        return _creation.full(self._extended_shape(), math.nan, dtype=self.probs.dtype, device=self.probs._dev,
                              session=self.probs._s)

    def sample(self, sample_shape=Size()):
        if not isinstance(sample_shape, Size):
            sample_shape = Size(sample_shape)
        with _autograd.no_grad():
            probs_2d = self.probs.reshape(-1, self._num_events)
            samples_2d = _sorting.multinomial(probs_2d, sample_shape.numel(), True).T
            return samples_2d.reshape(self._extended_shape(sample_shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = _array_extras.broadcast_tensors(value, self.logits)
        value = value[..., :1]
        return log_pmf.gather(-1, value).squeeze(-1)

    def entropy(self):
        min_real = _dtype_info.finfo(self.logits.dtype).min
        logits = self.logits.clamp(min=min_real)
        p_log_p = logits * self.probs
        return -p_log_p.sum(-1)

    def enumerate_support(self, expand=True):
        values = _creation.arange(self._num_events, dtype=D.int64, device=self._param._dev, session=self._param._s)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values
