"""torch.distributions.Distribution: the base class.

Validation (``validate_args``, on by default as in torch unless Python runs with ``-O``) reads its checks from the
cluster, so it is a sync point: a distribution's construction reads all its parameters' checks in ONE fetch (torch
checks them one by one, which would be a round trip each here), and ``log_prob``/``cdf`` read the value's support
check. Turn it off (``validate_args=False`` or :meth:`Distribution.set_default_validate_args`) to keep a training
loop free of those reads, as torch's documentation advises for speed.
"""

from __future__ import annotations

import warnings

from tensorwire import autograd_engine as _autograd
from tensorwire import combine as _combine
from tensorwire.tensor import Size, Tensor

from . import constraints
from .utils import lazy_property

__all__ = ["Distribution"]


def _all_true(checks: list[Tensor]) -> list[bool]:
    """Whether each bool tensor of ``checks`` is all true, read in one fetch."""
    if len(checks) == 1:
        return [bool(checks[0].all())]
    return [bool(v) for v in _combine.stack([c.all() for c in checks]).tolist()]


class Distribution:
    """The abstract base class of probability distributions: ``batch_shape`` (the shape over which parameters are
    batched), ``event_shape`` (the shape of one sample), ``validate_args``."""

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn validation on or off for every distribution that does not say otherwise (on by default, as
        Python's ``assert``)."""
        if value not in [True, False]:
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=Size(), event_shape=Size(), validate_args: bool | None = None) -> None:
        self._batch_shape = Size(batch_shape)
        self._event_shape = Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(f"{self.__class__} does not define `arg_constraints`. Please set "
                              "`arg_constraints = {}` or initialize the distribution with `validate_args=False` to "
                              "turn off validation.", stacklevel=2)
            checked = []
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue  # skip constraints that cannot be checked
                if param not in self.__dict__ and isinstance(getattr(type(self), param), lazy_property):
                    continue  # skip checking lazily-constructed args
                value = getattr(self, param)
                checked.append((param, value, constraint, constraint.check(value)))
            if checked:
                for (param, value, constraint, _), ok in zip(checked, _all_true([c[3] for c in checked])):
                    if not ok:
                        raise ValueError(f"Expected parameter {param} ({type(value).__name__} of shape "
                                         f"{tuple(value.shape)}) of distribution {self!r} to satisfy the "
                                         f"constraint {constraint!r}, but found invalid values:\n{value}")
        super().__init__()

    def expand(self, batch_shape, _instance=None):
        """A distribution with the batch dims expanded to ``batch_shape`` (its parameters expanded: no copy, no
        new validation)."""
        raise NotImplementedError

    @property
    def batch_shape(self) -> Size:
        """The shape over which parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self) -> Size:
        """The shape of a single sample (without batching)."""
        return self._event_shape

    @property
    def arg_constraints(self) -> dict:
        """The constraint of each tensor argument (a dict from its name)."""
        raise NotImplementedError

    @property
    def support(self):
        """The :class:`~tensorwire.distributions.constraints.Constraint` of the distribution's values."""
        raise NotImplementedError

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError

    @property
    def mode(self) -> Tensor:
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    def sample(self, sample_shape=Size()) -> Tensor:
        """A ``sample_shape`` batch of samples (no gradient)."""
        with _autograd.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=Size()) -> Tensor:
        """A ``sample_shape`` batch of reparameterized samples (gradients flow to the parameters)."""
        raise NotImplementedError

    def sample_n(self, n: int) -> Tensor:
        """``n`` samples (deprecated in torch: ``sample((n,))``)."""
        warnings.warn("`sample_n(n)` will be deprecated. Use `sample((n,))` instead.", FutureWarning, stacklevel=2)
        return self.sample(Size((n,)))

    def log_prob(self, value: Tensor) -> Tensor:
        """The log of the probability density or mass function at ``value``."""
        raise NotImplementedError

    def cdf(self, value: Tensor) -> Tensor:
        """The cumulative distribution function at ``value``."""
        raise NotImplementedError

    def icdf(self, value: Tensor) -> Tensor:
        """The inverse cumulative distribution function at ``value``."""
        raise NotImplementedError

    def enumerate_support(self, expand: bool = True) -> Tensor:
        """Every value of a discrete distribution's support along dim 0 (``(cardinality,) + batch_shape +
        event_shape``; with ``expand=False``, singleton batch dims)."""
        raise NotImplementedError

    def entropy(self) -> Tensor:
        """The entropy, of shape ``batch_shape``."""
        raise NotImplementedError

    def perplexity(self) -> Tensor:
        """``exp(entropy())``."""
        return self.entropy().exp()

    def _extended_shape(self, sample_shape=Size()) -> Size:
        """``sample_shape + batch_shape + event_shape``."""
        if not isinstance(sample_shape, Size):
            sample_shape = Size(sample_shape)
        return Size(tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape))

    def _validate_sample(self, value: Tensor) -> None:
        """ValueError unless ``value``'s rightmost dims are the event shape, it broadcasts with
        ``batch_shape + event_shape``, and every value is in the support (a sync point)."""
        self._check_in_support(self._sample_check(value), value)

    def _sample_check(self, value: Tensor) -> Tensor | None:
        """:meth:`_validate_sample`'s checks of ``value``'s type and shape (raised now), and its support check as a
        0-d bool tensor not read yet (None: no support to check). A ``log_prob`` whose computation reads a value
        anyway (a host solve's inputs) records this first and reads it after (:meth:`_check_in_support`): the flag
        comes back with that read, and the check costs no round trip of its own."""
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        event_dim_start = len(value.size()) - len(self._event_shape)
        if tuple(value.size()[event_dim_start:]) != tuple(self._event_shape):
            raise ValueError(f"The right-most size of value must match event_shape: {value.size()} vs "
                             f"{self._event_shape}.")
        actual_shape = value.size()
        expected_shape = Size(tuple(self._batch_shape) + tuple(self._event_shape))
        for i, j in zip(reversed(actual_shape), reversed(expected_shape)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: {actual_shape} vs "
                                 f"{expected_shape}.")
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{self.__class__} does not define `support` to enable sample validation. Please "
                          "initialize the distribution with `validate_args=False` to turn off validation.",
                          stacklevel=3)
            return None
        if support is None:
            raise AssertionError("support is unexpectedly None")
        return support.check(value).all()

    def _check_in_support(self, ok: Tensor | None, value: Tensor) -> None:
        """ValueError unless ``ok`` (:meth:`_sample_check`'s flag) is true."""
        if ok is not None and not bool(ok):
            raise ValueError(f"Expected value argument ({type(value).__name__} of shape {tuple(value.shape)}) to be "
                             f"within the support ({self.support!r}) of the distribution {self!r}, but found invalid "
                             f"values:\n{value}")

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                                      "__init__ method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        args = ", ".join(f"{p}: {self.__dict__[p] if self.__dict__[p].numel() == 1 else self.__dict__[p].size()}"
                         for p in names)
        return self.__class__.__name__ + "(" + args + ")"
