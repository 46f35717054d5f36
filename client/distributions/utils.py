"""torch.distributions.utils: broadcasting parameters, probabilities and logits, ``lazy_property``, and the
draws the distributions sample from (the cluster's counter-based generator: ``tw.manual_seed`` seeds them)."""

from __future__ import annotations

from functools import update_wrapper
from numbers import Number

from tensorwire import array_extras as _array_extras
from tensorwire import autograd_engine as _autograd
from tensorwire import creation as _creation
from tensorwire import dtype_info as _dtype_info
from tensorwire.nn import functional as F
from tensorwire.protocol import dtypes as D
from tensorwire.tensor import Size, Tensor

euler_constant = 0.57721566490153286060  # Euler Mascheroni Constant

__all__ = ["broadcast_all", "logits_to_probs", "clamp_probs", "probs_to_logits", "lazy_property",
           "tril_matrix_to_vec", "vec_to_tril_matrix"]

def is_number(value) -> bool:
    """Whether ``value`` is a number (Python's, ``bool`` included as in torch, or numpy's), not a tensor."""
    return isinstance(value, Number) and not isinstance(value, Tensor)


def broadcast_all(*values) -> tuple[Tensor, ...]:
    """The values broadcast together: numbers become tensors of the first tensor's dtype and device (the default
    dtype when all are numbers). ValueError for anything else, as torch."""
    if not all(isinstance(v, Tensor) or is_number(v) for v in values):
        raise ValueError("Input arguments must all be instances of Number, torch.Tensor or objects implementing "
                         "__torch_function__.")
    if not all(isinstance(v, Tensor) for v in values):
        ref = next((v for v in values if isinstance(v, Tensor)), None)
        if ref is None:
            opts = {"dtype": D.get_default_dtype()}
        else:
            opts = {"dtype": ref.dtype, "device": ref._dev, "session": ref._s}
        values = tuple(v if isinstance(v, Tensor) else _creation.tensor(v, **opts) for v in values)
    return tuple(_array_extras.broadcast_tensors(*values))


def _standard_normal(shape, dtype, device, session=None) -> Tensor:
    """Standard normal draws of ``shape`` from the default generator."""
    return _creation.randn(tuple(shape), dtype=dtype, device=device, session=session)


def _standard_uniform(shape, dtype, device, session=None) -> Tensor:
    """Uniform draws on [0, 1) of ``shape`` from the default generator."""
    return _creation.rand(tuple(shape), dtype=dtype, device=device, session=session)


def _sum_rightmost(value, dim: int):
    """``value`` with its ``dim`` rightmost dims summed out."""
    if dim == 0:
        return value
    return value.reshape(tuple(value.shape[:-dim]) + (-1,)).sum(-1)


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    """Probabilities from logits: the sigmoid of log odds (``is_binary``), else the softmax of the last dim."""
    if is_binary:
        return logits.sigmoid()
    return F.softmax(logits, dim=-1)


def clamp_probs(probs: Tensor) -> Tensor:
    """``probs`` clamped to ``[eps, 1 - eps]`` of their dtype."""
    eps = _dtype_info.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    """Logits from probabilities: log odds (``is_binary``), else the log of each probability."""
    ps_clamped = clamp_probs(probs)
    if is_binary:
        return ps_clamped.log() - (-ps_clamped).log1p()
    return ps_clamped.log()


class lazy_property:  # noqa: N801 (torch's name)
    """A property computed (with grad enabled) at its first read and then kept as an instance attribute."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        update_wrapper(self, wrapped)

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return _lazy_property_and_property(self.wrapped)
        with _autograd.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


class _lazy_property_and_property(lazy_property, property):  # noqa: N801
    """A lazy property seen on the class: a property for documentation tools, a lazy_property for validation."""

    def __init__(self, wrapped):
        property.__init__(self, wrapped)


def _tril_mask(n: int, diag: int, like: Tensor) -> Tensor:
    r = _creation.arange(n, device=like._dev, session=like._s)
    return r < r.reshape(-1, 1) + (diag + 1)


def tril_matrix_to_vec(mat: Tensor, diag: int = 0) -> Tensor:
    """The lower-triangular elements (from ``diag``) of each ``D x D`` matrix, in row order."""
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    return mat[..., _tril_mask(n, diag, mat)]


def vec_to_tril_matrix(vec: Tensor, diag: int = 0) -> Tensor:
    """The ``D x D`` lower-triangular matrices (from ``diag``) whose elements, in row order, are ``vec``'s."""
    n = (-(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * vec.shape[-1] + 4 * abs(diag) * (diag + 1)) ** 0.5) / 2
    eps = _dtype_info.finfo(vec.dtype).eps
    if round(n) - n > eps:
        raise ValueError(f"The size of last dimension is {vec.shape[-1]} which cannot be expressed as the lower "
                         "triangular part of a square D x D matrix.")
    n = round(n)
    rows, cols = [], []
    for i in range(n):
        for j in range(n):
            if j < i + diag + 1:
                rows.append(i)
                cols.append(j)
    flat = _creation.tensor([i * n + j for i, j in zip(rows, cols)], dtype=D.int64, device=vec._dev,
                            session=vec._s)
    mat = vec.new_zeros(tuple(vec.shape[:-1]) + (n * n,))
    mat = mat.index_copy(-1, flat, vec) if len(rows) else mat
    return mat.reshape(Size(tuple(vec.shape[:-1]) + (n, n)))


class ProbsOrLogits:
    """What the families parametrized by ``probs`` or ``logits`` share (one of the two given, the other a
    :class:`lazy_property` of it; ``_param`` the one given): their ``expand``'s copy of it and ``_new``, as torch's
    Bernoulli, Binomial, Categorical ... each spell out."""

    def _expand_params(self, new, shape) -> None:
        """``new``'s ``probs`` or ``logits`` (whichever ``self`` holds; both when both were read) expanded to
        ``shape``, and its ``_param``."""
        if "probs" in self.__dict__:
            new.probs = self.probs.expand(shape)
            new._param = new.probs
        if "logits" in self.__dict__:
            new.logits = self.logits.expand(shape)
            new._param = new.logits

    def _new(self, *args, **kwargs):
        return self._param.new(*args, **kwargs)

    def _one_param(self, probs, logits) -> Size:
        """``probs`` or ``logits`` (exactly one given, else torch's ValueError) kept as given, broadcast, and as
        ``_param``; returns the batch shape (``()`` for a Python number): the one-parameter families' constructors."""
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            is_scalar = is_number(probs)
            (self.probs,) = broadcast_all(probs)
            self._param = self.probs
        else:
            is_scalar = is_number(logits)
            (self.logits,) = broadcast_all(logits)
            self._param = self.logits
        return Size() if is_scalar else self._param.size()

    def _count_and_param(self, total_count, probs, logits) -> None:
        """``total_count`` and ``probs`` or ``logits`` (exactly one given, else torch's ValueError) broadcast
        together, the count in the parameter's dtype (Binomial's and NegativeBinomial's constructors)."""
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            self.total_count, self.probs = broadcast_all(total_count, probs)
            self._param = self.probs
        else:
            self.total_count, self.logits = broadcast_all(total_count, logits)
            self._param = self.logits
        self.total_count = self.total_count.type_as(self._param)


class BinaryProbsOrLogits(ProbsOrLogits):
    """:class:`ProbsOrLogits` of one event's probability (Bernoulli, Binomial, Geometric ...): each of ``probs`` and
    ``logits`` the other's sigmoid or logit, as torch's classes each spell out."""

    @lazy_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self) -> Tensor:
        return logits_to_probs(self.logits, is_binary=True)
